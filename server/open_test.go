package server_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/server"
)

// bareShop is a database holding the host's tables of the shop and
// nothing of the engine's.
func bareShop(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, shoptest.PostgresDDL); err != nil {
		t.Fatal(err)
	}
	return pool
}

// Open prepares a database holding only the host's tables — the
// engine's schema steps, its triggers — and returns a Server over it; four
// processes opening it at once all succeed, and so does a later Open,
// which finds nothing to do. New then accepts the database as it is.
func TestOpenPreparesTheHostsDatabaseInOneCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := bareShop(t)
	codecs := shoptest.Codecs(t, shoptest.Product{}, shoptest.Currency{}, shoptest.Receipt{})
	opts := server.Options{Replicas: shoptest.Replicas, Logger: slog.New(slog.DiscardHandler)}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = server.Open(ctx, pool, codecs, opts)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d of 4 at once: %v", i+1, err)
		}
	}
	if _, err := server.Open(ctx, pool, codecs, opts); err != nil {
		t.Fatalf("Open again: %v", err)
	}
	if _, err := server.New(ctx, pool, codecs, opts); err != nil {
		t.Fatalf("New after Open: %v", err)
	}
	// The triggers note what the host writes.
	if _, err := pool.Exec(ctx, `INSERT INTO shop.currencies (code, rate) VALUES ('EUR', 1)`); err != nil {
		t.Fatal(err)
	}
	var noted int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sync_touched`).Scan(&noted); err != nil || noted == 0 {
		t.Fatalf("keys noted after a write: %d (%v); want some", noted, err)
	}
}

// Open over a database lacking a declared table refuses, naming the
// table as New does, and leaves the engine's triggers off the others.
func TestOpenWithoutAHostTableNamesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := bareShop(t)
	if _, err := pool.Exec(ctx, `DROP TABLE shop.currencies`); err != nil {
		t.Fatal(err)
	}
	codecs := shoptest.Codecs(t, shoptest.Product{}, shoptest.Currency{})
	_, err := server.Open(ctx, pool, codecs, server.Options{Replicas: shoptest.Replicas, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), `table "shop"."currencies" does not exist`) {
		t.Fatalf("Open without shop.currencies = %v; want a refusal naming it", err)
	}
	var triggers int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = 'shop'::regnamespace AND NOT t.tgisinternal`).Scan(&triggers); err != nil || triggers != 0 {
		t.Fatalf("%d triggers (%v) after a refused Open; want none", triggers, err)
	}
}
