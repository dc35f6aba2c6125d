package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/httpsync"
)

// applied is what the latency benchmark's receiver saw of one message.
type applied struct {
	id  uint64
	got replica.Received
	// began and when are when the replica's Receive of it was called and
	// when it returned.
	began, when time.Time
}

// percentile returns the p-th percentile (0 < p ≤ 1) of sorted ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	i := int(float64(len(ds))*p+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchLatency: a product update committed on the server until a replica
// applied it, over httpsync on loopback, one update at a time, in both
// capture modes (inBothModes). The clock starts before the UPDATE
// statement (an autocommitted transaction) is sent, and stops when the
// replica's Receive returned (its SQLite transaction committed); between
// the two: Run learns of the change — its watch sees the triggers' note
// within PollEvery, or its reader of the slot notes the change it
// streams — and passes, the pass wakes the replica's long-poll, Next
// builds the message, HTTP carries it, the replica applies it. The next
// update waits for the acknowledgement. Baseline: the same UPDATE on a
// table the engine does not capture plus one SQLite transaction upserting
// one row at the same durability, one after each update of the engine's
// (ABAB), so that a change of the machine's load weighs on both alike.
func benchLatency(ctx context.Context, c config) ([]result, error) {
	return inBothModes(ctx, c, latencyIn)
}

// latencyIn is benchmark 5 in c's capture mode.
func latencyIn(ctx context.Context, c config) ([]result, error) {
	n := c.scale(1_000, 100)
	rows := items(latencyCatalog, 5)
	e, members, err := newIssuedEnv(ctx, c, 8, 1, rows)
	if err != nil {
		return nil, err
	}
	defer e.close()
	eng := e.runEngine(ctx)
	defer eng.stop()
	l := &latencyRun{e: e, acks: make(chan uint64, 16), seen: make(chan applied, 16)}
	srv, err := serveLoopback(newHandler(e.s, c.log, l.acked), c.log)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	rep, err := startReplica(ctx, replicaSpec{path: filepath.Join(c.dir, "latency.db"), id: members[0].ID, token: members[0].Token, url: srv.url,
		hc: httpClient(4), log: c.log, codecs: e.codecs, wrap: l.watch})
	if err != nil {
		return nil, err
	}
	defer rep.stop()
	if err := l.waitProvisioned(ctx); err != nil {
		return nil, err
	}
	if l.tc, err = codec.TableOf[Item](e.codecs); err != nil {
		return nil, err
	}
	base, err := newLatencyBaseline(ctx, c, e)
	if err != nil {
		return nil, err
	}
	defer base.close()
	lat, baseLat, err := l.alternate(ctx, base, rows, n)
	if err != nil {
		return nil, err
	}
	slices.Sort(l.receives)
	return latencyResults(c, n, lat, baseLat, l.receives), nil
}

// latencyCatalog is the rows of benchmark 5's catalog, updated in turn.
const latencyCatalog = 100

// latencyRun is benchmark 5's replica as the benchmark sees it: the
// messages it applied, and the acknowledgements the server took.
type latencyRun struct {
	e    *serverEnv
	tc   *codec.TableCodec
	acks chan uint64
	seen chan applied
	// receives are the times the replica's Receive of each update took,
	// part of its latency.
	receives []time.Duration
}

// acked hands each acknowledgement the server took on to acks, or drops it
// when acks is full: the server's handler is not to wait for the
// benchmark.
func (l *latencyRun) acked(_ uuid.UUID, msg uint64) {
	select {
	case l.acks <- msg:
	default:
	}
}

// watch wraps the replica's Receive: what it applied is handed on to seen.
func (l *latencyRun) watch(r *replica.Replica) httpsync.Receiver {
	return receiveFunc(func(ctx context.Context, msg []byte) (replica.Received, error) {
		began := time.Now()
		got, err := r.Endpoint().Receive(ctx, msg)
		if err == nil {
			m, _ := wire.DecodeToReplica(msg)
			select {
			case l.seen <- applied{id: m.GetId(), got: got, began: began, when: time.Now()}:
			case <-ctx.Done():
			}
		}
		return got, err
	})
}

// waitProvisioned waits for the replica's provisioning, then for the
// acknowledgement of its end.
func (l *latencyRun) waitProvisioned(ctx context.Context) error {
	for {
		a, err := waitFor(ctx, l.seen, 30*time.Second)
		if err != nil {
			return fmt.Errorf("provisioning the replica: %w", err)
		}
		if a.got.Provisioned {
			return waitAck(ctx, l.acks, a.id)
		}
	}
}

// alternate times n updates of the engine's and n of the baseline's, one
// of each in turn (ABAB), so that both see the same machine. It returns
// the engine's times and the baseline's, each sorted.
func (l *latencyRun) alternate(ctx context.Context, base *latencyBaseline, rows []Item, n int) ([]time.Duration, []time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	baseLat := make([]time.Duration, 0, n)
	for i := range n {
		it := &rows[i%latencyCatalog]
		d, err := l.update(ctx, it, i)
		if err != nil {
			return nil, nil, err
		}
		lat = append(lat, d)
		if d, err = base.once(ctx, *it, i); err != nil {
			return nil, nil, err
		}
		baseLat = append(baseLat, d)
	}
	slices.Sort(lat)
	slices.Sort(baseLat)
	return lat, baseLat, nil
}

// update times the i-th update, of row it: from before the UPDATE until the
// replica's Receive that applied it returned. It returns once the server
// took the acknowledgement of that message, so that the next update
// waits for it.
func (l *latencyRun) update(ctx context.Context, it *Item, i int) (time.Duration, error) {
	key, err := l.tc.KeyOf(it)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if _, err := l.e.pool.Exec(ctx, `UPDATE bench.items SET price = price + 1, updated_at = clock_timestamp() WHERE id = $1`, it.ID); err != nil {
		return 0, err
	}
	var took time.Duration
	var last uint64
	for done := false; !done; {
		a, err := waitFor(ctx, l.seen, 10*time.Second)
		if err != nil {
			return 0, fmt.Errorf("update %d: %w", i, err)
		}
		last = a.id
		if slices.Contains(a.got.Applied["items"], magicsync.Key(key)) {
			took = a.when.Sub(start)
			l.receives = append(l.receives, a.when.Sub(a.began))
			done = true
		}
	}
	if err := waitAck(ctx, l.acks, last); err != nil {
		return 0, fmt.Errorf("update %d: %w", i, err)
	}
	return took, nil
}

// latencyResults are benchmark 5's figures, from the sorted times of n
// updates of the engine's and of the baseline's, and of the replica's
// Receive of each, in c's capture mode: logical capture's goals are 4 ms
// at p50 and 12 ms at p99.
func latencyResults(c config, n int, lat, baseLat, receives []time.Duration) []result {
	note := fmt.Sprintf("%d updates, one at a time, each followed by one of the baseline: PostgreSQL UPDATE (a table not captured) + SQLite upsert, FULL; the replica's Receive took %.2f ms of it at p50",
		n, ms(percentile(receives, 0.5)))
	return []result{
		{name: "5 update reaches a replica, p50", unit: "ms", figure: ms(percentile(lat, 0.5)), baseline: ms(percentile(baseLat, 0.5)),
			bounds: append([]bound{ceiling(12)}, c.logicalGoals(goal(atMost, 4))...), note: note},
		{name: "5 update reaches a replica, p99", unit: "ms", figure: ms(percentile(lat, 0.99)), baseline: ms(percentile(baseLat, 0.99)),
			bounds: append([]bound{ceiling(30)}, c.logicalGoals(goal(atMost, 12))...), note: fmt.Sprintf("max %.1f ms; the replica's Receive %.2f ms at p99", ms(lat[len(lat)-1]), ms(percentile(receives, 0.99)))},
	}
}

// waitAck waits until the server took the acknowledgement of message id
// (or a later one).
func waitAck(ctx context.Context, acks <-chan uint64, id uint64) error {
	for {
		got, err := waitFor(ctx, acks, 10*time.Second)
		if err != nil {
			return fmt.Errorf("waiting for the acknowledgement of message %d: %w", id, err)
		}
		if got >= id {
			return nil
		}
	}
}

// latencyBaseline is benchmark 5's baseline: a PostgreSQL UPDATE of one
// row of a table like bench.items but not captured (no triggers, not in
// the publication), then a one-row SQLite transaction at the replica's
// durability.
type latencyBaseline struct {
	e    *serverEnv
	lite *sqliteBaseline
}

// newLatencyBaseline copies bench.items into a table the engine does not
// capture and opens the baseline's SQLite file.
func newLatencyBaseline(ctx context.Context, c config, e *serverEnv) (*latencyBaseline, error) {
	if err := e.copyPlainItems(ctx); err != nil {
		return nil, err
	}
	lite, err := openSQLiteBaseline(ctx, c, "latency-base.db")
	if err != nil {
		return nil, err
	}
	return &latencyBaseline{e: e, lite: lite}, nil
}

func (b *latencyBaseline) close() { b.lite.close() }

// once times the baseline's i-th pair for row it.
func (b *latencyBaseline) once(ctx context.Context, it Item, i int) (time.Duration, error) {
	start := time.Now()
	if _, err := b.e.pool.Exec(ctx, `UPDATE bench.items_plain SET price = price + 1, updated_at = clock_timestamp() WHERE id = $1`, it.ID); err != nil {
		return 0, err
	}
	it.Price += int64(i)
	if err := b.lite.upsertOne(ctx, it); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
