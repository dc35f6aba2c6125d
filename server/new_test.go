package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
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
	t.Run("not supported yet", func(t *testing.T) {
		for _, row := range []magicsync.Declarer{Followed{}, Owned{}} {
			codecs, err := magicsync.NewCodecs(Product{}, row)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := server.Triggers(codecs, shopOptions); err == nil || !strings.Contains(err.Error(), "not supported") {
				t.Errorf("%T: %v", row, err)
			}
		}
	})
	t.Run("bad options", func(t *testing.T) {
		if _, err := server.Triggers(shopCodecs(t), server.Options{}); err == nil {
			t.Error("no Replicas accepted")
		}
	})
}

func TestTriggersAreIdempotentAndNew(t *testing.T) {
	sh := newShop(t, shopOptions)
	sql, _ := server.Triggers(sh.codecs, shopOptions)
	sh.exec(sql)
	sh.exec(sql)
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

func TestRunPlansOnNotify(t *testing.T) {
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
