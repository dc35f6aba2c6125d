package kit

import (
	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
)

// Product is the kit's catalog: every product goes to every replica
// (Broadcast). Its price may not be negative on the head office, and a
// replica takes none above MaxReplicaPrice (a CHECK of its SQLite table),
// so that the kit can provoke a constraint refusal.
type Product struct {
	ID    string `db:"id" sync:"key"`
	Name  string `db:"name"`
	Price int64  `db:"price"`
}

// SyncTable declares the products catalog.
func (Product) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "kit", Name: "products", Mirror: magicsync.Catalog, Sync: magicsync.Broadcast()}
}

// Receipt is the kit's record: the replica under test holds the rows the
// kit writes into its file, and sends them up; the head office files them.
type Receipt struct {
	ReplicaID uuid.UUID `db:"replica_id" sync:"key"`
	ID        string    `db:"id" sync:"key"`
	Total     int64     `db:"total"`
}

// SyncTable declares the receipts.
func (Receipt) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "kit", Name: "receipts", Mirror: magicsync.Record, Origin: "replica_id"}
}

// Coupon is the kit's catalog with a Retired column: every coupon goes to
// every replica, and a retired one to none that lacks it. A replica keeps
// a retired coupon while one of its redemptions points at it.
type Coupon struct {
	ID      string `db:"id" sync:"key"`
	Name    string `db:"name"`
	Retired bool   `db:"retired"`
}

// SyncTable declares the coupons catalog.
func (Coupon) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "kit", Name: "coupons", Mirror: magicsync.Catalog, Sync: magicsync.Broadcast(), Retired: "retired"}
}

// Redemption is the kit's record pointing at a coupon by a foreign key.
type Redemption struct {
	ReplicaID uuid.UUID `db:"replica_id" sync:"key"`
	ID        string    `db:"id" sync:"key"`
	CouponID  string    `db:"coupon_id"`
}

// SyncTable declares the redemptions.
func (Redemption) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "kit", Name: "redemptions", Mirror: magicsync.Record, Origin: "replica_id"}
}

// Setting is the kit's setting: the replica's rows, whose value the head
// office may wish another (every wish carried out: Always). A Go replica
// carries its wishes out with replica.Direct.
type Setting struct {
	ReplicaID uuid.UUID `db:"replica_id" sync:"key"`
	Name      string    `db:"name" sync:"key"`
	Value     string    `db:"value" sync:"desired"`
	Version   int64     `db:"version" sync:"version"`
}

// SyncTable declares the settings.
func (Setting) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "kit", Name: "settings", Mirror: magicsync.Setting, Origin: "replica_id"}
}

// Codecs returns the declarations of the kit's catalog, for both sides: the
// head office the kit runs, and a Go replica under test.
func Codecs() (*magicsync.Codecs, error) {
	return magicsync.NewCodecs(Product{}, Coupon{}, Receipt{}, Redemption{}, Setting{})
}

// MaxReplicaPrice is the highest price the replica's products table takes
// (its CHECK); the head office takes any price from 0.
const MaxReplicaPrice = 1_000_000

// SQLiteSchema creates the kit's tables in the replica's SQLite file. The
// kit runs it on the file MAGICSYNC_DB names before it starts the replica:
// the replica finds them there and adds its engine's own tables.
const SQLiteSchema = `
CREATE TABLE products (
	id TEXT PRIMARY KEY,
	name TEXT NOT NULL,
	price INTEGER NOT NULL CHECK (price >= 0 AND price <= 1000000)
);
CREATE TABLE receipts (
	replica_id TEXT NOT NULL,
	id TEXT NOT NULL,
	total INTEGER NOT NULL,
	PRIMARY KEY (replica_id, id)
);
CREATE TABLE coupons (
	id TEXT PRIMARY KEY,
	name TEXT NOT NULL,
	retired INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE redemptions (
	replica_id TEXT NOT NULL,
	id TEXT NOT NULL,
	coupon_id TEXT NOT NULL REFERENCES coupons (id),
	PRIMARY KEY (replica_id, id)
);
CREATE INDEX redemptions_coupon_id ON redemptions (coupon_id);
CREATE TABLE settings (
	replica_id TEXT NOT NULL,
	name TEXT NOT NULL,
	value TEXT NOT NULL,
	version INTEGER NOT NULL,
	PRIMARY KEY (replica_id, name)
);
`

// postgresSchema creates the kit's tables in the head office's database.
const postgresSchema = `
CREATE SCHEMA kit;
CREATE TABLE kit.replicas (id uuid PRIMARY KEY);
CREATE TABLE kit.products (id text PRIMARY KEY, name text NOT NULL, price bigint NOT NULL CHECK (price >= 0));
CREATE TABLE kit.receipts (replica_id uuid NOT NULL REFERENCES kit.replicas (id), id text NOT NULL, total bigint NOT NULL,
	PRIMARY KEY (replica_id, id));
CREATE TABLE kit.coupons (id text PRIMARY KEY, name text NOT NULL, retired boolean NOT NULL DEFAULT false);
CREATE TABLE kit.redemptions (replica_id uuid NOT NULL REFERENCES kit.replicas (id), id text NOT NULL,
	coupon_id text NOT NULL REFERENCES kit.coupons (id), PRIMARY KEY (replica_id, id));
CREATE TABLE kit.settings (replica_id uuid NOT NULL REFERENCES kit.replicas (id), name text NOT NULL, value text NOT NULL,
	version bigint NOT NULL, PRIMARY KEY (replica_id, name));
`

// replicasTable is the head office's Options.Replicas.
const replicasTable = "kit.replicas(id)"
