// Package codec is the machinery behind the root package's declarations:
// it compiles the row types a host declares into the tables the engines
// (packages server, replica and the transports) work with, and converts
// rows between their Go structs, their canonical values and the values
// bound to and read from either database.
//
// It imports nothing of the root package: the root's NewCodecs carries each
// declaration over into a Table, calls Compile, and hands the host the Set
// as an opaque Codecs; the engines use that same *Set directly.
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
package codec
