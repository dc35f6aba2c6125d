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
// # Canonical values
//
// On the wire and in digests every value has one canonical form (see Value):
// times are UTC microseconds, UUIDs 16 bytes, decimals text, NULL distinct
// from every value. The databases keep the host's own types: the engines
// bind Go values (Arg) and read back through the host's driver, so the host
// reads exactly what it would have written itself.
//
// Text and decimals must be valid UTF-8 (store other bytes in a []byte
// field): Values and Column.Canonical refuse the rest with ErrBadValue
// rather than send a tuple the other side cannot decode. A nil pointer is
// NULL; so is a pointer to, or an sql.Null[T] around, a value that is NULL
// itself (a nil []byte, a decimal whose Value is nil).
//
// # What the drivers hand back
//
// Column.Canonical reads each driver's own spelling of a value. Engines
// should know where the drivers part ways:
//
//   - modernc.org/sqlite writes a time.Time as its String() (zone name and
//     all) and hands TIMESTAMP, DATETIME and DATE columns back as time.Time
//     when it can parse them, as text when it cannot; mattn/go-sqlite3
//     writes "2006-01-02 15:04:05.999999999-07:00" and turns a time it
//     cannot parse, such as one modernc wrote, into the zero time without an
//     error. To read a file whichever driver wrote it, select time columns
//     as CAST(column AS TEXT).
//   - SQLite hands bools back as int64 (mattn: bool for a BOOLEAN column),
//     UUIDs bound as uuid.UUID as text, an empty BLOB as an empty or nil
//     []byte (never as NULL), and stores a NaN float as NULL.
//   - pgx hands uuid back as [16]byte, numeric as pgtype.Numeric (a
//     driver.Valuer spelling it as PostgreSQL prints it: "1e3" reads back
//     "1000", "1.50" stays "1.50"), integer as int32 and timestamptz in the
//     local zone. PostgreSQL text cannot hold a NUL character; SQLite's can.
package magicsync
