package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/httpsync"
)

// lagSample is one change as one replica applied it: when it was written
// (the row's updated_at) and how long after that the replica's Receive of
// it returned.
type lagSample struct {
	sent time.Time
	lag  time.Duration
}

// lagMeter is what one replica's receiver measures: the lag of every row
// of the stream it applies.
type lagMeter struct {
	tc    *codec.TableCodec
	from  atomic.Int64 // the stream's start, Unix microseconds; rows written before are not samples
	mu    sync.Mutex
	got   []lagSample
	newer atomic.Int64 // the latest updated_at applied, Unix microseconds
	vals  []wire.Value // the receiver's own, reused
}

// measure reads the rows of a message the replica applied at now.
func (m *lagMeter) measure(msg []byte, now time.Time) error {
	decoded, err := wire.DecodeToReplica(msg)
	if err != nil {
		return err
	}
	from := m.from.Load()
	for _, t := range decoded.GetDown().GetTables() {
		if t.GetTable() != m.tc.Name {
			continue
		}
		cols := t.GetColumns()
		if len(cols) == 0 {
			cols = m.tc.ColumnNames(nil)
		}
		at := slices.Index(cols, "updated_at")
		if at < 0 {
			return fmt.Errorf("a message's %s have no updated_at", t.GetTable())
		}
		for _, tuple := range t.GetUpserts() {
			if m.vals, err = wire.DecodeTuple(tuple, m.vals[:0]); err != nil {
				return err
			}
			if at >= len(m.vals) || m.vals[at].Kind != wire.Time {
				return fmt.Errorf("a row's updated_at is no time")
			}
			micros := m.vals[at].I
			if micros > m.newer.Load() {
				m.newer.Store(micros)
			}
			if from == 0 || micros < from {
				continue
			}
			sent := time.UnixMicro(micros)
			m.mu.Lock()
			m.got = append(m.got, lagSample{sent: sent, lag: now.Sub(sent)})
			m.mu.Unlock()
		}
	}
	return nil
}

// benchStreaming: eight clients write a steady stream of single-row
// autocommitted UPDATEs of a broadcast catalog (as benchmark 11 does),
// paced to 5,000 a second in all, while three replicas — engines over
// SQLite files of their own, over httpsync on loopback, the server's Run
// and handler in this process — keep up. Each UPDATE sets the row's
// updated_at to clock_timestamp(); each replica's receiver decodes every
// message it applied and takes, per row, the time from that updated_at
// until its Receive returned: the lag of the change, from a moment a
// little before its commit. Reported: the changes per second achieved,
// the p50 and p99 lag, and whether the lag grows (the median of the last
// window of the stream against that of the first).
func benchStreaming(ctx context.Context, c config) ([]result, error) {
	const (
		clients  = 8
		replicas = 3
		target   = 5_000.0 // changes a second, in all
	)
	streamFor := time.Duration(c.scale(60, 5)) * time.Second
	catalog := c.scale(10_000, 500)
	e, err := newServerEnv(ctx, c, 16, serverOptions(c))
	if err != nil {
		return nil, err
	}
	defer e.close()
	ids, err := e.addReplicas(ctx, replicas)
	if err != nil {
		return nil, err
	}
	rows := items(catalog, 10)
	if err := e.copyItems(ctx, rows); err != nil {
		return nil, err
	}
	if err := e.passAll(ctx); err != nil {
		return nil, err
	}
	tokens, err := credentials(ctx, e.s, ids)
	if err != nil {
		return nil, err
	}
	tc, err := codec.TableOf[Item](e.codecs)
	if err != nil {
		return nil, err
	}
	eng := runEngine(ctx, e.s)
	defer eng.stop()
	srv, err := serveLoopback(newHandler(e.s, c.log, nil), c.log)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	provisioned := make(chan struct{}, replicas)
	meters := make([]*lagMeter, replicas)
	hc := httpClient(4 * replicas)
	defer hc.CloseIdleConnections()
	for i := range replicas {
		m := &lagMeter{tc: tc}
		meters[i] = m
		rep, err := startReplica(ctx, replicaSpec{path: filepath.Join(c.dir, fmt.Sprintf("stream-%d.db", i)), id: ids[i], token: tokens[i],
			url: srv.url, hc: hc, log: c.log, codecs: e.codecs,
			wrap: func(r *replica.Replica) httpsync.Receiver {
				return receiveFunc(func(ctx context.Context, msg []byte) (replica.Received, error) {
					got, err := r.Receive(ctx, msg)
					if err != nil || got.Redelivered {
						return got, err
					}
					now := time.Now()
					if got.Provisioned {
						provisioned <- struct{}{}
					}
					if _, changed := got.Applied[tc.Name]; changed {
						if err := m.measure(msg, now); err != nil {
							return got, fmt.Errorf("bench: measuring a message: %w", err)
						}
					}
					return got, nil
				})
			}})
		if err != nil {
			return nil, err
		}
		defer rep.stop()
	}
	for range replicas {
		if _, err := waitFor(ctx, provisioned, 2*time.Minute); err != nil {
			return nil, fmt.Errorf("provisioning the replicas: %w", err)
		}
	}
	if err := waitQuiet(ctx, e, time.Minute); err != nil {
		return nil, err
	}
	writers, err := openPool(ctx, e.db.url, clients, nil)
	if err != nil {
		return nil, err
	}
	defer writers.Close()

	start := time.Now()
	for _, m := range meters {
		m.from.Store(start.UnixMicro())
	}
	changes, each, err := streamUpdates(ctx, writers, rows, clients, target, streamFor)
	if err != nil {
		return nil, err
	}
	end := time.Now()
	secs := end.Sub(start).Seconds()
	// Every replica applies the stream's last change.
	var last time.Time
	if err := e.pool.QueryRow(ctx, `SELECT max(updated_at) FROM bench.items`).Scan(&last); err != nil {
		return nil, err
	}
	caughtUp := true
	for deadline := time.Now().Add(2 * time.Minute); ; {
		behind := 0
		for _, m := range meters {
			if m.newer.Load() < last.UnixMicro() {
				behind++
			}
		}
		if behind == 0 {
			break
		}
		if time.Now().After(deadline) {
			caughtUp = false
			c.note("%d replicas of %d had not applied the stream's last change 2 minutes after it", behind, replicas)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var all []lagSample
	for _, m := range meters {
		m.mu.Lock()
		all = append(all, m.got...)
		m.mu.Unlock()
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("no change of the stream reached a replica")
	}
	lags := make([]time.Duration, len(all))
	for i, s := range all {
		lags[i] = s.lag
	}
	slices.Sort(lags)
	p50, p99 := percentile(lags, 0.5), percentile(lags, 0.99)
	window := min(10*time.Second, streamFor/5)
	first := medianLag(all, start, start.Add(window))
	lastMedian := medianLag(all, end.Add(-window), end)
	growth := 0.0
	if first > 0 {
		growth = float64(lastMedian) / float64(first)
	}
	rate := float64(changes) / secs
	caught := ""
	if !caughtUp {
		caught = "; the replicas had not caught up 2 minutes after the stream"
	}
	return []result{
		{name: "10 streaming: changes written", unit: "changes/s", figure: rate, bounds: []bound{goal(atLeast, target)},
			note: fmt.Sprintf("%d clients, single-row autocommitted UPDATEs of a %d-row broadcast catalog, paced to %.0f/s in all, for %v, while %d replicas (SQLite, httpsync) sync; an UPDATE took %.2f ms on average, its commit included",
				clients, catalog, target, streamFor, replicas, ms(each))},
		{name: "10 streaming: lag p50", unit: "ms", figure: ms(p50),
			note: fmt.Sprintf("from the row's updated_at (clock_timestamp() in the UPDATE, just before its commit) until a replica's Receive of it returned; %d deliveries%s", len(lags), caught)},
		{name: "10 streaming: lag p99", unit: "ms", figure: ms(p99), bounds: []bound{ceiling(1000)},
			note: fmt.Sprintf("max %.0f ms", ms(lags[len(lags)-1]))},
		{name: "10 streaming: lag growth", unit: "×", figure: growth, bounds: []bound{ceiling(2)},
			note: fmt.Sprintf("median lag of the last %v of the stream (%.1f ms) over that of the first (%.1f ms)",
				window, ms(lastMedian), ms(first))},
	}, nil
}

// medianLag is the median lag of the changes written in [from, to).
func medianLag(all []lagSample, from, to time.Time) time.Duration {
	var in []time.Duration
	for _, s := range all {
		if !s.sent.Before(from) && s.sent.Before(to) {
			in = append(in, s.lag)
		}
	}
	if len(in) == 0 {
		return 0
	}
	slices.Sort(in)
	return percentile(in, 0.5)
}

// streamUpdates runs single-row autocommitted UPDATEs from clients
// goroutines for d, paced to rate a second in all (a client that falls
// behind its pace by more than 100 ms does not catch up in a burst), and
// returns how many committed and their mean time, from the statement's
// start until its commit returned.
func streamUpdates(ctx context.Context, pool *pgxpool.Pool, rows []Item, clients int, rate float64, d time.Duration) (int64, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	const sql = `UPDATE bench.items SET price = price + 1, updated_at = clock_timestamp() WHERE id = $1`
	every := time.Duration(float64(clients) / rate * float64(time.Second))
	var done, busy atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for w := range clients {
		wg.Go(func() {
			next := time.Now().Add(time.Duration(w) * every / time.Duration(clients))
			for i := w; ctx.Err() == nil; i += clients {
				if wait := time.Until(next); wait > 0 {
					if !sleepCtx(ctx, wait) {
						return
					}
				} else if wait < -100*time.Millisecond {
					next = time.Now()
				}
				next = next.Add(every)
				began := time.Now()
				if _, err := pool.Exec(ctx, sql, rows[i%len(rows)].ID); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				busy.Add(int64(time.Since(began)))
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, fmt.Errorf("updating bench.items: %w", err)
	}
	n := done.Load()
	if n == 0 {
		return 0, 0, nil
	}
	return n, time.Duration(busy.Load() / n), nil
}
