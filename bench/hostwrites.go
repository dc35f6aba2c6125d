package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// benchHostWrites: what the engine costs the host's own writes, in both
// capture modes (inBothModes). Eight clients run single-row UPDATEs of a
// broadcast catalog, each its own autocommitted transaction, for a fixed
// time, with the engine capturing them — its triggers installed, or its
// publication read from the slot — and Run planning what it notes.
// Baseline: the same UPDATEs of the same rows on a copy of the table the
// engine does not capture. The two run in alternating rounds, so that the
// machine's load weighs on both alike. Logical capture's goal is 0.95 of
// the baseline.
func benchHostWrites(ctx context.Context, c config) ([]result, error) {
	return inBothModesAndLingered(ctx, c, hostWritesIn)
}

// hostWritesIn is benchmark 11 in c's capture mode.
func hostWritesIn(ctx context.Context, c config) ([]result, error) {
	const clients = 8
	// Short sizes take more, shorter rounds, and each side's figure is
	// the median of its rounds' rates: the disk's flushes, which bound
	// both sides, stall now and then for longer than a short round, and a
	// total would hand the ratio to whichever side the stall fell on.
	// Rounds of 250 ms were too short right after a busy spell (CI's test
	// run): one stall outweighed the rest.
	rounds := c.scale(3, 9)
	each := time.Duration(c.scale(5_000, 500)) * time.Millisecond
	rows := items(10_000, 11)
	e, _, err := newAdoptedEnv(ctx, c, clients+8, 1, rows)
	if err != nil {
		return nil, err
	}
	defer e.close()
	if err := e.copyPlainItems(ctx); err != nil {
		return nil, err
	}
	eng := e.runEngine(ctx)
	defer eng.stop()
	var engineTx, plainTx []int64
	for range rounds {
		n, err := updateFor(ctx, e.pool, "bench.items", rows, clients, each)
		if err != nil {
			return nil, err
		}
		engineTx = append(engineTx, n)
		n, err = updateFor(ctx, e.pool, "bench.items_plain", rows, clients, each)
		if err != nil {
			return nil, err
		}
		plainTx = append(plainTx, n)
	}
	slices.Sort(engineTx)
	slices.Sort(plainTx)
	secs := each.Seconds()
	if err := e.passAll(ctx); err != nil {
		return nil, err
	}
	return []result{{
		name: "11 host writes with the engine", unit: "tx/s",
		figure: float64(engineTx[rounds/2]) / secs, baseline: float64(plainTx[rounds/2]) / secs,
		bounds: append([]bound{ratioFloor(hostWritesFloor, hostWritesFloorShort)}, c.logicalGoals(ratioGoal(atLeast, 0.95))...),
		note:   fmt.Sprintf("%d clients, single-row UPDATEs of a broadcast catalog, Run planning; %d rounds of %v alternating with the baseline (a table not captured), the median round of each", clients, rounds, each),
	}}, nil
}

// updateFor runs single-row UPDATEs of table from clients goroutines for d
// and returns how many committed.
func updateFor(ctx context.Context, pool *pgxpool.Pool, table string, rows []Item, clients int, d time.Duration) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	sql := fmt.Sprintf(`UPDATE %s SET price = price + 1, updated_at = clock_timestamp() WHERE id = $1`, table)
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for w := range clients {
		wg.Go(func() {
			for i := w; ctx.Err() == nil; i += clients {
				if _, err := pool.Exec(ctx, sql, rows[i%len(rows)].ID); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, fmt.Errorf("updating %s: %w", table, err)
	}
	return done.Load(), nil
}
