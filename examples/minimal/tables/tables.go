// Package tables declares what the minimal head office and register sync:
// the products the head office sells, which every register holds, and the
// sales the registers ring up, which come up to the head office. Both
// programs import it; it imports nothing of either side.
package tables

import (
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
)

// Product is a row of shop.products: written at the head office, held by
// every register.
type Product struct {
	ID         uuid.UUID `db:"id" sync:"key"`
	Name       string    `db:"name"`
	PriceCents int64     `db:"price_cents"`
	UpdatedAt  time.Time `db:"updated_at" sync:"version"`
}

// SyncTable declares the products: a catalog every register holds.
func (Product) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "products", Mirror: magicsync.Catalog, Sync: magicsync.Broadcast()}
}

// Sale is a row of shop.sales: rung up on a register, filed at the head
// office.
type Sale struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	ProductID  uuid.UUID `db:"product_id"`
	Cents      int64     `db:"cents"`
	RungAt     time.Time `db:"rung_at" sync:"version"`
}

// SyncTable declares the sales: records, each the register's its
// register_id names.
func (Sale) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "sales", Mirror: magicsync.Record, Origin: "register_id"}
}

// Codecs returns the codecs of both tables, which both sides give the
// engine.
func Codecs() (*magicsync.Codecs, error) {
	return magicsync.NewCodecs(Product{}, Sale{})
}

// HeadOfficeSQL is the head office's own tables in PostgreSQL, which its
// migrations would make: the registers (the replicas), the products and
// the sales.
const HeadOfficeSQL = `CREATE SCHEMA IF NOT EXISTS shop;
CREATE TABLE IF NOT EXISTS shop.registers (id uuid PRIMARY KEY);
CREATE TABLE IF NOT EXISTS shop.products (id uuid PRIMARY KEY, name text NOT NULL, price_cents bigint NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS shop.sales (register_id uuid NOT NULL REFERENCES shop.registers, id uuid NOT NULL,
	product_id uuid NOT NULL, cents bigint NOT NULL, rung_at timestamptz NOT NULL, PRIMARY KEY (register_id, id));`
