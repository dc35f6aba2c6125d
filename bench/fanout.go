package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// drain takes and acknowledges a replica's messages, as a replica that
// applies everything at once would, until none comes within a short wait.
func drain(ctx context.Context, s *server.Server, id uuid.UUID) error {
	for {
		msg, ok, err := nextWithin(ctx, s, id, 300*time.Millisecond)
		if err != nil || !ok {
			return err
		}
		if err := s.Endpoint().Ack(ctx, id, msg.ID); err != nil {
			return err
		}
	}
}

// drainAll drains every replica, a few at a time.
func drainAll(ctx context.Context, s *server.Server, ids []uuid.UUID, parallel int) error {
	work := make(chan uuid.UUID)
	errs := make(chan error, parallel)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for id := range work {
				if err := drain(ctx, s, id); err != nil {
					errs <- err
					for range work {
					}
					return
				}
			}
		})
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

// newValues tells, in a message to a replica, the rows that carry a new
// value: those whose price is the one a key is to have after the change.
type newValues struct {
	tc    *codec.TableCodec
	price map[string]int64 // by the row's key, the price after the change
}

// count adds to seen the keys of the message's rows that carry their new
// value, and returns how many rows the message brought in all.
func (nv newValues) count(body []byte, seen map[string]bool) (rows int, err error) {
	m, err := wire.DecodeToReplica(body)
	if err != nil {
		return 0, err
	}
	var vals []wire.Value
	for _, t := range m.GetDown().GetTables() {
		rows += len(t.GetUpserts()) + len(t.GetDeletes())
		if t.GetTable() != nv.tc.Name {
			continue
		}
		at := columnAt(nv.tc, t, "price")
		keys := t.GetUpsertKeys()
		if at < 0 || len(keys) != len(t.GetUpserts()) {
			return 0, fmt.Errorf("a message's %s carry no price or no keys", t.GetTable())
		}
		for i, tuple := range t.GetUpserts() {
			want, ok := nv.price[string(keys[i])]
			if !ok {
				continue
			}
			if vals, err = wire.DecodeTuple(tuple, vals[:0]); err != nil {
				return 0, err
			}
			if at < len(vals) && vals[at].Kind == wire.Int && vals[at].I == want {
				seen[string(keys[i])] = true
			}
		}
	}
	return rows, nil
}

// nothingOwed checks that no replica is sent more: a message still to come
// would be work the clock did not count. Each replica asks once more, and
// the server's tables must hold no message, provisioning or cursor behind
// its group's head.
func nothingOwed(ctx context.Context, e *serverEnv, ids []uuid.UUID) error {
	err := askOnceMore(ctx, e.s, ids, func(id uuid.UUID, msg server.Message) error {
		switch k, _, err := rowsIn(msg.Body); {
		case err != nil:
			return err
		case k > 0:
			return fmt.Errorf("replica %s was sent %d rows more after its change", id, k)
		default: // a message without rows is no work owed
			return e.s.Endpoint().Ack(ctx, id, msg.ID)
		}
	})
	if err != nil {
		return err
	}
	busy, err := e.stillOwed(ctx)
	if err != nil {
		return err
	}
	if busy {
		return errors.New("the server still owes the replicas messages after each took every row's new value")
	}
	return nil
}

// askOnceMore has every replica, all at once, call Next once more with a
// short wait, and hands each message one gets to check: after a measured
// change, a message still to come is work the clock did not count. It
// returns the first error.
func askOnceMore(ctx context.Context, s *server.Server, ids []uuid.UUID, check func(id uuid.UUID, msg server.Message) error) error {
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			msg, ok, err := nextWithin(ctx, s, id, 300*time.Millisecond)
			if err == nil && ok {
				err = check(id, msg)
			}
			if err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return firstErr
}

// nextWithin is replica id's Next, waiting at most wait for a message.
func nextWithin(ctx context.Context, s *server.Server, id uuid.UUID, wait time.Duration) (server.Message, bool, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return s.Endpoint().Next(wctx, id, server.Applied{})
}

// columnAt is the index of column name in t's tuples: t's columns, or all
// of tc's in order when the message leaves them out. It is -1 when t
// carries no such column.
func columnAt(tc *codec.TableCodec, t *syncpb.TableChanges, name string) int {
	cols := t.GetColumns()
	if len(cols) == 0 {
		cols = tc.ColumnNames(nil)
	}
	return slices.Index(cols, name)
}

// rowsIn counts the rows a message to a replica brings, and tells a
// provisioning's end.
func rowsIn(body []byte) (rows int, end bool, err error) {
	m, err := wire.DecodeToReplica(body)
	if err != nil {
		return 0, false, err
	}
	for _, t := range m.GetDown().GetTables() {
		rows += len(t.Upserts) + len(t.Deletes)
	}
	return rows, m.GetEndSnapshot() != nil, nil
}

// benchFanout: one transaction changes every row of a broadcast catalog of
// 10,000 rows held by 100 replicas. Measured from the commit until every
// row-delivery is in a built message: the planner's pass logs the change
// for the group, then each replica (all at once, one goroutine each) calls
// Next until the messages it got carry 10,000 rows, acknowledging each (a
// replica's next message is built only once the previous one is
// acknowledged: that is the design). Once the clock stopped, it checks
// that each replica's messages carried the new value of each of the
// 10,000 rows (distinct keys: a row sent twice counts once, a row without
// its new value not at all), and that nothing more is owed. The replicas
// are provisioned beforehand until the server's tables say every
// provisioning ended: one left half done would count its rows as the
// change's. No floor on the pass alone; it is reported as changed rows
// per second.
func benchFanout(ctx context.Context, c config) ([]result, error) {
	n := c.scale(10_000, 1_000)
	replicas := c.scale(100, 10)
	e, err := newServerEnv(ctx, c, 8, serverOptions(c))
	if err != nil {
		return nil, err
	}
	defer e.close()
	ids, nv, err := adoptFanoutCatalog(ctx, e, n, replicas)
	if err != nil {
		return nil, err
	}
	c.note("provisioning %d replicas with %d rows each", replicas, n)
	if err := drainUntilSettled(ctx, e.s, e.pool, ids); err != nil {
		return nil, err
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE`); err != nil {
		return nil, err
	}
	fc := &fanoutChange{bodies: make([][][]byte, len(ids))}
	if err := fc.commitAndPass(ctx, e); err != nil {
		return nil, err
	}
	if err := fc.takeAll(ctx, e.s, ids, n); err != nil {
		return nil, err
	}
	if err := nv.checkSent(ids, fc.bodies, n); err != nil {
		return nil, err
	}
	fc.bodies = nil
	if err := nothingOwed(ctx, e, ids); err != nil {
		return nil, err
	}
	return fanoutResults(n, replicas, fc), nil
}

// adoptFanoutCatalog adds the replicas and a broadcast catalog of n rows,
// and has the engine adopt them. It returns the replicas, and the price
// each row is to have after the change.
func adoptFanoutCatalog(ctx context.Context, e *serverEnv, n, replicas int) ([]uuid.UUID, newValues, error) {
	rows := items(n, 4)
	ids, err := e.adopt(ctx, replicas, rows)
	if err != nil {
		return nil, newValues{}, err
	}
	tc, err := codec.TableOf[Item](e.codecs)
	if err != nil {
		return nil, newValues{}, err
	}
	nv := newValues{tc: tc, price: make(map[string]int64, n)}
	for i := range rows {
		k, err := tc.KeyOf(&rows[i])
		if err != nil {
			return nil, newValues{}, err
		}
		nv.price[string(k)] = rows[i].Price + 1
	}
	return ids, nv, nil
}

// fanoutChange is benchmark 4's change as it fans out: the pass that logs
// it, and the messages the replicas take of it.
type fanoutChange struct {
	start   time.Time     // when the pass began, the change committed
	planned time.Duration // the pass

	mu       sync.Mutex
	firstErr error
	last     time.Time // the last acknowledgement, where the clock stops
	msgs     int       // messages taken
	sent     int       // rows they carried
	// bodies are each replica's messages, kept to be read once the clock
	// stopped: decoding every row meanwhile would take the CPU the server
	// needs.
	bodies [][][]byte
}

// commitAndPass commits the change of every row, then times the planner's
// pass that logs it for the group: the clock starts there.
func (fc *fanoutChange) commitAndPass(ctx context.Context, e *serverEnv) error {
	if _, err := e.pool.Exec(ctx, `UPDATE bench.items SET price = price + 1, updated_at = updated_at + interval '1 second'`); err != nil {
		return err
	}
	fc.start = time.Now()
	if err := e.hooks.Pass(ctx); err != nil {
		return err
	}
	fc.planned = time.Since(fc.start)
	return nil
}

// takeAll has every replica, all at once, take and acknowledge messages
// until they carried n rows, and returns the first error.
func (fc *fanoutChange) takeAll(ctx context.Context, s *server.Server, ids []uuid.UUID, n int) error {
	var wg sync.WaitGroup
	for r, id := range ids {
		wg.Go(func() {
			if err := fc.take(ctx, s, r, id, n); err != nil {
				fc.mu.Lock()
				fc.firstErr = cmp.Or(fc.firstErr, err)
				fc.mu.Unlock()
			}
		})
	}
	wg.Wait()
	return fc.firstErr
}

// take has replica id, the r-th, call Next until the messages it got carry
// n rows, acknowledging each: its next message is built only once the
// previous one is acknowledged.
func (fc *fanoutChange) take(ctx context.Context, s *server.Server, r int, id uuid.UUID, n int) error {
	got := 0
	for got < n {
		msg, ok, err := nextWithin(ctx, s, id, 30*time.Second)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("replica %s: no message after %d of %d rows: %w", id, got, n, errTimeout)
		}
		k, _, err := rowsIn(msg.Body)
		if err != nil {
			return err
		}
		fc.bodies[r] = append(fc.bodies[r], msg.Body)
		got += k
		fc.mu.Lock()
		fc.msgs++
		fc.sent += k
		fc.mu.Unlock()
		if err := s.Endpoint().Ack(ctx, id, msg.ID); err != nil {
			return err
		}
	}
	// The clock stops at the last acknowledgement.
	now := time.Now()
	fc.mu.Lock()
	if now.After(fc.last) {
		fc.last = now
	}
	fc.mu.Unlock()
	return nil
}

// checkSent checks that every replica was sent the new value of each of
// the n rows: counted as distinct keys, a row sent twice, or one without
// its new value (a provisioning's), would have stopped the clock early.
func (nv newValues) checkSent(ids []uuid.UUID, bodies [][][]byte, n int) error {
	for r, id := range ids {
		seen := make(map[string]bool, n)
		for _, body := range bodies[r] {
			if _, err := nv.count(body, seen); err != nil {
				return err
			}
		}
		if len(seen) != n {
			return fmt.Errorf("replica %s took messages carrying %d rows' new values, want %d: the clock stopped early", id, len(seen), n)
		}
	}
	return nil
}

// fanoutResults are benchmark 4's figures: n rows changed, fanned out to
// replicas.
func fanoutResults(n, replicas int, fc *fanoutChange) []result {
	elapsed := fc.last.Sub(fc.start)
	deliveries := float64(n * replicas)
	return []result{
		{name: "4 broadcast change fans out", unit: "deliveries/s", figure: deliveries / elapsed.Seconds(),
			bounds: []bound{figureFloor(250_000)},
			note: fmt.Sprintf("%d rows × %d replicas in %v: pass %v, then %d messages built and acknowledged (Next, Ack), carrying %d rows; checked after: each replica was sent every row's new value, and nothing more is owed",
				n, replicas, elapsed.Round(time.Millisecond), fc.planned.Round(time.Millisecond), fc.msgs, fc.sent)},
		{name: "4 broadcast change: messages", unit: "msgs/s", figure: float64(fc.msgs) / elapsed.Seconds(),
			note: "messages built, handed out and acknowledged per second, over the same time"},
		{name: "4 planner pass alone", unit: "rows/s", figure: float64(n) / fc.planned.Seconds(),
			note: "changed rows logged for their group per second of the pass"},
	}
}
