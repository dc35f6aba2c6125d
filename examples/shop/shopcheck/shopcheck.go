// Package shopcheck compares a register's SQLite file with the head
// office's PostgreSQL database, as the shop example (examples/shop) lays
// them out, and lists every way they differ.
//
// A register must hold exactly the shop's products in its range (those not
// discontinued) and their barcodes, as the head office holds them; besides
// these it may keep a discontinued product only while its own receipt
// lines point at it. Every row the register wrote — its footer, its
// settings, its receipts, their lines and its till readings — must be
// filed at the head office once, with the same values, and the head office
// must hold no row of the register that the register lacks.
//
// Rows are compared in a canonical form that both databases agree on (see
// Canonical): one string per row, its columns joined by Separator. The row
// readers PoolRows and SQLiteRows return them sorted, and Missing lists
// the rows one side lacks, so that a caller can compare any query of its
// own the same way.
package shopcheck

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Separator joins the canonical values of a row's columns, in the rows
// PoolRows and SQLiteRows return.
const Separator = " | "

// comparedTables are the tables both sides hold. Own tables are compared
// per register, on the columns cols. A catalog's rows are those of the
// shop's range, on both sides: pg reads them from the head office (its $1
// the shop), sqlite from a register, which may keep a discontinued product
// besides (see keptDiscontinued).
var comparedTables = []struct {
	name, cols string
	own        bool
	record     bool // the register's records, which go one way: up
	pg, sqlite string
}{
	{name: "products",
		pg:     "SELECT id, shop_id, name, price_cents, updated_at FROM shop.products WHERE shop_id = $1 AND NOT discontinued",
		sqlite: "SELECT id, shop_id, name, price_cents, updated_at FROM products WHERE NOT discontinued"},
	{name: "barcodes",
		pg: `SELECT b.code, b.product_id FROM shop.barcodes b JOIN shop.products p ON p.id = b.product_id
			WHERE p.shop_id = $1 AND NOT p.discontinued`,
		sqlite: "SELECT code, product_id FROM barcodes"},
	{name: "footers", cols: "register_id, text, changed_at", own: true},
	{name: "register_settings", cols: "register_id, name, value, changed_at", own: true},
	{name: "receipts", record: true, cols: "register_id, id, total_cents, rung_at", own: true},
	{name: "receipt_lines", record: true, cols: "register_id, id, receipt_id, product_id, quantity, price_cents, rung_at", own: true},
	{name: "readings", record: true, cols: "register_id, id, celsius, at", own: true},
}

// keptDiscontinued reads the names of the discontinued products a
// register keeps though none of its receipt lines points at them.
const keptDiscontinued = `SELECT name FROM products p WHERE discontinued
	AND NOT EXISTS (SELECT 1 FROM receipt_lines l WHERE l.product_id = p.id)`

// FileDifferences lists every way the SQLite file db of the register
// registerID, called registerName, differs from the head office's database
// at pool, for the shop shopID: a discontinued product it keeps though no
// receipt line of its own points at it, then, table by table, each row it
// has that the head office lacks and each row the head office has that it
// lacks. Each difference is one sentence naming the table, the register
// and the row; none means the file and the head office agree. An error
// says which side could not be read.
func FileDifferences(ctx context.Context, pool *pgxpool.Pool, shopID uuid.UUID, registerName string, registerID uuid.UUID, db *sql.DB) ([]string, error) {
	return fileDifferences(ctx, pool, shopID, registerName, registerID, db, false)
}

// RestoredFileDifferences is FileDifferences for a register whose file was
// put back from an older copy since it was made. Its records (receipts,
// their lines, readings) go one way, from the register up: the head office
// keeps those it filed that the copy lacks, and the register is not sent
// them again, so only a record the register has that the head office
// lacks, or holds otherwise, is a difference.
func RestoredFileDifferences(ctx context.Context, pool *pgxpool.Pool, shopID uuid.UUID, registerName string, registerID uuid.UUID, db *sql.DB) ([]string, error) {
	return fileDifferences(ctx, pool, shopID, registerName, registerID, db, true)
}

func fileDifferences(ctx context.Context, pool *pgxpool.Pool, shopID uuid.UUID, registerName string, registerID uuid.UUID, db *sql.DB, restored bool) ([]string, error) {
	var diffs []string
	kept, err := SQLiteRows(ctx, db, keptDiscontinued)
	if err != nil {
		return nil, fmt.Errorf("%s's products: %w", registerName, err)
	}
	for _, name := range kept {
		diffs = append(diffs, fmt.Sprintf("products: %s keeps %s, discontinued, though no receipt line points at it", registerName, name))
	}
	for _, tb := range comparedTables {
		pq, args, lq := tb.pg, []any{shopID}, tb.sqlite
		var largs []any
		if tb.own {
			pq = "SELECT " + tb.cols + " FROM shop." + tb.name + " WHERE register_id = $1"
			args = []any{registerID}
			lq = "SELECT " + tb.cols + " FROM " + tb.name + " WHERE register_id = ?"
			largs = []any{registerID.String()}
		}
		want, err := PoolRows(ctx, pool, pq, args...)
		if err != nil {
			return nil, fmt.Errorf("head office's %s: %w", tb.name, err)
		}
		got, err := SQLiteRows(ctx, db, lq, largs...)
		if err != nil {
			return nil, fmt.Errorf("%s's %s: %w", registerName, tb.name, err)
		}
		for _, row := range Missing(got, want) {
			diffs = append(diffs, fmt.Sprintf("%s: %s has %s the head office lacks", tb.name, registerName, row))
		}
		if restored && tb.record {
			continue
		}
		for _, row := range Missing(want, got) {
			diffs = append(diffs, fmt.Sprintf("%s: the head office has %s %s lacks", tb.name, row, registerName))
		}
	}
	return diffs, nil
}

// Missing returns the rows of a that b lacks, both sorted (as PoolRows and
// SQLiteRows return them), counting duplicates: a row twice in a and once
// in b is missing once.
func Missing(a, b []string) []string {
	var out []string
	j := 0
	for _, x := range a {
		for j < len(b) && b[j] < x {
			j++
		}
		if j < len(b) && b[j] == x {
			j++
			continue
		}
		out = append(out, x)
	}
	return out
}

// Canonical writes a value as PostgreSQL (through pgx) and SQLite (through
// database/sql) should both give it: UUIDs as text, times as UTC
// microseconds since the epoch (what PostgreSQL keeps), numbers in Go's
// shortest exact form, NULL as "NULL". A value of another type is written
// with its type, so that it never equals one of these by chance.
func Canonical(v any) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case [16]byte:
		return uuid.UUID(v).String()
	case uuid.UUID:
		return v.String()
	case time.Time:
		return strconv.FormatInt(v.UnixMicro(), 10) + "µs"
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case string:
		return v
	case []byte:
		return string(v)
	}
	return fmt.Sprintf("%T(%v)", v, v)
}

// row writes the values of a row in canonical form, joined by Separator.
func row(vals []any) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = Canonical(v)
	}
	return strings.Join(parts, Separator)
}

// PoolRows runs query with args on the PostgreSQL database at pool and
// returns its rows in canonical form (see Canonical), one string per row,
// sorted.
func PoolRows(ctx context.Context, pool *pgxpool.Pool, query string, args ...any) ([]string, error) {
	rows, err := pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, fmt.Errorf("reading a row: %w", err)
		}
		out = append(out, row(vals))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// SQLiteRows runs query with args on the SQLite database db and returns
// its rows in canonical form (see Canonical), one string per row, sorted.
func SQLiteRows(ctx context.Context, db *sql.DB, query string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("reading a row: %w", err)
		}
		out = append(out, row(vals))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}
