package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/magicsync/magicsync/server"
)

// capture.go runs the benchmarks that compare the server's two ways of
// capture (server.Options.Capture) — 5, 10, 11 and 16 — once in each: by
// triggers and by logical replication, on the same server with
// wal_level=logical (pgSource's logical one), so that both modes meet the
// same PostgreSQL, its durability and its WAL alike. Each result is named
// with its mode; the goals the issue set for logical capture are judged
// on its results alone, the floors on both.

// bothModesBenchmarks names the benchmarks that run in both modes, for the
// results' header.
const bothModesBenchmarks = "5, 10, 11 and 16"

// captureModes are the modes the benchmarks run in, in this order.
var captureModes = []server.Capture{server.CaptureTriggers, server.CaptureLogical}

// modeName is a mode as the results name it.
func modeName(c server.Capture) string {
	if c == server.CaptureLogical {
		return "logical"
	}
	return "triggers"
}

// inBothModes runs body once in each capture mode, triggers first, on the
// server with wal_level=logical, each in a directory of its own under
// c.dir, and returns the results of both, each name followed by its mode
// (and c's linger, when set): "5 update reaches a replica, p50 (logical)".
func inBothModes(ctx context.Context, c config, body func(ctx context.Context, c config) ([]result, error)) ([]result, error) {
	var out []result
	for _, mode := range captureModes {
		mc := c
		mc.onLogical, mc.capture = true, mode
		// Each run's SQLite files are its own.
		dir, err := os.MkdirTemp(c.dir, modeName(mode)+"-")
		if err != nil {
			return nil, err
		}
		mc.dir = dir
		name := modeName(mode)
		if c.linger > 0 {
			name += ", Linger " + c.linger.String()
		}
		c.note("capture by %s", name)
		rs, err := body(ctx, mc)
		if err != nil {
			return nil, fmt.Errorf("capture by %s: %w", name, err)
		}
		for i := range rs {
			rs[i].name += " (" + name + ")"
		}
		out = append(out, rs...)
	}
	return out, nil
}

// benchLinger is the engine's Options.Linger in the second pair of runs
// of inBothModesAndLingered.
const benchLinger = 100 * time.Millisecond

// inBothModesAndLingered runs body in both modes (inBothModes) twice:
// with the engine's defaults, then with Options.Linger at benchLinger,
// which trades a change's latency for the engine's work per host
// transaction.
func inBothModesAndLingered(ctx context.Context, c config, body func(ctx context.Context, c config) ([]result, error)) ([]result, error) {
	out, err := inBothModes(ctx, c, body)
	if err != nil {
		return nil, err
	}
	c.linger = benchLinger
	lingered, err := inBothModes(ctx, c, body)
	return append(out, lingered...), err
}

// logicalGoals are bs when the benchmark runs under logical capture,
// nothing otherwise: the goals set for that mode alone.
func (c config) logicalGoals(bs ...bound) []bound {
	if c.capture != server.CaptureLogical {
		return nil
	}
	return bs
}

// awaitReading runs the engine and waits until its reader of the slot
// (CaptureLogical) noted the rows it found there first and streams.
func (e *serverEnv) awaitReading(ctx context.Context) error {
	e.runEngine(ctx)
	return pollUntil(ctx, time.Minute, "the engine reading its replication slot", func() (bool, error) {
		var reading bool
		err := e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM public.sync_capture)
			AND EXISTS (SELECT 1 FROM pg_replication_slots WHERE database = current_database() AND active)`).Scan(&reading)
		return reading, err
	})
}

// awaitCaptured waits until the engine's Run, reading the host's writes
// from the slot (CaptureLogical), adopted replicas replicas and planned
// rows catalog rows, and no note is left: what passAll does under
// triggers, with nothing but Run to read the notes' source.
func (e *serverEnv) awaitCaptured(ctx context.Context, replicas, rows int) error {
	e.runEngine(ctx)
	return pollUntil(ctx, 2*time.Minute, "the engine planning what its slot brought", func() (bool, error) {
		var done bool
		err := e.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM public.sync_replicas) >= $1
			AND (SELECT count(*) FROM public.sync_rows) >= $2
			AND NOT EXISTS (SELECT 1 FROM public.sync_touched)`, replicas, rows).Scan(&done)
		return done, err
	})
}

// pollUntil asks done every 20 ms until it says so, it fails, or timeout
// passes; what names the wait in the error.
func pollUntil(ctx context.Context, timeout time.Duration, what string, done func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := done()
		switch {
		case err != nil:
			return fmt.Errorf("waiting for %s: %w", what, err)
		case ok:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("waiting for %s: %w", what, errTimeout)
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}
