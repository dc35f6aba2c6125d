package main

import (
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
)

// Product is a shop's product: a catalog, held by every register of the
// shop (grouped by shop_id through shop.registers).
//
// The head office never deletes a product: its registers' receipt lines
// point at the products they sold, and a register would refuse the delete.
// It discontinues it instead (Retired): a discontinued product goes to no
// register that lacks it, and a register that holds it lets it go — unless
// its receipt lines point at it, and then it keeps it, marked discontinued
// (the till sells it no more), until nothing points at it.
type Product struct {
	ID           uuid.UUID `db:"id" sync:"key"`
	ShopID       uuid.UUID `db:"shop_id"`
	Name         string    `db:"name"`
	PriceCents   int64     `db:"price_cents"`
	Discontinued bool      `db:"discontinued"`
	UpdatedAt    time.Time `db:"updated_at" sync:"version"`
}

// SyncTable declares the products catalog.
func (Product) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "products", Mirror: magicsync.Catalog,
		Sync: magicsync.Grouped("shop.registers(id, shop_id)", "shop_id"), Retired: "discontinued"}
}

// Barcode is one of a product's barcodes, which the till scans: a catalog
// held wherever its product is (Follows), so by the registers of the
// product's shop, and by none once the product is discontinued.
type Barcode struct {
	Code      string    `db:"code" sync:"key"`
	ProductID uuid.UUID `db:"product_id"`
}

// SyncTable declares the barcodes catalog.
func (Barcode) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "barcodes", Mirror: magicsync.Catalog,
		Sync: magicsync.Follows("product_id")}
}

// Footer is the text a register prints under every receipt: a setting.
// The register holds it, and its printer prints it; the head office may
// wish it another text, which the register carries out through its
// printer (see printer). A wish is carried out only while the footer is
// still the one the head office saw (IfUnchanged): a technician's change
// on the register wins over a wish based on what was there before.
type Footer struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Text       string    `db:"text" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

// SyncTable declares the footers, one per register.
func (Footer) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "footers", Mirror: magicsync.Setting, Origin: "register_id",
		Apply: magicsync.IfUnchanged}
}

// RegisterSetting is one of a register's other settings, by name: its
// screen's brightness, say. The head office may wish one another value;
// the last wish wins (Always). Most live in the register's database only;
// the brightness is the screen's to take (see screen).
type RegisterSetting struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Name       string    `db:"name" sync:"key"`
	Value      string    `db:"value" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

// SyncTable declares the registers' other settings.
func (RegisterSetting) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "register_settings", Mirror: magicsync.Setting, Origin: "register_id",
		Apply: magicsync.Always}
}

// Receipt is a sale rung up on a register: a record it writes and the head
// office files.
type Receipt struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	TotalCents int64     `db:"total_cents"`
	RungAt     time.Time `db:"rung_at" sync:"version"`
}

// SyncTable declares the receipts.
func (Receipt) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "receipts", Mirror: magicsync.Record, Origin: "register_id"}
}

// ReceiptLine is one product sold on a receipt.
type ReceiptLine struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	ReceiptID  uuid.UUID `db:"receipt_id"`
	ProductID  uuid.UUID `db:"product_id"`
	Quantity   int64     `db:"quantity"`
	PriceCents int64     `db:"price_cents"`
	RungAt     time.Time `db:"rung_at" sync:"version"`
}

// SyncTable declares the receipt lines.
func (ReceiptLine) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "receipt_lines", Mirror: magicsync.Record, Origin: "register_id"}
}

// Reading is a register's temperature, sent often, in a lane of its own.
type Reading struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         int64     `db:"id" sync:"key"`
	Celsius    float64   `db:"celsius"`
	At         time.Time `db:"at" sync:"version"`
}

// SyncTable declares the readings.
func (Reading) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "readings", Mirror: magicsync.Record, Origin: "register_id"}
}

// codecs declares every synced table of the shop, for both sides.
func codecs() (*magicsync.Codecs, error) {
	return magicsync.NewCodecs(Product{}, Barcode{}, Footer{}, RegisterSetting{}, Receipt{}, ReceiptLine{}, Reading{})
}

// headOfficeSchema is the shop's PostgreSQL schema. It is the host's own:
// the engine adds only its triggers, and tables of its own named sync_…,
// where it keeps, among other things, the head office's wishes of the
// registers' settings.
const headOfficeSchema = `
CREATE SCHEMA IF NOT EXISTS shop;
CREATE TABLE IF NOT EXISTS shop.shops (id uuid PRIMARY KEY, name text NOT NULL);
CREATE TABLE IF NOT EXISTS shop.registers (
	id uuid PRIMARY KEY,
	shop_id uuid NOT NULL REFERENCES shop.shops (id),
	name text NOT NULL
);
CREATE TABLE IF NOT EXISTS shop.products (
	id uuid PRIMARY KEY,
	shop_id uuid NOT NULL REFERENCES shop.shops (id),
	name text NOT NULL,
	price_cents bigint NOT NULL CHECK (price_cents >= 0),
	discontinued bool NOT NULL DEFAULT false,
	updated_at timestamptz NOT NULL
);
-- A database an earlier demo created lacks the column.
ALTER TABLE shop.products ADD COLUMN IF NOT EXISTS discontinued bool NOT NULL DEFAULT false;
-- Barcodes follow their product (Follows("product_id")): the engine needs
-- the foreign key to know which catalog they follow, and the index to
-- find a product's barcodes when the product moves.
CREATE TABLE IF NOT EXISTS shop.barcodes (
	code text PRIMARY KEY,
	product_id uuid NOT NULL REFERENCES shop.products (id)
);
CREATE INDEX IF NOT EXISTS barcodes_product_id ON shop.barcodes (product_id);
CREATE TABLE IF NOT EXISTS shop.footers (
	register_id uuid PRIMARY KEY REFERENCES shop.registers (id),
	text text NOT NULL,
	changed_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS shop.register_settings (
	register_id uuid NOT NULL REFERENCES shop.registers (id),
	name text NOT NULL,
	value text NOT NULL,
	changed_at timestamptz NOT NULL,
	PRIMARY KEY (register_id, name)
);
CREATE TABLE IF NOT EXISTS shop.receipts (
	register_id uuid NOT NULL REFERENCES shop.registers (id),
	id uuid NOT NULL,
	total_cents bigint NOT NULL,
	rung_at timestamptz NOT NULL,
	PRIMARY KEY (register_id, id)
);
CREATE TABLE IF NOT EXISTS shop.receipt_lines (
	register_id uuid NOT NULL REFERENCES shop.registers (id),
	id uuid NOT NULL,
	receipt_id uuid NOT NULL,
	product_id uuid NOT NULL,
	quantity bigint NOT NULL,
	price_cents bigint NOT NULL,
	rung_at timestamptz NOT NULL,
	PRIMARY KEY (register_id, id)
);
CREATE TABLE IF NOT EXISTS shop.readings (
	register_id uuid NOT NULL REFERENCES shop.registers (id),
	id bigint NOT NULL,
	celsius double precision NOT NULL,
	at timestamptz NOT NULL,
	PRIMARY KEY (register_id, id)
);
`

// registerSchema is a register's SQLite schema. A file an earlier demo
// created lacks products.discontinued, which SQLite cannot add "IF NOT
// EXISTS": upgradeRegister adds it.
const registerSchema = `
CREATE TABLE IF NOT EXISTS products (
	id TEXT PRIMARY KEY,
	shop_id TEXT NOT NULL,
	name TEXT NOT NULL,
	price_cents INTEGER NOT NULL,
	discontinued INTEGER NOT NULL DEFAULT 0,
	updated_at TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS barcodes (
	code TEXT PRIMARY KEY,
	product_id TEXT NOT NULL REFERENCES products (id)
);
CREATE INDEX IF NOT EXISTS barcodes_product_id ON barcodes (product_id);
CREATE TABLE IF NOT EXISTS footers (
	register_id TEXT PRIMARY KEY,
	text TEXT NOT NULL,
	changed_at TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS register_settings (
	register_id TEXT NOT NULL,
	name TEXT NOT NULL,
	value TEXT NOT NULL,
	changed_at TIMESTAMP NOT NULL,
	PRIMARY KEY (register_id, name)
);
CREATE TABLE IF NOT EXISTS receipts (
	register_id TEXT NOT NULL,
	id TEXT NOT NULL,
	total_cents INTEGER NOT NULL,
	rung_at TIMESTAMP NOT NULL,
	PRIMARY KEY (register_id, id)
);
CREATE TABLE IF NOT EXISTS receipt_lines (
	register_id TEXT NOT NULL,
	id TEXT NOT NULL,
	receipt_id TEXT NOT NULL,
	product_id TEXT NOT NULL REFERENCES products (id),
	quantity INTEGER NOT NULL,
	price_cents INTEGER NOT NULL,
	rung_at TIMESTAMP NOT NULL,
	PRIMARY KEY (register_id, id),
	FOREIGN KEY (register_id, receipt_id) REFERENCES receipts (register_id, id)
);
-- The engine asks, of each discontinued product it keeps, whether a line
-- still points at it: without this index, a read of every line.
CREATE INDEX IF NOT EXISTS receipt_lines_product_id ON receipt_lines (product_id);
CREATE TABLE IF NOT EXISTS readings (
	register_id TEXT NOT NULL,
	id INTEGER NOT NULL,
	celsius REAL NOT NULL,
	at TIMESTAMP NOT NULL,
	PRIMARY KEY (register_id, id)
);
`
