package server_test

// schema_test.go holds the tests of Options.Schema: the engine's own tables
// and functions in a schema other than public, and two engines in two
// schemas of one database.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// Bulletin is a catalog row of the branch, a host of its own beside the
// shop in the tests of two engines in one database.
type Bulletin struct {
	ID   int64  `db:"id" sync:"key"`
	Text string `db:"text"`
}

// SyncTable declares branch.bulletins.
func (Bulletin) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "branch", Name: "bulletins", Mirror: magicsync.Catalog, Sync: magicsync.Broadcast()}
}

// branchDDL creates the branch's tables: its devices are its replicas.
const branchDDL = `
CREATE SCHEMA branch;
CREATE TABLE branch.devices (id uuid PRIMARY KEY);
CREATE TABLE branch.bulletins (id bigint PRIMARY KEY, text text NOT NULL);
`

// openIn migrates the engine into opts.Schema of pool, installs the
// triggers of codecs and opens a shop around the server.
func openIn(t *testing.T, pool *pgxpool.Pool, codecs *magicsync.Codecs, opts server.Options) *shop {
	t.Helper()
	ctx := context.Background()
	if err := server.MigrateSchema(ctx, pool, opts.Schema); err != nil {
		t.Fatal(err)
	}
	shopserver.InstallTriggers(t, pool, codecs, opts)
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &shop{t: t, ctx: ctx, pool: pool, s: s, codecs: codecs, shopA: uuid.New(), shopB: uuid.New()}
}

// engineObjects counts the tables and the functions named sync_* in schema.
func engineObjects(t *testing.T, sh *shop, schema string) (tables, functions int) {
	t.Helper()
	err := sh.pool.QueryRow(sh.ctx, `SELECT
		(SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE n.nspname = $1 AND c.relkind IN ('r', 'S') AND c.relname LIKE 'sync\_%'),
		(SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		 WHERE n.nspname = $1 AND p.proname LIKE 'sync\_%')`, schema).Scan(&tables, &functions)
	if err != nil {
		t.Fatal(err)
	}
	return tables, functions
}

func TestSchemaHoldsTheEngine(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, shoptest.PostgresDDL); err != nil {
		t.Fatal(err)
	}
	codecs := shopCodecs(t)
	opts := server.Options{Replicas: shoptest.Replicas, Schema: "magicsync_engine"}

	if _, err := server.New(ctx, pool, codecs, opts); err == nil || !strings.Contains(err.Error(), `server.MigrateSchema(ctx, pool, "magicsync_engine")`) {
		t.Fatalf("New before MigrateSchema: %v, want it to say to run MigrateSchema", err)
	}
	sql, err := server.Triggers(codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sql, "public.") || !strings.Contains(sql, `"magicsync_engine".sync_touched`) {
		t.Fatalf("the triggers' SQL does not name the engine's schema:\n%s", sql)
	}

	sh := openIn(t, pool, codecs, opts)
	sh.exec(`INSERT INTO shop.shops VALUES ($1, 'A'), ($2, 'B')`, sh.shopA, sh.shopB)
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "tea", 250)
	sh.product(sh.shopB, "coffee", 300)
	sh.pass()
	r.sync()
	r.expect("products", "tea")

	rec := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: 100, ChangedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{shoptest.Changes(t, codecs, rec)}}); err != nil {
		t.Fatal(err)
	}
	var filed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM shop.receipts WHERE id = $1`, rec.ID).Scan(&filed); err != nil || filed != 1 {
		t.Fatalf("the receipt filed: %d rows, %v", filed, err)
	}
	sh.pass()
	r.sync()
	if len(r.filed) == 0 {
		t.Fatal("no confirmation of the filed upload")
	}
	if err := sh.s.TrimLogs(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sh.s.TrimFiled(ctx, 0); err != nil {
		t.Fatal(err)
	}

	if tables, functions := engineObjects(t, sh, "public"); tables != 0 || functions != 0 {
		t.Errorf("public holds %d sync_ tables and %d sync_ functions, want none", tables, functions)
	}
	tables, functions := engineObjects(t, sh, "magicsync_engine")
	if tables < 10 || functions < 2 {
		t.Errorf("magicsync_engine holds %d sync_ tables and %d sync_ functions, want the engine's", tables, functions)
	}
	var replicas int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM magicsync_engine.sync_replicas`).Scan(&replicas); err != nil || replicas != 1 {
		t.Errorf("magicsync_engine.sync_replicas holds %d rows (%v), want the register", replicas, err)
	}
	// Migrating again finds nothing to do; so does a server opened again.
	if err := server.MigrateSchema(ctx, pool, opts.Schema); err != nil {
		t.Fatal(err)
	}
	if _, err := server.New(ctx, pool, codecs, opts); err != nil {
		t.Fatal(err)
	}
}

func TestSchemasKeepEnginesApart(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, shoptest.PostgresDDL+branchDDL); err != nil {
		t.Fatal(err)
	}
	ho := openIn(t, pool, shopCodecs(t), shopOptions)
	ho.exec(`INSERT INTO shop.shops VALUES ($1, 'A'), ($2, 'B')`, ho.shopA, ho.shopB)
	branch := openIn(t, pool, shoptest.Codecs(t, Bulletin{}),
		server.Options{Replicas: "branch.devices(id)", Schema: "magicsync_branch"})

	register := ho.register(ho.shopA)
	device := newFake(branch, uuid.New())
	branch.exec(`INSERT INTO branch.devices VALUES ($1)`, device.id)
	ho.product(ho.shopA, "tea", 250)
	branch.exec(`INSERT INTO branch.bulletins VALUES (1, 'open at nine'), (2, 'closed on Sunday')`)
	ho.pass()
	branch.pass()
	register.sync()
	device.sync()
	register.expect("products", "tea")
	if n := len(device.held["bulletins"]); n != 2 {
		t.Errorf("the device holds %d bulletins, want 2", n)
	}
	if len(register.held["bulletins"]) != 0 || len(device.held["products"]) != 0 {
		t.Error("a replica holds rows of the other engine")
	}

	for _, c := range []struct {
		sh    *shop
		own   uuid.UUID
		other uuid.UUID
	}{{ho, register.id, device.id}, {branch, device.id, register.id}} {
		st, err := c.sh.s.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st) != 1 || st[0].ID != c.own {
			t.Errorf("Status lists %v, want only %s", st, c.own)
		}
		if _, _, err := c.sh.s.Endpoint().Next(ctx, c.other, server.Applied{}); !errorsIs(err, server.ErrUnknownReplica) {
			t.Errorf("Next of the other engine's replica: %v, want ErrUnknownReplica", err)
		}
	}
	for schema, want := range map[string]uuid.UUID{"public": register.id, "magicsync_branch": device.id} {
		var ids []uuid.UUID
		if err := pool.QueryRow(ctx, `SELECT array_agg(id) FROM `+schema+`.sync_replicas`).Scan(&ids); err != nil {
			t.Fatal(err)
		}
		if len(ids) != 1 || ids[0] != want {
			t.Errorf("%s.sync_replicas holds %v, want %s", schema, ids, want)
		}
	}
}

func TestSchemaNameChecked(t *testing.T) {
	t.Parallel()
	codecs := shopCodecs(t)
	for _, name := range []string{`bad"name`, "it's", "100%", "tab\there", strings.Repeat("s", 64)} {
		opts := server.Options{Replicas: shoptest.Replicas, Schema: name}
		_, err := server.Triggers(codecs, opts)
		if err == nil || !strings.Contains(err.Error(), "Options.Schema") {
			t.Errorf("Triggers with Schema %q: %v, want an error naming Options.Schema", name, err)
		}
		if _, err := server.New(context.Background(), nil, codecs, opts); err == nil || !strings.Contains(err.Error(), "Options.Schema") {
			t.Errorf("New with Schema %q: %v, want an error naming Options.Schema", name, err)
		}
		if err := server.MigrateSchema(context.Background(), nil, name); err == nil || !strings.Contains(err.Error(), "Options.Schema") {
			t.Errorf("MigrateSchema of %q: %v, want an error naming Options.Schema", name, err)
		}
	}
}
