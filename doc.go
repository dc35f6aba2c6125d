// Package magicsync keeps partial copies of PostgreSQL tables on many SQLite
// replicas — cash registers, kiosks, devices — and brings back what the
// replicas write: offline-first, with nothing lost and no service to run
// beside PostgreSQL.
//
// # The model
//
// Every synced table is one Go struct that says how it travels. Its columns
// come from db tags (db:"-" skips a field; embedded structs are flattened);
// the engine's roles come from sync tags (key, version, created, generated,
// replica_owned, desired); table-level facts come from its SyncTable method:
//
//	type Product struct {
//		ID         uuid.UUID `db:"id" sync:"key"`
//		ShopID     uuid.UUID `db:"shop_id"`
//		Name       string    `db:"name"`
//		PriceCents int64     `db:"price_cents"`
//		UpdatedAt  time.Time `db:"updated_at" sync:"version"`
//	}
//
//	func (Product) SyncTable() magicsync.Table {
//		return magicsync.Table{Schema: "shop", Name: "products", Mirror: magicsync.Catalog,
//			Sync: magicsync.Grouped("shop.registers(id, shop_id)", "shop_id")}
//	}
//
// A Catalog is written by the server and held read-only by the replicas its
// route gives each row to. A Record is written by a replica and filed by the
// server, the newer version winning; its Origin column names the replica. A
// Setting is a record whose desired columns the server may wish other
// values; the replica carries the wish out, refuses it, or has it wait, and
// says why.
//
// NewCodecs checks the declarations once and refuses, listing every
// problem; the Codecs it returns are shared by both engines (packages server
// and replica) and by transports.
//
// The words both engines report in are defined here once: Wish and
// WishState for the device twin, RejectedRow and Side for a row one side
// could not take. The engines' names for them (server.Wish,
// replica.RejectedRow, …) are aliases.
//
// # Canonical values
//
// On the wire and in digests every value has one canonical form: times are
// UTC microseconds, UUIDs 16 bytes, decimals text, NULL distinct from every
// value. The databases keep the host's own types: the engines bind Go
// values and read back through the host's driver, so the host reads exactly
// what it would have written itself.
//
// Text and decimals must be valid UTF-8 (store other bytes in a []byte
// field): the engines refuse the rest with ErrBadValue rather than send a
// tuple the other side cannot decode. A nil pointer is NULL; so is a
// pointer to, or an sql.Null[T] around, a value that is NULL itself (a nil
// []byte, a decimal whose Value is nil).
//
// Scan reads a row the host selects (every column of the table, in field
// order) into its struct, through the same conversions.
package magicsync
