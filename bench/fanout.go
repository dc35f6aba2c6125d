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
	"github.com/magicsync/magicsync/server"
)

// drain takes and acknowledges a replica's messages, as a replica that
// applies everything at once would, until none comes within a short wait.
func drain(ctx context.Context, s *server.Server, id uuid.UUID) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		msg, ok, err := s.Endpoint().Next(wctx, id, server.Applied{})
		cancel()
		if err != nil {
			return err
		}
		if !ok {
			return nil
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
		cols := t.GetColumns()
		if len(cols) == 0 {
			cols = nv.tc.ColumnNames(nil)
		}
		at := slices.Index(cols, "price")
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
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			msg, ok, err := e.s.Endpoint().Next(wctx, id, server.Applied{})
			cancel()
			if err == nil && ok {
				var k int
				switch k, _, err = rowsIn(msg.Body); {
				case err != nil:
				case k > 0:
					err = fmt.Errorf("replica %s was sent %d rows more after its change", id, k)
				default: // a message without rows is no work owed
					err = e.s.Endpoint().Ack(ctx, id, msg.ID)
				}
			}
			if err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	var busy bool
	if err := e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM public.sync_outbox)
		OR EXISTS (SELECT 1 FROM public.sync_replicas WHERE provision_needed OR snapshot <> 0)
		OR EXISTS (SELECT 1 FROM public.sync_memberships m JOIN public.sync_groups g ON g.id = m.grp WHERE m.acked_pos < g.head)`).Scan(&busy); err != nil {
		return err
	}
	if busy {
		return errors.New("the server still owes the replicas messages after each took every row's new value")
	}
	return nil
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
	ids, err := e.addReplicas(ctx, replicas)
	if err != nil {
		return nil, err
	}
	rows := items(n, 4)
	if err := e.copyItems(ctx, rows); err != nil {
		return nil, err
	}
	if err := e.passAll(ctx); err != nil {
		return nil, err
	}
	tc, err := codec.TableOf[Item](e.codecs)
	if err != nil {
		return nil, err
	}
	nv := newValues{tc: tc, price: make(map[string]int64, n)}
	for i := range rows {
		k, err := tc.KeyOf(&rows[i])
		if err != nil {
			return nil, err
		}
		nv.price[string(k)] = rows[i].Price + 1
	}
	c.note("provisioning %d replicas with %d rows each", replicas, n)
	if err := drainUntilSettled(ctx, e.s, e.pool, ids); err != nil {
		return nil, err
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE`); err != nil {
		return nil, err
	}
	// The change, committed.
	if _, err := e.pool.Exec(ctx, `UPDATE bench.items SET price = price + 1, updated_at = updated_at + interval '1 second'`); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := e.hooks.Pass(ctx); err != nil {
		return nil, err
	}
	planned := time.Since(start)
	var mu sync.Mutex
	var firstErr error
	var last time.Time
	var msgs, sent int
	var wg sync.WaitGroup
	// Each replica's messages, kept to be read once the clock stopped:
	// decoding every row meanwhile would take the CPU the server needs.
	bodies := make([][][]byte, len(ids))
	for r, id := range ids {
		wg.Go(func() {
			err := func() error {
				got := 0
				for got < n {
					wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					msg, ok, err := e.s.Endpoint().Next(wctx, id, server.Applied{})
					cancel()
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
					bodies[r] = append(bodies[r], msg.Body)
					got += k
					mu.Lock()
					msgs++
					sent += k
					mu.Unlock()
					if err := e.s.Endpoint().Ack(ctx, id, msg.ID); err != nil {
						return err
					}
				}
				// The clock stops at the last acknowledgement.
				now := time.Now()
				mu.Lock()
				if now.After(last) {
					last = now
				}
				mu.Unlock()
				return nil
			}()
			if err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	elapsed := last.Sub(start)
	// Every replica was sent the new value of every row: counted as
	// distinct keys, a row sent twice, or one without its new value (a
	// provisioning's), would have stopped the clock early.
	for r, id := range ids {
		seen := make(map[string]bool, n)
		for _, body := range bodies[r] {
			if _, err := nv.count(body, seen); err != nil {
				return nil, err
			}
		}
		if len(seen) != n {
			return nil, fmt.Errorf("replica %s took messages carrying %d rows' new values, want %d: the clock stopped early", id, len(seen), n)
		}
	}
	bodies = nil
	if err := nothingOwed(ctx, e, ids); err != nil {
		return nil, err
	}
	deliveries := float64(n * replicas)
	return []result{
		{name: "4 broadcast change fans out", unit: "deliveries/s", figure: deliveries / elapsed.Seconds(),
			bounds: []bound{figureFloor(250_000)},
			note: fmt.Sprintf("%d rows × %d replicas in %v: pass %v, then %d messages built and acknowledged (Next, Ack), carrying %d rows; checked after: each replica was sent every row's new value, and nothing more is owed",
				n, replicas, elapsed.Round(time.Millisecond), planned.Round(time.Millisecond), msgs, sent)},
		{name: "4 broadcast change: messages", unit: "msgs/s", figure: float64(msgs) / elapsed.Seconds(),
			note: "messages built, handed out and acknowledged per second, over the same time"},
		{name: "4 planner pass alone", unit: "rows/s", figure: float64(n) / planned.Seconds(),
			note: "changed rows logged for their group per second of the pass"},
	}, nil
}
