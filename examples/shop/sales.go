package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/server"
)

// salesTotal is the head office's live total of the day's sales: it
// takes stock of the receipts filed once, then follows the receipts the
// registers file (server.FollowEvents) and counts each, at its latest
// amount, once — without a query of its own per sale, and at no cost to
// the registers' filing.
type salesTotal struct {
	mu      sync.Mutex
	cents   int64
	counted map[receiptKey]int64 // each receipt's amount as counted
}

// receiptKey names a receipt: its register and its id.
type receiptKey struct{ register, id uuid.UUID }

// now is the total and the receipts it counts.
func (st *salesTotal) now() (cents int64, receipts int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.cents, len(st.counted)
}

// count counts a receipt at amount cents, in place of what it counted of
// it before.
func (st *salesTotal) count(r Receipt) {
	st.mu.Lock()
	defer st.mu.Unlock()
	k := receiptKey{r.RegisterID, r.ID}
	st.cents += r.TotalCents - st.counted[k]
	st.counted[k] = r.TotalCents
}

// followSales keeps ho.sales until ctx ends: the receipts filed so far and
// the position of what it read, in one REPEATABLE READ transaction, then
// every receipt filed after it, as the engine tells of it.
func (ho *headOffice) followSales(ctx context.Context) error {
	var pos server.EventPosition
	err := pgx.BeginTxFunc(ctx, ho.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if pos, err = ho.engine.EventPositionNow(ctx, tx); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "SELECT register_id, id, total_cents FROM shop.receipts")
		if err != nil {
			return err
		}
		var r Receipt
		_, err = pgx.ForEachRow(rows, []any{&r.RegisterID, &r.ID, &r.TotalCents}, func() error {
			ho.sales.count(r)
			return nil
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("taking stock of the receipts: %w", err)
	}
	return ho.engine.FollowEvents(ctx, pos, func(ctx context.Context, events []server.Event, _ server.EventPosition) error {
		for _, e := range events {
			if e.Kind != server.RecordsFiled || e.Table != "receipts" {
				continue
			}
			receipts, err := server.RowsOf[Receipt](ctx, ho.engine, ho.pool, e.Keys)
			if err != nil {
				return err
			}
			for _, r := range receipts {
				ho.sales.count(r)
			}
		}
		return nil
	})
}
