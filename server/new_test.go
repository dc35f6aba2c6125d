package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/server"
)

type Followed struct {
	ID        uuid.UUID `db:"id" sync:"key"`
	ProductID uuid.UUID `db:"product_id"`
}

func (Followed) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "images", Mirror: magicsync.Catalog, Sync: magicsync.Follows("product_id")}
}

type Owned struct {
	ID    uuid.UUID `db:"id" sync:"key"`
	Local string    `db:"local" sync:"replica_owned"`
}

func (Owned) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "owned", Mirror: magicsync.Catalog}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		setup string // run after the shop's schema, migration and triggers
		skip  bool   // skip Migrate
		want  string
	}{
		{name: "no migration", skip: true, want: "run server.Migrate"},
		{name: "missing table", setup: `DROP TABLE shop.tasks`, want: `table "shop"."tasks" does not exist`},
		{name: "missing column", setup: `ALTER TABLE shop.products DROP COLUMN name`, want: `has no column "name"`},
		{name: "wrong type", setup: `ALTER TABLE shop.products ALTER COLUMN price_cents TYPE text`, want: `"price_cents" is text`},
		{name: "timestamp without time zone", setup: `ALTER TABLE shop.products ALTER COLUMN updated_at TYPE timestamp`, want: "timestamp with time zone"},
		{name: "no unique key", setup: `ALTER TABLE shop.currencies DROP CONSTRAINT currencies_pkey`, want: "no primary key or unique index"},
		{name: "missing trigger", setup: `DO $$ DECLARE t text; BEGIN SELECT tgname INTO t FROM pg_trigger WHERE tgrelid = 'shop.products'::regclass AND tgname LIKE 'sync_u_%'; EXECUTE format('DROP TRIGGER %I ON shop.products', t); END $$`, want: "server.Triggers"},
		{name: "no replicas table", setup: `DROP TABLE shop.registers CASCADE`, want: "replicas table"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := newPool(t)
			if _, err := pool.Exec(ctx, shopSchema); err != nil {
				t.Fatal(err)
			}
			codecs := shopCodecs(t)
			if !c.skip {
				if err := server.Migrate(ctx, pool); err != nil {
					t.Fatal(err)
				}
				sql, err := server.Triggers(codecs, shopOptions)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := pool.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			if c.setup != "" {
				if _, err := pool.Exec(ctx, c.setup); err != nil {
					t.Fatal(err)
				}
			}
			_, err := server.New(ctx, pool, codecs, shopOptions)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v\nwant it to say %q", err, c.want)
			}
		})
	}
	t.Run("bad options", func(t *testing.T) {
		if _, err := server.Triggers(shopCodecs(t), server.Options{}); err == nil {
			t.Error("no Replicas accepted")
		}
	})
}

// Triggers' SQL runs again on a database that has it, changing nothing,
// and New accepts the result; run on a database missing a trigger, it
// puts it back.
func TestTriggersAreIdempotentAndNew(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	sql, err := server.Triggers(sh.codecs, shopOptions)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sql, "CREATE") || !strings.Contains(sql, "TRIGGER") {
		t.Fatalf("Triggers gave no trigger to create:\n%s", sql)
	}
	const engineTriggers = `SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal AND tgname LIKE 'sync\_%'`
	installed := sh.count(engineTriggers)
	if installed == 0 {
		t.Fatal("no trigger of the engine installed by the shop's setup")
	}
	sh.exec(sql)
	sh.exec(sql)
	if n := sh.count(engineTriggers); n != installed {
		t.Fatalf("%d triggers of the engine after running Triggers twice more; want the %d there were", n, installed)
	}
	sh.exec(`DO $$ DECLARE t text; BEGIN SELECT tgname INTO t FROM pg_trigger WHERE tgrelid = 'shop.products'::regclass AND tgname LIKE 'sync\_u\_%'; EXECUTE format('DROP TRIGGER %I ON shop.products', t); END $$`)
	if n := sh.count(engineTriggers); n != installed-1 {
		t.Fatalf("%d triggers after dropping one of %d", n, installed)
	}
	sh.exec(sql)
	if n := sh.count(engineTriggers); n != installed {
		t.Fatalf("%d triggers of the engine after running Triggers on a database missing one; want %d", n, installed)
	}
	if _, err := server.New(sh.ctx, sh.pool, sh.codecs, shopOptions); err != nil {
		t.Fatal(err)
	}
	// A bulk update notes each key once, in one statement.
	sh.exec(`INSERT INTO shop.products (id, shop_id, name, price_cents) SELECT gen_random_uuid(), $1, 'p' || i, i FROM generate_series(1, 10000) i`, sh.shopA)
	sh.pass()
	start := time.Now()
	sh.exec(`UPDATE shop.products SET price_cents = price_cents + 1`)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a 10,000-row update took %v", d)
	}
	if n := sh.count(`SELECT count(*) FROM public.sync_touched WHERE tbl = 'products'`); n != 10000 {
		t.Errorf("%d keys noted, want 10000", n)
	}
}

// A host's write is planned soon after it commits, long before PassEvery:
// Run watches the triggers' notes. It runs alone, not in parallel with the
// other tests: it gives Run seconds, which a loaded machine can outlast.
func TestRunPlansAHostWriteBeforePassEvery(t *testing.T) {
	sh := newShop(t, server.Options{PassEvery: time.Hour})
	ctx, cancel := context.WithCancel(sh.ctx)
	done := make(chan error, 1)
	go func() { done <- sh.s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	r := sh.register(sh.shopA)
	r.next(2 * time.Second) // the provisioning, once Run adopted it
	sh.product(sh.shopA, "apple", 1)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r.sync()
		if len(r.names("products")) == 1 {
			return
		}
	}
	t.Errorf("Run did not plan the new product: holds %v", r.names("products"))
}

// The features the server does not implement yet are refused by New — not
// only by Triggers — each by name, rather than half served.
type Special struct {
	ID   uuid.UUID `db:"id" sync:"key"`
	Name string    `db:"name"`
}

func (Special) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "specials", Mirror: magicsync.Catalog, Active: "shop.specials_on_sale"}
}

type Coupon struct {
	ID      uuid.UUID `db:"id" sync:"key"`
	Retired bool      `db:"retired"`
}

func (Coupon) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "coupons", Mirror: magicsync.Catalog, Retired: "retired"}
}

// New takes every declaration NewCodecs takes: Follows routes, Active
// views, Retired columns and replica_owned columns, all four at once.
func TestNewAcceptsEveryDeclarationNewCodecsAccepts(t *testing.T) {
	t.Parallel()
	const tables = `
CREATE TABLE shop.images (id uuid PRIMARY KEY, product_id uuid NOT NULL REFERENCES shop.products);
CREATE TABLE shop.owned (id uuid PRIMARY KEY);
CREATE TABLE shop.specials (id uuid PRIMARY KEY, name text NOT NULL, on_sale bool NOT NULL DEFAULT true);
CREATE VIEW shop.specials_on_sale AS SELECT id FROM shop.specials WHERE on_sale;
CREATE TABLE shop.coupons (id uuid PRIMARY KEY, retired bool NOT NULL DEFAULT false);
`
	ctx := context.Background()
	pool := newPool(t)
	if _, err := pool.Exec(ctx, shopSchema+tables); err != nil {
		t.Fatal(err)
	}
	codecs, err := magicsync.NewCodecs(Product{}, Currency{}, Task{}, Receipt{}, Followed{}, Owned{}, Special{}, Coupon{})
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	sql, err := server.Triggers(codecs, shopOptions)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
	if _, err := server.New(ctx, pool, codecs, shopOptions); err != nil {
		t.Fatalf("New: %v", err)
	}
}

// triggerVersion is the version hash of the triggers installed on a table.
func triggerVersion(t *testing.T, sh *shop, table string) string {
	t.Helper()
	var name string
	if err := sh.pool.QueryRow(sh.ctx, `SELECT tgname FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname LIKE 'sync\_i\_%'`, table).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(name, "sync_i_")
}

// New refuses triggers that are there under the current names but are not
// what Triggers writes now, and says to run Triggers' SQL; running it makes
// New accept them, and they note writes again.
func TestNewRefusesOutdatedTriggers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		setup func(h string) string
	}{
		{"an older version's triggers", func(h string) string {
			// The function and triggers of another (older) version, as an
			// earlier release left them, and none of this one.
			return fmt.Sprintf(`CREATE FUNCTION public.sync_fn_0123456789abcdef() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN
  INSERT INTO public.sync_touched (tbl, key) SELECT 'products', jsonb_build_object('id', n.id) FROM sync_new n;
  RETURN NULL;
END$$;
DROP TRIGGER sync_i_%[1]s ON shop.products; DROP TRIGGER sync_u_%[1]s ON shop.products;
DROP TRIGGER sync_d_%[1]s ON shop.products; DROP TRIGGER sync_t_%[1]s ON shop.products;
CREATE TRIGGER sync_i_0123456789abcdef AFTER INSERT ON shop.products REFERENCING NEW TABLE AS sync_new FOR EACH STATEMENT EXECUTE FUNCTION public.sync_fn_0123456789abcdef();
CREATE TRIGGER sync_u_0123456789abcdef AFTER UPDATE ON shop.products REFERENCING NEW TABLE AS sync_new FOR EACH STATEMENT EXECUTE FUNCTION public.sync_fn_0123456789abcdef();`, h)
		}},
		{"the function's body replaced", func(h string) string {
			return fmt.Sprintf(`CREATE OR REPLACE FUNCTION public.sync_fn_%s() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$`, h)
		}},
		{"a trigger calling another function", func(h string) string {
			return fmt.Sprintf(`CREATE FUNCTION public.host_fn() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
DROP TRIGGER sync_i_%[1]s ON shop.products;
CREATE TRIGGER sync_i_%[1]s AFTER INSERT ON shop.products REFERENCING NEW TABLE AS sync_new FOR EACH STATEMENT EXECUTE FUNCTION public.host_fn();`, h)
		}},
		{"a trigger disabled", func(h string) string {
			return fmt.Sprintf(`ALTER TABLE shop.products DISABLE TRIGGER sync_u_%s`, h)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sh := newShop(t, shopOptions)
			sh.exec(c.setup(triggerVersion(t, sh, "shop.products")))
			_, err := server.New(sh.ctx, sh.pool, sh.codecs, shopOptions)
			if err == nil {
				t.Fatal("New accepted the outdated triggers")
			}
			// The problem's line names the table and what to run; the SQL
			// to run follows it.
			var problem string
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.Contains(line, "the triggers of") {
					problem = line
				}
			}
			if !strings.Contains(problem, `the triggers of "shop"."products" are`) || !strings.Contains(problem, "run the SQL of server.Triggers") {
				t.Errorf("New: %q\nwant it to name shop.products and say to run server.Triggers' SQL", problem)
			}
			if strings.Contains(problem, `"shop"."currencies"`) {
				t.Errorf("New names tables whose triggers are current: %q", problem)
			}
			if want, _ := server.Triggers(sh.codecs, shopOptions); !strings.Contains(err.Error(), want) {
				t.Errorf("New's refusal does not hold the SQL of server.Triggers")
			}
			sql, err := server.Triggers(sh.codecs, shopOptions)
			if err != nil {
				t.Fatal(err)
			}
			sh.exec(sql)
			if _, err := server.New(sh.ctx, sh.pool, sh.codecs, shopOptions); err != nil {
				t.Fatalf("New after running Triggers' SQL: %v", err)
			}
			sh.exec(`DELETE FROM public.sync_touched`)
			id := sh.product(sh.shopA, "apple", 1)
			sh.exec(`UPDATE shop.products SET price_cents = 2 WHERE id = $1`, id)
			if n := sh.count(`SELECT count(*) FROM public.sync_touched WHERE tbl = 'products' AND key = jsonb_build_object('id', $1::uuid)`, id); n != 2 {
				t.Errorf("the reinstalled triggers noted the product %d times, want 2 (insert, update)", n)
			}
		})
	}
}

// Triggers' SQL run by a migration tool that changes its line endings is
// still current: only what the function does counts.
func TestNewAcceptsTriggersInstalledWithOtherLineEndings(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	sql, err := server.Triggers(sh.codecs, shopOptions)
	if err != nil {
		t.Fatal(err)
	}
	sh.exec(strings.ReplaceAll(sql, "\n", "\r\n"))
	var crlf bool
	if err := sh.pool.QueryRow(sh.ctx, `SELECT strpos(prosrc, E'\r\n') > 0 FROM pg_proc WHERE proname = 'sync_fn_' || $1`, triggerVersion(t, sh, "shop.products")).Scan(&crlf); err != nil || !crlf {
		t.Fatalf("the function's source has no CRLF (%v): the test tests nothing", err)
	}
	if _, err := server.New(sh.ctx, sh.pool, sh.codecs, shopOptions); err != nil {
		t.Fatal(err)
	}
}

// A catalog's replica_owned column is the replica's alone: New accepts it
// whether or not the server's table has the column, and no message ever
// carries it.
func TestAReplicaOwnedColumnIsNeverSentAndNeedNotExistOnTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := setupShop(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE shop.owned (id uuid PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	codecs, err := magicsync.NewCodecs(Product{}, Currency{}, Task{}, Receipt{}, Owned{})
	if err != nil {
		t.Fatal(err)
	}
	shopserver.InstallTriggers(t, pool, codecs, shopOptions)
	s, err := server.New(ctx, pool, codecs, shopOptions)
	if err != nil {
		t.Fatalf("New refused a replica_owned column the server's table lacks: %v", err)
	}
	sh := &shop{t: t, ctx: ctx, pool: pool, s: s, codecs: codecs, shopA: uuid.New(), shopB: uuid.New()}
	sh.exec(`INSERT INTO shop.shops VALUES ($1, 'A'), ($2, 'B')`, sh.shopA, sh.shopB)
	f := sh.register(sh.shopA)
	sh.exec(`INSERT INTO shop.owned VALUES ($1)`, uuid.New())
	sh.pass()
	var owned int
	for f.sync() > 0 {
	}
	for _, m := range f.msgs {
		for _, tc := range m.GetDown().GetTables() {
			if tc.Table != "owned" {
				continue
			}
			owned += len(tc.Upserts)
			if len(tc.Columns) != 1 || tc.Columns[0] != "id" {
				t.Errorf("the owned table went down with columns %v; want id alone", tc.Columns)
			}
		}
	}
	if owned != 1 {
		t.Errorf("the owned table's row went down %d times, want once", owned)
	}
}
