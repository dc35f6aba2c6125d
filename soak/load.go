package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// load.go holds the head office's own writes during the storm, as an
// operator's psql session would make them: prices changed, products
// added and discontinued.

// writeCatalog changes the shop's catalog every few moments until ctx
// ends. A write that fails (PostgreSQL away) is not tried again: the
// next one comes soon.
func (w *world) writeCatalog(ctx context.Context) {
	for ctx.Err() == nil {
		sleep(ctx, time.Duration(100+w.catalogRnd.intN(400))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		if err := w.writeOnce(ctx); err == nil {
			w.tally.add(faultPrices)
		}
	}
}

// writeOnce makes one change to the catalog: mostly a price, sometimes a
// new product with a barcode, sometimes one discontinued.
func (w *world) writeOnce(ctx context.Context) error {
	w.restoring.RLock()
	defer w.restoring.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	switch x := w.catalogRnd.intN(20); {
	case x < 2:
		shop, err := w.shopID(ctx)
		if err != nil {
			return err
		}
		id := uuid.New()
		tx, err := w.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
		if _, err := tx.Exec(ctx, "INSERT INTO shop.products (id, shop_id, name, price_cents, updated_at) VALUES ($1, $2, $3, $4, now())",
			id, shop, "soak "+id.String()[:8], 100+w.catalogRnd.intN(900)); err != nil {
			return err
		}
		code := fmt.Sprintf("29%010d", id.ID())
		if _, err := tx.Exec(ctx, "INSERT INTO shop.barcodes (code, product_id) VALUES ($1, $2) ON CONFLICT DO NOTHING", code, id); err != nil {
			return err
		}
		return tx.Commit(ctx)
	case x < 3:
		// Keeps a few products on sale: the tills need some.
		_, err := w.pool.Exec(ctx, `UPDATE shop.products SET discontinued = true, updated_at = now()
			WHERE id = (SELECT id FROM shop.products WHERE NOT discontinued ORDER BY random() LIMIT 1)
			AND (SELECT count(*) FROM shop.products WHERE NOT discontinued) > 8`)
		return err
	default:
		_, err := w.pool.Exec(ctx, `UPDATE shop.products SET price_cents = $1, updated_at = now()
			WHERE id = (SELECT id FROM shop.products WHERE NOT discontinued ORDER BY random() LIMIT 1)`, 50+w.catalogRnd.intN(2000))
		return err
	}
}
