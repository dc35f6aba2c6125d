package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgreSQL's share of a delivery is the CPU time of the backends that
// serve the server processes' pools: each server process names its
// connections (application_name), pg_stat_activity gives their pids, and
// /proc/PID/stat their user and system time, as /proc/self gives the
// server's own. That needs PostgreSQL on this machine, in the same pid
// namespace; else the figure is not measured rather than wrong.

// errPGNotHere is a backend's pid that is no postgres process here: the
// server runs on another machine (or in a container of its own), or this
// is no Linux.
var errPGNotHere = errors.New("PostgreSQL's backends are not processes of this machine: its CPU time is not measured")

// appName is a fresh application_name for one server process's pool.
func appName(role string) string {
	return "magicsync-bench-" + role + "-" + rand.Text()[:8]
}

// backendCPU is the CPU time, in seconds, of each backend now connected
// under one of the names, by pid.
type backendCPU map[int]float64

// sampleBackends reads the CPU time of the backends connected under apps,
// asking pg_stat_activity through pool (a pool of the benchmark's, whose
// statements no server counts).
func sampleBackends(ctx context.Context, pool *pgxpool.Pool, apps []string) (backendCPU, error) {
	// The benchmark's own backend tells whether PostgreSQL runs here: a
	// backend of the servers' missing from /proc has ended since.
	rows, err := pool.Query(ctx, `SELECT pid, pid = pg_backend_pid() FROM pg_stat_activity
		WHERE application_name = ANY($1) OR pid = pg_backend_pid()`, apps)
	if err != nil {
		return nil, fmt.Errorf("the servers' backends: %w", err)
	}
	defer rows.Close()
	out := backendCPU{}
	for rows.Next() {
		var pid int
		var own bool
		if err := rows.Scan(&pid, &own); err != nil {
			return nil, err
		}
		secs, comm, ok := procCPU(pid)
		switch {
		case own && (!ok || comm != "postgres"):
			return nil, errPGNotHere
		case own, !ok:
		case comm != "postgres":
			return nil, errPGNotHere
		default:
			out[pid] = secs
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// since is the CPU time the backends of b used since a: a backend new
// since a counts whole (it began after a), one gone since a is lost, its
// last part with it.
func (b backendCPU) since(a backendCPU) float64 {
	var sum float64
	for pid, secs := range b {
		sum += secs - a[pid]
	}
	return sum
}

// pgMeter measures the CPU time of the backends of some server processes
// over spans of a benchmark; when they cannot be read it says why, once,
// and measures nothing.
type pgMeter struct {
	pool *pgxpool.Pool
	apps []string
	err  error // errPGNotHere, or why the meter failed
}

// sample is a reading to measure a span from; nil when the meter cannot
// read.
func (m *pgMeter) sample(ctx context.Context) backendCPU {
	if m.err != nil {
		return nil
	}
	s, err := sampleBackends(ctx, m.pool, m.apps)
	if err != nil {
		m.err = err
		return nil
	}
	return s
}

// between is the CPU time, in seconds, the backends used from a until b;
// ok is false when either reading is missing.
func (m *pgMeter) between(a, b backendCPU) (secs float64, ok bool) {
	if m.err != nil || a == nil || b == nil {
		return 0, false
	}
	return b.since(a), true
}

// unmeasured says why the meter measured nothing, for a result's note.
func (m *pgMeter) unmeasured() string {
	if m.err == nil {
		return ""
	}
	return m.err.Error()
}

// pgCPUResult is a result of the backends' CPU time from a until b, as
// figure(seconds); when it could not be measured, a dash and why.
func (m *pgMeter) result(name, unit string, a, b backendCPU, figure func(secs float64) float64, note string, bounds ...bound) result {
	r := result{name: name, unit: unit, bounds: bounds, note: note}
	secs, ok := m.between(a, b)
	if !ok {
		r.unmeasured, r.note = true, m.unmeasured()
		return r
	}
	r.figure = figure(secs)
	return r
}
