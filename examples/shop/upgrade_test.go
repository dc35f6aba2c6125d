package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// earlierHeadOffice and earlierRegister are the products table as the
// demo created it before products had barcodes and could be discontinued,
// on each side.
const (
	earlierHeadOffice = `
CREATE SCHEMA shop;
CREATE TABLE shop.shops (id uuid PRIMARY KEY, name text NOT NULL);
CREATE TABLE shop.products (
	id uuid PRIMARY KEY,
	shop_id uuid NOT NULL REFERENCES shop.shops (id),
	name text NOT NULL,
	price_cents bigint NOT NULL CHECK (price_cents >= 0),
	updated_at timestamptz NOT NULL
);`
	earlierRegister = `
CREATE TABLE products (
	id TEXT PRIMARY KEY,
	shop_id TEXT NOT NULL,
	name TEXT NOT NULL,
	price_cents INTEGER NOT NULL,
	updated_at TIMESTAMP NOT NULL
);
INSERT INTO products VALUES ('a', 'b', 'lemon tart no. 1', 320, '2026-01-01 00:00:00');`
)

// TestAnEarlierDemosDataUpgrades starts the head office over a database,
// and opens a register's file, that an earlier demo created: products
// gain the discontinued column, not discontinued, and the head office
// gives the products it finds their barcodes.
func TestAnEarlierDemosDataUpgrades(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	dbURL := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tart := uuid.NewSHA1(shopID, []byte("lemon tart no. 1"))
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{earlierHeadOffice, nil},
		{"INSERT INTO shop.shops VALUES ($1, 'Corner shop')", []any{shopID}},
		{"INSERT INTO shop.products VALUES ($1, $2, 'lemon tart no. 1', 320, now())", []any{tart, shopID}},
	} {
		if _, err := pool.Exec(ctx, stmt.sql, stmt.args...); err != nil {
			t.Fatal(err)
		}
	}
	ho, err := startHeadOffice(ctx, dbURL, "127.0.0.1:0", "", len(registerNames), testPoll, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("starting the head office over an earlier database: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		ho.wait()
	})
	var discontinued bool
	var codes int
	if err := pool.QueryRow(ctx, "SELECT discontinued, (SELECT count(*) FROM shop.barcodes WHERE product_id = p.id) FROM shop.products p WHERE id = $1",
		tart).Scan(&discontinued, &codes); err != nil {
		t.Fatal(err)
	}
	if discontinued || codes != len(barcodes(tart)) {
		t.Errorf("the earlier tart: discontinued %v, %d barcodes; want false, %d", discontinued, codes, len(barcodes(tart)))
	}

	db, err := openFile(filepath.Join(t.TempDir(), "register-1.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, earlierRegister); err != nil {
		t.Fatal(err)
	}
	for range 2 { // and again, as every start does
		if _, err := db.ExecContext(ctx, registerSchema); err != nil {
			t.Fatal(err)
		}
		if err := upgradeRegister(ctx, db); err != nil {
			t.Fatalf("upgrading an earlier register's file: %v", err)
		}
	}
	if err := db.QueryRowContext(ctx, "SELECT discontinued FROM products WHERE id = 'a'").Scan(&discontinued); err != nil || discontinued {
		t.Errorf("the earlier register's tart: discontinued %v, %v; want false", discontinued, err)
	}
}
