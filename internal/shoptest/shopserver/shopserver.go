// Package shopserver holds the shop's PostgreSQL databases for the
// server's tests: a template holding the shop's tables
// (shoptest.PostgresDDL) and the engine's own, migrated, cloned for each
// test, and the engine's triggers on them. It is apart from shoptest,
// which depends on nothing above it, so that the replica's tests can use
// the shop too.
package shopserver

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/server"
)

// migrated is the template of the shop's databases: shoptest.PostgresDDL, then
// server.Migrate. The triggers are not in it: they depend on the tables a
// test syncs and on its options.
var migrated = pgtest.NewTemplate("shop", func(ctx context.Context, connString string) error {
	pool, err := pgxpool.New(ctx, connString)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, shoptest.PostgresDDL); err != nil {
		return err
	}
	return server.Migrate(ctx, pool)
})

// bare is the template of the shop's databases whose engine lives in
// another schema than public: shoptest.PostgresDDL alone.
var bare = pgtest.NewTemplate("shop_bare", func(ctx context.Context, connString string) error {
	pool, err := pgxpool.New(ctx, connString)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, shoptest.PostgresDDL)
	return err
})

// NewDatabase returns the connection string of a database for this test
// alone that holds the shop's tables (shoptest.PostgresDDL) and the engine's,
// migrated, but no triggers; it is dropped when the test ends. The test
// binary's TestMain must run the tests with pgtest.Main.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return migrated.NewDatabase(t)
}

// NewDatabaseIn is NewDatabase with the engine's own tables in schema
// (server.Options.Schema), and none in public unless schema is public or
// empty.
func NewDatabaseIn(t testing.TB, schema string) string {
	t.Helper()
	if schema == "" || schema == "public" {
		return NewDatabase(t)
	}
	return migrateIn(t, bare.NewDatabase(t), schema)
}

// NewLogicalDatabaseIn is NewDatabaseIn on the test binary's server with
// wal_level=logical (pgtest.StartLogical).
func NewLogicalDatabaseIn(t testing.TB, schema string) string {
	t.Helper()
	if schema == "" || schema == "public" {
		return migrated.NewLogicalDatabase(t)
	}
	return migrateIn(t, bare.NewLogicalDatabase(t), schema)
}

// migrateIn applies the engine's steps in schema of the database url
// names, and returns url.
func migrateIn(t testing.TB, url, schema string) string {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := server.MigrateSchema(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	return url
}

// NewPool is NewDatabase, returning a pool on the database that is closed
// when the test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return migrated.NewPool(t)
}

// InstallTriggers installs, on pool, the engine's triggers on the tables of
// codecs for opts — or, under server.CaptureLogical, its publication — or
// ends the test.
func InstallTriggers(t testing.TB, pool *pgxpool.Pool, codecs *magicsync.Codecs, opts server.Options) {
	t.Helper()
	prepare := server.Triggers
	if opts.Capture == server.CaptureLogical {
		prepare = server.Publication
	}
	sql, err := prepare(codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
}

// NewLogicalPool is NewPool on the test binary's server with
// wal_level=logical (pgtest.StartLogical), for the tests of capture by
// logical replication.
func NewLogicalPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return migrated.NewLogicalPool(t)
}
