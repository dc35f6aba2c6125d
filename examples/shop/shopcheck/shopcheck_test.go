package shopcheck_test

import (
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "modernc.org/sqlite"

	"github.com/magicsync/magicsync/examples/shop/shopcheck"
	"github.com/magicsync/magicsync/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// schema is the least of the shop's tables that FileDifferences reads,
// as the head office holds them; the register's are the same, in SQLite's
// words (see sqliteSchema).
const schema = `CREATE SCHEMA shop;
CREATE TABLE shop.products (id uuid, shop_id uuid, name text, price_cents bigint, discontinued bool, updated_at timestamptz);
CREATE TABLE shop.barcodes (code text, product_id uuid);
CREATE TABLE shop.footers (register_id uuid, text text, changed_at timestamptz);
CREATE TABLE shop.register_settings (register_id uuid, name text, value text, changed_at timestamptz);
CREATE TABLE shop.receipts (register_id uuid, id uuid, total_cents bigint, rung_at timestamptz);
CREATE TABLE shop.receipt_lines (register_id uuid, id uuid, receipt_id uuid, product_id uuid, quantity bigint, price_cents bigint, rung_at timestamptz);
CREATE TABLE shop.readings (register_id uuid, id bigint, celsius double precision, at timestamptz);`

// sqliteSchema is schema for a register's file: no schema name, UUIDs as
// text, and times as TIMESTAMP, which the driver reads back as times.
var sqliteSchema = strings.NewReplacer("CREATE SCHEMA shop;", "", "shop.", "", "uuid", "TEXT", "timestamptz", "TIMESTAMP").Replace(schema)

// FileDifferences, given a register's file and a head office that agree
// on a product and a receipt, reports each receipt one side lacks, a
// receipt whose total differs (as a row each side lacks), and a
// discontinued product the register keeps though no receipt line points
// at it; the head office's receipts of another register are none of its
// business.
func TestFileDifferencesReportsReceiptsMissingOnEitherSideAndTotalsThatDiffer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, schema); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "register.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, sqliteSchema); err != nil {
		t.Fatal(err)
	}

	shop, reg, other := uuid.New(), uuid.New(), uuid.New()
	coffee, tea := uuid.New(), uuid.New()
	agreed, regOnly, hoOnly, differs := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	at := time.Date(2025, 6, 1, 9, 30, 0, 123456000, time.UTC)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"INSERT INTO shop.products VALUES ($1, $2, 'coffee', 150, false, $3)", []any{coffee, shop, at}},
		{"INSERT INTO shop.products VALUES ($1, $2, 'tea', 120, true, $3)", []any{tea, shop, at}},
		{"INSERT INTO shop.receipts VALUES ($1, $2, 150, $3)", []any{reg, agreed, at}},
		{"INSERT INTO shop.receipts VALUES ($1, $2, 300, $3)", []any{reg, hoOnly, at}},
		{"INSERT INTO shop.receipts VALUES ($1, $2, 450, $3)", []any{reg, differs, at}},
		{"INSERT INTO shop.receipts VALUES ($1, $2, 999, $3)", []any{other, uuid.New(), at}},
	} {
		if _, err := pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"INSERT INTO products VALUES (?, ?, 'coffee', 150, false, ?)", []any{coffee.String(), shop.String(), at}},
		{"INSERT INTO products VALUES (?, ?, 'tea', 120, true, ?)", []any{tea.String(), shop.String(), at}},
		{"INSERT INTO receipts VALUES (?, ?, 150, ?)", []any{reg.String(), agreed.String(), at}},
		{"INSERT INTO receipts VALUES (?, ?, 600, ?)", []any{reg.String(), regOnly.String(), at}},
		{"INSERT INTO receipts VALUES (?, ?, 460, ?)", []any{reg.String(), differs.String(), at}},
	} {
		if _, err := db.ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}

	got, err := shopcheck.FileDifferences(ctx, pool, shop, "register 1", reg, db)
	if err != nil {
		t.Fatal(err)
	}
	receipt := func(id uuid.UUID, total string) string {
		return strings.Join([]string{reg.String(), id.String(), total, shopcheck.Canonical(at)}, shopcheck.Separator)
	}
	want := []string{
		"products: register 1 keeps tea, discontinued, though no receipt line points at it",
		"receipts: register 1 has " + receipt(regOnly, "600") + " the head office lacks",
		"receipts: register 1 has " + receipt(differs, "460") + " the head office lacks",
		"receipts: the head office has " + receipt(hoOnly, "300") + " register 1 lacks",
		"receipts: the head office has " + receipt(differs, "450") + " register 1 lacks",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("FileDifferences:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}

	// Put back from an older copy, the register lacks receipts the head
	// office filed, and keeps: no difference. One it holds otherwise, or
	// that was never filed, still is.
	got, err = shopcheck.RestoredFileDifferences(ctx, pool, shop, "register 1", reg, db)
	if err != nil {
		t.Fatal(err)
	}
	want = slices.DeleteFunc(want, func(d string) bool { return strings.HasPrefix(d, "receipts: the head office has") })
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("RestoredFileDifferences:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// Missing lists the rows of one sorted list the other lacks, a row there
// twice and once in the other missing once.
func TestMissingCountsDuplicates(t *testing.T) {
	t.Parallel()
	if got := shopcheck.Missing([]string{"a", "b", "b", "c"}, []string{"b", "c", "d"}); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Missing: %q; want [a b]", got)
	}
}
