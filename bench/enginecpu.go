package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// benchEngineCPU: the engine's own PostgreSQL CPU per host transaction at
// a low, steady rate, in both capture modes (inBothModes). Host clients,
// a pool of their own, run single-row autocommitted UPDATEs of a broadcast
// catalog paced to 200 a second in all (streamUpdates, as benchmark 10's
// stream, at a lower pace) for a fixed time, while three replicas (those
// of benchmark 10: engines over SQLite files, httpsync on loopback) sync
// and Run plans. Measured from outside, as pgbench would be: the CPU time
// of the PostgreSQL backends (pgMeter: pg_stat_activity by
// application_name, /proc/PID/stat) of the engine's pool — its planner,
// its watch, the handler's Next and Ack, and under logical capture its
// reader's notes and the walsender of its replication connection, which
// takes the pool's application_name — and, apart, of the host's writers,
// from before the stream until every replica held every row's last
// version. The engine's per host transaction is the figure, the host's
// own its baseline; under triggers the host's figure holds the triggers'
// notes, written in its transactions. Goal, in both modes: 0.5 ms.
//
// Both modes run twice: with the engine's defaults, which plan and
// deliver each change as soon as it is seen, and with Options.Linger at
// cpuLinger, which has one pass and one message carry the host
// transactions of a linger; each run's note gives the changes' lag, what
// the linger costs.
func benchEngineCPU(ctx context.Context, c config) ([]result, error) {
	return inBothModesAndLingered(ctx, c, engineCPUIn)
}

// Benchmark 16's steady load.
const (
	cpuClients = 4
	cpuRate    = 200.0 // host transactions a second, in all
	cpuGoal    = 0.5   // ms of the engine's PostgreSQL CPU a host transaction
	// cpuCatchUp bounds the wait for the replicas after the stream, which
	// the span measured includes: benchmark 10 counts what did not arrive.
	cpuCatchUp = 10 * time.Second
)

// engineCPUIn is benchmark 16 in c's capture mode.
func engineCPUIn(ctx context.Context, c config) ([]result, error) {
	r := &streamRun{c: c, catalog: c.scale(10_000, 1_000), streamFor: time.Duration(c.scale(30, 5)) * time.Second}
	codecs, err := benchCodecs()
	if err != nil {
		return nil, err
	}
	engineApp, hostApp := appName("engine"), appName("host")
	e, err := newEnv(ctx, c, envSpec{maxConns: 16, opts: serverOptions(c), schema: pgSchema, codecs: codecs, app: engineApp})
	if err != nil {
		return nil, err
	}
	defer e.close()
	rig, err := startStreamRig(ctx, c, e, r.catalog)
	if err != nil {
		return nil, err
	}
	defer rig.stop()
	cat, f := rig.cat, rig.fleet
	writers, err := openPoolNamed(ctx, e.db.url, cpuClients, nil, hostApp)
	if err != nil {
		return nil, err
	}
	defer writers.Close()
	own, err := openPool(ctx, e.db.url, 2, nil)
	if err != nil {
		return nil, err
	}
	defer own.Close()
	if err := warmPool(ctx, writers, cpuClients); err != nil {
		return nil, err
	}
	if e.db.stats != nil {
		e.db.stats.reset() // -sqlstats: the engine's statements of the stream alone
	}
	return r.measureCPU(ctx, cat, f, writers, cpuMeters{engine: &pgMeter{pool: own, apps: []string{engineApp}}, host: &pgMeter{pool: own, apps: []string{hostApp}}})
}

// cpuMeters are benchmark 16's meters: of the engine's backends and of
// the host's writers'.
type cpuMeters struct {
	engine, host *pgMeter
}

// measureCPU runs the steady stream from writers, waits until the
// replicas caught up, and returns the backends' CPU per host transaction.
func (r *streamRun) measureCPU(ctx context.Context, cat streamCatalog, f *streamFleet, writers *pgxpool.Pool, m cpuMeters) ([]result, error) {
	walsenders, err := walsenderPIDs(ctx, m.engine)
	if err != nil {
		return nil, err
	}
	engineA, hostA := m.engine.sample(ctx), m.host.sample(ctx)
	r.start = time.Now()
	changes, each, err := streamUpdates(ctx, writers, cat.rows, cat.keys, cpuClients, cpuRate, r.streamFor)
	if err != nil {
		return nil, err
	}
	r.end = time.Now()
	if len(changes) == 0 {
		return nil, fmt.Errorf("the stream committed no change")
	}
	r.changes, r.each = changes, each
	behind := r.waitCaughtUp(f.meters, cpuCatchUp)
	span := time.Since(r.start)
	engineB, hostB := m.engine.sample(ctx), m.host.sample(ctx)
	n := float64(len(changes))
	perTx := func(secs float64) float64 { return secs * 1000 / n }
	res := m.engine.result("16 engine's PostgreSQL CPU per host transaction", "ms", engineA, engineB, perTx,
		"", goal(atMost, cpuGoal))
	if res.unmeasured {
		return []result{res}, nil
	}
	engineSecs, _ := m.engine.between(engineA, engineB)
	hostSecs, ok := m.host.between(hostA, hostB)
	host := "the host's writers' backends: not measured (" + m.host.unmeasured() + ")"
	if ok {
		res.baseline = perTx(hostSecs)
		host = fmt.Sprintf("baseline: the host's writers' backends, %.1f %% of a core", 100*hostSecs/span.Seconds())
	}
	res.note = fmt.Sprintf("%d clients, single-row autocommitted UPDATEs of a %d-row broadcast catalog paced to %.0f/s (%.0f/s achieved, %d in %v; an UPDATE took %.2f ms), 3 replicas syncing; the engine's backends used %.1f %% of a core until the replicas caught up (%v), %s; %s",
		cpuClients, r.catalog, cpuRate, n/r.end.Sub(r.start).Seconds(), len(changes), r.streamFor, ms(each),
		100*engineSecs/span.Seconds(), span.Round(time.Millisecond), walsenderShare(walsenders, engineA, engineB, perTx), host)
	if lags := sortedLags(outcome(changes, f.meters).samples); len(lags) > 0 {
		res.note += fmt.Sprintf("; a change's lag to a replica (as 10's) p50 %.1f ms, p99 %.1f ms",
			ms(percentile(lags, 0.5)), ms(percentile(lags, 0.99)))
	}
	if behind > 0 {
		res.note += fmt.Sprintf("; %d rows' last versions (counted once a replica) had not arrived %v after the stream, which the span includes", behind, cpuCatchUp)
	}
	return []result{res}, nil
}

// walsenderPIDs are the walsenders among the backends m meters: the
// replication connection of logical capture, which takes the
// application_name of the engine's pool; none under triggers.
func walsenderPIDs(ctx context.Context, m *pgMeter) ([]int, error) {
	rows, err := m.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = ANY($1) AND backend_type = 'walsender'`, m.apps)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// walsenderShare says what the walsenders used of the engine's backends'
// CPU time from a until b, per host transaction (perTx).
func walsenderShare(pids []int, a, b backendCPU, perTx func(secs float64) float64) string {
	if len(pids) == 0 {
		return "no walsender among them"
	}
	var secs float64
	for _, pid := range pids {
		secs += b[pid] - a[pid]
	}
	return fmt.Sprintf("%.2f ms a host transaction of it the walsender's", perTx(secs))
}

// warmPool opens n connections of pool at once, so that a span measured
// afterwards does not count their start.
func warmPool(ctx context.Context, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}
