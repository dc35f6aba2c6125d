package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// load.go holds the head office's own writes, as an operator's psql
// session would make them: a second shop opened before the first storm,
// and during the storms prices changed, products added and discontinued,
// and registers moved from one shop to the other.

// secondShopProducts are the products the second shop opens with, as the
// head office seeds the first shop's.
var secondShopProducts = []string{"tea", "scone", "apple juice", "sourdough loaf", "cheesecake"}

// onSaleKept is how many products each shop keeps on sale at least: the
// operator discontinues none below it, as the tills need some to sell.
const onSaleKept = 4

// openShops learns the shop the head office seeded, which every register
// starts in, and opens a second one beside it with products on sale and
// their barcodes, so that the operator can move registers between the
// two. It runs once the head office prepared its schema; the head office
// seeds only its own shop when it starts again, and leaves this one be.
func (w *world) openShops(ctx context.Context) error {
	var first uuid.UUID
	if err := w.pool.QueryRow(ctx, "SELECT shop_id FROM shop.registers ORDER BY name LIMIT 1").Scan(&first); err != nil {
		return fmt.Errorf("finding the head office's shop: %w", err)
	}
	second := uuid.NewSHA1(uuid.NameSpaceURL, []byte("magicsync.example/soak/harbour"))
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("opening a second shop: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.Exec(ctx, "INSERT INTO shop.shops (id, name) VALUES ($1, 'Harbour shop') ON CONFLICT DO NOTHING", second); err != nil {
		return fmt.Errorf("opening a second shop: %w", err)
	}
	for i, name := range secondShopProducts {
		if err := addProduct(ctx, tx, second, uuid.NewSHA1(second, []byte(name)), name, int64(120+80*i)); err != nil {
			return fmt.Errorf("stocking the second shop: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("opening a second shop: %w", err)
	}
	w.shops = [2]uuid.UUID{first, second}
	return nil
}

// addProduct puts a product on sale in a shop, with a barcode.
func addProduct(ctx context.Context, tx pgx.Tx, shop, id uuid.UUID, name string, cents int64) error {
	if _, err := tx.Exec(ctx, "INSERT INTO shop.products (id, shop_id, name, price_cents, updated_at) VALUES ($1, $2, $3, $4, now()) ON CONFLICT DO NOTHING",
		id, shop, name, cents); err != nil {
		return err
	}
	// "2" opens the range a shop numbers for itself; twelve digits, where
	// the head office's own codes have thirteen, so that the two never meet.
	code := fmt.Sprintf("29%010d", id.ID())
	_, err := tx.Exec(ctx, "INSERT INTO shop.barcodes (code, product_id) VALUES ($1, $2) ON CONFLICT DO NOTHING", code, id)
	return err
}

// writeCatalog changes the shops' catalogs, or moves a register, every few
// moments until ctx ends, and counts each write by its kind. A write that
// fails (PostgreSQL away) is not tried again: the next one comes soon.
func (w *world) writeCatalog(ctx context.Context) {
	for ctx.Err() == nil {
		sleep(ctx, time.Duration(100+w.catalogRnd.intN(400))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		if kind, err := w.writeOnce(ctx); err == nil {
			w.tally.add(kind)
		}
	}
}

// writeOnce makes one write and returns its kind: mostly a price changed,
// sometimes a product added with a barcode or one discontinued, and now
// and then a register moved to the other shop.
func (w *world) writeOnce(ctx context.Context) (fault, error) {
	w.restoring.RLock()
	defer w.restoring.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	switch x := w.catalogRnd.intN(20); {
	case x < 1:
		return loadMoves, w.moveRegister(ctx)
	case x < 3:
		shop, id := w.shops[w.catalogRnd.intN(len(w.shops))], uuid.New()
		cents := int64(100 + w.catalogRnd.intN(900))
		return faultPrices, pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			return addProduct(ctx, tx, shop, id, "soak "+id.String()[:8], cents)
		})
	case x < 4:
		// Keeps a few products on sale in the shop: its tills need some.
		_, err := w.pool.Exec(ctx, `UPDATE shop.products SET discontinued = true, updated_at = now()
			WHERE id = (SELECT id FROM shop.products WHERE shop_id = $1 AND NOT discontinued ORDER BY random() LIMIT 1)
			AND (SELECT count(*) FROM shop.products WHERE shop_id = $1 AND NOT discontinued) > $2`,
			w.shops[w.catalogRnd.intN(len(w.shops))], onSaleKept)
		return faultPrices, err
	default:
		_, err := w.pool.Exec(ctx, `UPDATE shop.products SET price_cents = $1, updated_at = now()
			WHERE id = (SELECT id FROM shop.products WHERE NOT discontinued ORDER BY random() LIMIT 1)`, 50+w.catalogRnd.intN(2000))
		return faultPrices, err
	}
}

// moveRegister moves a register to the other shop, as an operator would
// in psql. The register is to gain the new shop's products and lose the
// old ones, but for those its own receipt lines point at, which it keeps,
// discontinued, until nothing points at them.
func (w *world) moveRegister(ctx context.Context) error {
	r := w.regs[w.catalogRnd.intN(len(w.regs))]
	var to uuid.UUID
	err := w.pool.QueryRow(ctx, `UPDATE shop.registers SET shop_id = CASE WHEN shop_id = $1 THEN $2 ELSE $1 END
		WHERE name = $3 RETURNING shop_id`, w.shops[0], w.shops[1], r.name).Scan(&to)
	if err != nil {
		return fmt.Errorf("moving %s to another shop: %w", r.name, err)
	}
	w.logFault("%s moved to shop %s", r.name, to)
	return nil
}
