// Package shoptest is the shop the module's tests sync: its tables'
// declarations, their PostgreSQL and SQLite DDL, a template database that
// holds them and the engine's own tables, and the builders of the messages
// the tests send.
//
// The shop: shops own registers (the replicas); products are grouped by
// shop; currencies and notices go to every register; tasks and drawers are
// assigned to one; receipts are the registers' records. A package's tests
// sync the tables they need of it — the declarations are many, the shop is
// one — and declare beside it only what they deliberately vary.
package shoptest

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
)

// Product is a catalog row grouped by shop: a register holds the products
// of its shop.
type Product struct {
	ID         uuid.UUID `db:"id" sync:"key"`
	ShopID     uuid.UUID `db:"shop_id"`
	Name       string    `db:"name"`
	PriceCents int64     `db:"price_cents"`
	UpdatedAt  time.Time `db:"updated_at" sync:"version"`
}

// SyncTable declares shop.products.
func (Product) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "products", Mirror: magicsync.Catalog,
		Sync: magicsync.Grouped("shop.registers(id, shop_id)", "shop_id")}
}

// Currency is a catalog row every register holds, with a version.
type Currency struct {
	Code      string    `db:"code" sync:"key"`
	Rate      float64   `db:"rate"`
	UpdatedAt time.Time `db:"updated_at" sync:"version"`
}

// SyncTable declares shop.currencies.
func (Currency) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "currencies", Mirror: magicsync.Catalog, Sync: magicsync.Broadcast()}
}

// Task is a catalog row assigned to one register, with a version.
type Task struct {
	ID         uuid.UUID `db:"id" sync:"key"`
	RegisterID uuid.UUID `db:"register_id"`
	What       string    `db:"what"`
	UpdatedAt  time.Time `db:"updated_at" sync:"version"`
}

// SyncTable declares shop.tasks.
func (Task) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "tasks", Mirror: magicsync.Catalog, Sync: magicsync.Assigned("register_id")}
}

// Notice is a catalog row every register holds, without a version.
type Notice struct {
	ID   int64  `db:"id" sync:"key"`
	Text string `db:"text"`
}

// SyncTable declares shop.notices.
func (Notice) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "notices", Mirror: magicsync.Catalog, Sync: magicsync.Broadcast()}
}

// Drawer is a catalog row assigned to one register, without a version.
type Drawer struct {
	ID         uuid.UUID `db:"id" sync:"key"`
	RegisterID uuid.UUID `db:"register_id"`
	FloatCents int64     `db:"float_cents"`
}

// SyncTable declares shop.drawers.
func (Drawer) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "drawers", Mirror: magicsync.Catalog, Sync: magicsync.Assigned("register_id")}
}

// Receipt is a record: registers write receipts, and the server files them,
// the newest version winning. Its total may not be negative on the server.
type Receipt struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	TotalCents int64     `db:"total_cents"`
	Note       *string   `db:"note"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

// SyncTable declares shop.receipts.
func (Receipt) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "receipts", Mirror: magicsync.Record, Origin: "register_id"}
}

// Setting is one of a register's settings: its value is the register's,
// and the head office may wish it another, carried out only while the
// register still holds the version the wish was based on. Its value is
// at most 40 characters (a CHECK on both sides), so that a wish of a
// longer one is refused by the database.
type Setting struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Name       string    `db:"name" sync:"key"`
	Value      string    `db:"value" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

// SyncTable declares the settings.
func (Setting) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "settings", Mirror: magicsync.Setting, Origin: "register_id",
		Apply: magicsync.IfUnchanged}
}

// Replicas is the server's Options.Replicas of the shop: the registers are
// the replicas.
const Replicas = "shop.registers(id)"

// PostgresDDL creates the shop's tables on the server, in schema shop: every
// table declared here, and the shops and registers they are routed by.
const PostgresDDL = `
CREATE SCHEMA shop;
CREATE TABLE shop.shops (id uuid PRIMARY KEY, name text NOT NULL DEFAULT '');
CREATE TABLE shop.registers (id uuid PRIMARY KEY, shop_id uuid REFERENCES shop.shops);
CREATE TABLE shop.products (id uuid PRIMARY KEY, shop_id uuid NOT NULL REFERENCES shop.shops, name text NOT NULL,
	price_cents bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE shop.currencies (code text PRIMARY KEY, rate float8 NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE shop.tasks (id uuid PRIMARY KEY, register_id uuid NOT NULL, what text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE shop.notices (id bigint PRIMARY KEY, text text NOT NULL);
CREATE TABLE shop.drawers (id uuid PRIMARY KEY, register_id uuid NOT NULL, float_cents bigint NOT NULL);
CREATE TABLE shop.receipts (register_id uuid NOT NULL, id uuid NOT NULL, total_cents bigint NOT NULL CHECK (total_cents >= 0), note text,
	changed_at timestamptz NOT NULL, PRIMARY KEY (register_id, id));
CREATE TABLE shop.settings (register_id uuid NOT NULL, name text NOT NULL, value text NOT NULL CHECK (length(value) <= 40),
	changed_at timestamptz NOT NULL, PRIMARY KEY (register_id, name));
`

// SQLiteProducts creates the products table on a register, unless it is
// there: a register may run it at every start.
const SQLiteProducts = `
CREATE TABLE IF NOT EXISTS products (id TEXT PRIMARY KEY, shop_id TEXT NOT NULL, name TEXT NOT NULL, price_cents INTEGER NOT NULL, updated_at TIMESTAMP NOT NULL);`

// SQLiteReceipts creates the receipts table on a register, unless it is
// there: a register may run it at every start.
const SQLiteReceipts = `
CREATE TABLE IF NOT EXISTS receipts (register_id TEXT NOT NULL, id TEXT NOT NULL, total_cents INTEGER NOT NULL, note TEXT,
	changed_at TIMESTAMP NOT NULL, PRIMARY KEY (register_id, id));`

// SQLiteDDL creates the shop's tables on a register: every table declared
// here, under its bare name, each unless it is there.
const SQLiteDDL = SQLiteProducts + `
CREATE TABLE IF NOT EXISTS currencies (code TEXT PRIMARY KEY, rate REAL NOT NULL, updated_at TIMESTAMP NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (id TEXT PRIMARY KEY, register_id TEXT NOT NULL, what TEXT NOT NULL, updated_at TIMESTAMP NOT NULL);
CREATE TABLE IF NOT EXISTS notices (id INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS drawers (id TEXT PRIMARY KEY, register_id TEXT NOT NULL, float_cents INTEGER NOT NULL);` + SQLiteReceipts + `
CREATE TABLE IF NOT EXISTS settings (register_id TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL CHECK (length(value) <= 40),
	changed_at TIMESTAMP NOT NULL, PRIMARY KEY (register_id, name));
`

// Codecs returns the codecs of rows, a selection of the shop's tables (and
// of a test's own), or ends the test.
func Codecs(t testing.TB, rows ...magicsync.Declarer) *magicsync.Codecs {
	t.Helper()
	c, err := magicsync.NewCodecs(rows...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
