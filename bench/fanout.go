package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/server"
)

// drain takes and acknowledges a replica's messages, as a replica that
// applies everything at once would, until none comes within a short wait.
func drain(ctx context.Context, s *server.Server, id uuid.UUID) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		msg, ok, err := s.Next(wctx, id)
		cancel()
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if err := s.Ack(ctx, id, msg.ID); err != nil {
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
// Next until the messages it got carry all 10,000 rows, acknowledging each
// but the last (a replica's next message is built only once the previous
// one is acknowledged: that is the design). No floor on the pass alone; it
// is reported as changed rows per second.
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
	if err := e.copyItems(ctx, items(n, 4)); err != nil {
		return nil, err
	}
	if err := e.passAll(ctx); err != nil {
		return nil, err
	}
	c.note("provisioning %d replicas with %d rows each", replicas, n)
	if err := drainAll(ctx, e.s, ids, 4); err != nil {
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
	if err := e.s.Pass(ctx); err != nil {
		return nil, err
	}
	planned := time.Since(start)
	var mu sync.Mutex
	var firstErr error
	var last time.Time
	var msgs int
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			err := func() error {
				got := 0
				for {
					wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					msg, ok, err := e.s.Next(wctx, id)
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
					got += k
					mu.Lock()
					msgs++
					mu.Unlock()
					if err := e.s.Ack(ctx, id, msg.ID); err != nil {
						return err
					}
					if got >= n {
						// The clock stops at the last acknowledgement.
						now := time.Now()
						mu.Lock()
						if now.After(last) {
							last = now
						}
						mu.Unlock()
						return nil
					}
				}
			}()
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	elapsed := last.Sub(start)
	deliveries := float64(n * replicas)
	return []result{
		{name: "4 broadcast change fans out", unit: "deliveries/s", figure: deliveries / elapsed.Seconds(),
			bounds: []bound{figureFloor(250_000)},
			note: fmt.Sprintf("%d rows × %d replicas in %v: pass %v, then %d messages built and acknowledged (Next, Ack)", n, replicas,
				elapsed.Round(time.Millisecond), planned.Round(time.Millisecond), msgs)},
		{name: "4 broadcast change: messages", unit: "msgs/s", figure: float64(msgs) / elapsed.Seconds(),
			note: "messages built, handed out and acknowledged per second, over the same time"},
		{name: "4 planner pass alone", unit: "rows/s", figure: float64(n) / planned.Seconds(),
			note: "changed rows logged for their group per second of the pass"},
	}, nil
}
