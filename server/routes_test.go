package server_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// routes_test.go tests the table options beyond a row's own route: items
// grouped by shop, held only while the items_shown view shows them (on
// sale, or promoted) and not discontinued; their pictures follow them, and
// the codes of a picture follow the picture.

type Ware struct {
	ID           uuid.UUID `db:"id" sync:"key"`
	ShopID       uuid.UUID `db:"shop_id"`
	Name         string    `db:"name"`
	OnSale       bool      `db:"on_sale"`
	Discontinued bool      `db:"discontinued"`
}

func (Ware) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "items", Mirror: magicsync.Catalog,
		Sync:        magicsync.Grouped("shop.registers(id, shop_id)", "shop_id"),
		Active:      "items_shown",
		ActiveReads: []string{"shop.promotions(item_id)"},
		Retired:     "discontinued"}
}

type Picture struct {
	ID     uuid.UUID `db:"id" sync:"key"`
	ItemID uuid.UUID `db:"item_id"`
	Name   string    `db:"name"`
}

func (Picture) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "pictures", Mirror: magicsync.Catalog, Sync: magicsync.Follows("item_id")}
}

type Code struct {
	Code      string     `db:"code" sync:"key"`
	PictureID *uuid.UUID `db:"picture_id"`
}

func (Code) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "codes", Mirror: magicsync.Catalog, Sync: magicsync.Follows("picture_id")}
}

const routesSchema = `
CREATE TABLE shop.items (id uuid PRIMARY KEY, shop_id uuid NOT NULL REFERENCES shop.shops, name text NOT NULL,
	on_sale bool NOT NULL DEFAULT true, discontinued bool NOT NULL DEFAULT false);
CREATE TABLE shop.promotions (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), item_id uuid REFERENCES shop.items ON DELETE CASCADE);
CREATE VIEW shop.items_shown AS SELECT i.id FROM shop.items i
	WHERE i.on_sale OR EXISTS (SELECT 1 FROM shop.promotions p WHERE p.item_id = i.id);
CREATE TABLE shop.pictures (id uuid PRIMARY KEY, item_id uuid NOT NULL REFERENCES shop.items ON DELETE CASCADE, name text NOT NULL);
CREATE INDEX ON shop.pictures (item_id);
CREATE TABLE shop.codes (code text PRIMARY KEY, picture_id uuid REFERENCES shop.pictures ON DELETE SET NULL);
CREATE INDEX ON shop.codes (picture_id);
`

// routesShop opens the shop with items, pictures and codes declared.
func routesShop(t *testing.T) *shop {
	t.Helper()
	pool := newCapturePool(t)
	if _, err := pool.Exec(context.Background(), routesSchema); err != nil {
		t.Fatal(err)
	}
	codecs := shoptest.Codecs(t, Product{}, Currency{}, Task{}, Receipt{}, Code{}, Picture{}, Ware{})
	return openShop(t, pool, codecs)
}

// routesShopWith is routesShop with other options.
func routesShopWith(t *testing.T, opts server.Options) *shop {
	t.Helper()
	sh := routesShop(t)
	s, err := server.New(sh.ctx, sh.pool, sh.codecs, withCapture(opts))
	if err != nil {
		t.Fatal(err)
	}
	sh.s = s
	return sh
}

func (sh *shop) item(shopID uuid.UUID, name string) uuid.UUID {
	sh.t.Helper()
	id := uuid.New()
	sh.exec(`INSERT INTO shop.items (id, shop_id, name) VALUES ($1, $2, $3)`, id, shopID, name)
	return id
}

func (sh *shop) picture(item uuid.UUID, name string) uuid.UUID {
	sh.t.Helper()
	id := uuid.New()
	sh.exec(`INSERT INTO shop.pictures (id, item_id, name) VALUES ($1, $2, $3)`, id, item, name)
	return id
}

// heldNames lists what the replica holds of items and pictures (their
// names) or codes (their codes), sorted.
func (f *fake) heldNames(table string) []string {
	f.sh.t.Helper()
	out := []string{}
	for _, tuple := range f.held[table] {
		out = append(out, nameOf(f.sh.t, table, tuple))
	}
	sort.Strings(out)
	return out
}

func nameOf(t testing.TB, table string, tuple []byte) string {
	t.Helper()
	vals, err := wire.DecodeTuple(tuple, nil)
	if err != nil {
		t.Fatal(err)
	}
	switch table {
	case "items", "pictures":
		return vals[2].S
	case "codes":
		return vals[0].S
	}
	t.Fatalf("no name in %s", table)
	return ""
}

// received lists, sorted, the names of every row of table any message to
// the replica carried in an upsert, staged or not.
func (f *fake) received(table string) []string {
	f.sh.t.Helper()
	seen := map[string]bool{}
	for _, m := range f.msgs {
		d, ok := m.Body.(*syncpb.ToReplica_Down)
		if !ok {
			continue
		}
		for _, tc := range d.Down.Tables {
			if tc.Table != table {
				continue
			}
			for _, u := range tc.Upserts {
				seen[nameOf(f.sh.t, table, u)] = true
			}
		}
	}
	out := []string{}
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (f *fake) expectHeld(table string, want ...string) {
	f.sh.t.Helper()
	if want == nil {
		want = []string{}
	}
	if got := f.heldNames(table); !equal(got, want) {
		f.sh.t.Errorf("replica %s holds %s %v, want %v", f.id, table, got, want)
	}
}

func (f *fake) expectReceived(table string, want ...string) {
	f.sh.t.Helper()
	if want == nil {
		want = []string{}
	}
	if got := f.received(table); !equal(got, want) {
		f.sh.t.Errorf("replica %s was sent %s %v, want %v (and no other)", f.id, table, got, want)
	}
}

func syncAll(rs ...*fake) {
	for _, r := range rs {
		r.sync()
	}
}

// Pictures are held where their item is, codes where their picture is,
// through every move of the item; a follower whose parent is held nowhere
// is held nowhere, and arrives with it.
func TestAFollowerIsHeldExactlyWhereTheRowItFollowsIs(t *testing.T) {
	t.Parallel()
	sh := routesShop(t)
	a, b := sh.register(sh.shopA), sh.register(sh.shopB)
	chair := sh.item(sh.shopA, "chair")
	front := sh.picture(chair, "chair front")
	sh.picture(chair, "chair back")
	sh.exec(`INSERT INTO shop.codes VALUES ('C-1', $1), ('C-2', $1), ('LOOSE', NULL)`, front)
	sh.pass()
	syncAll(a, b)
	a.expectHeld("items", "chair")
	a.expectHeld("pictures", "chair back", "chair front")
	a.expectHeld("codes", "C-1", "C-2")
	b.expectHeld("pictures")
	b.expectReceived("pictures")
	b.expectReceived("codes")

	// The item moves to shop B: its pictures and their codes go with it.
	sh.exec(`UPDATE shop.items SET shop_id = $1 WHERE id = $2`, sh.shopB, chair)
	sh.pass()
	syncAll(a, b)
	a.expectHeld("items")
	a.expectHeld("pictures")
	a.expectHeld("codes")
	b.expectHeld("items", "chair")
	b.expectHeld("pictures", "chair back", "chair front")
	b.expectHeld("codes", "C-1", "C-2")

	// A code moves to a picture of an item of shop A; a new picture of the
	// chair reaches B alone.
	table := sh.item(sh.shopA, "table")
	top := sh.picture(table, "table top")
	sh.exec(`UPDATE shop.codes SET picture_id = $1 WHERE code = 'C-2'`, top)
	sh.picture(chair, "chair side")
	sh.pass()
	syncAll(a, b)
	a.expectHeld("pictures", "table top")
	a.expectHeld("codes", "C-2")
	b.expectHeld("pictures", "chair back", "chair front", "chair side")
	b.expectHeld("codes", "C-1")
	a.expectReceived("pictures", "chair back", "chair front", "table top")

	// The item is deleted: every follower goes (the host's cascade here;
	// the engine lets them go either way).
	sh.exec(`DELETE FROM shop.items WHERE id = $1`, chair)
	sh.pass()
	syncAll(a, b)
	b.expectHeld("items")
	b.expectHeld("pictures")
	b.expectHeld("codes")

	// A replica provisioned now gets the followers of what it holds, and
	// nothing else.
	a2 := sh.register(sh.shopA)
	sh.pass()
	a2.sync()
	a2.expectHeld("pictures", "table top")
	a2.expectHeld("codes", "C-2")
	a2.expectReceived("pictures", "table top")
	a2.expectReceived("codes", "C-2")
	for _, r := range []*fake{a, a2} {
		st := statusOf(t, sh, r.id)
		for _, table := range []string{"items", "pictures", "codes"} {
			ts := tableStatus(st, table)
			if n := len(r.held[table]); ts.Holds != n || ts.Should != n {
				t.Errorf("status of %v's %s: holds %d, should %d; it holds %d", r.id, table, ts.Holds, ts.Should, n)
			}
		}
	}
}

// In messages cut small, a follower arrives after the row it follows and
// leaves before it: a replica applying them in order never holds a
// picture without its item, nor a code without its picture.
func TestAFollowerArrivesAfterAndLeavesBeforeTheRowItFollows(t *testing.T) {
	t.Parallel()
	opts := shopOptions
	opts.MaxMessageBytes = 200 // a row or two per message
	sh := routesShopWith(t, opts)
	a, b := sh.register(sh.shopA), sh.register(sh.shopB)
	for i := range 5 {
		item := sh.item(sh.shopA, fmt.Sprintf("item %d", i))
		for j := range 2 {
			pic := sh.picture(item, fmt.Sprintf("picture %d.%d", i, j))
			sh.exec(`INSERT INTO shop.codes VALUES ($1, $2)`, fmt.Sprintf("C%d.%d", i, j), pic)
		}
	}
	sh.pass()
	syncAll(a, b)
	a.expectHeld("codes", "C0.0", "C0.1", "C1.0", "C1.1", "C2.0", "C2.1", "C3.0", "C3.1", "C4.0", "C4.1")
	sh.exec(`UPDATE shop.items SET shop_id = $1`, sh.shopB)
	sh.pass()
	fromA := len(a.msgs)
	syncAll(a, b)
	if len(a.msgs)-fromA < 5 {
		t.Fatalf("the move took %d messages to register A; the test needs it cut small", len(a.msgs)-fromA)
	}
	checkFollowerOrder(t, a)
	checkFollowerOrder(t, b)
	a.expectHeld("items")
	b.expectHeld("codes", "C0.0", "C0.1", "C1.0", "C1.1", "C2.0", "C2.1", "C3.0", "C3.1", "C4.0", "C4.1")
}

// checkFollowerOrder replays every message a register got, in order, and
// fails at the first after which it would hold a picture without its item
// or a code without its picture.
func checkFollowerOrder(t *testing.T, f *fake) {
	t.Helper()
	replay := newFake(f.sh, f.id)
	parents := map[string]string{"pictures": "items", "codes": "pictures"}
	for _, m := range f.msgs {
		replay.apply(m)
		for table, parent := range parents {
			for _, tuple := range replay.held[table] {
				vals, err := wire.DecodeTuple(tuple, nil)
				if err != nil {
					t.Fatal(err)
				}
				if vals[1].Kind == wire.Null {
					continue
				}
				if _, ok := replay.held[parent][magicsync.Key(codec.KeyOfValues(vals[1]))]; !ok {
					t.Fatalf("after message %d, register %v would hold a row of %s (%s) without the %s row it points at",
						m.Id, f.id, table, nameOf(t, table, tuple), parent)
				}
			}
		}
	}
}

// An Active view decides what is held: an item leaves it by its own
// change or by a change to a table the view reads (ActiveReads), and its
// pictures leave with it.
func TestOnlyRowsTheActiveViewShowsAreHeld(t *testing.T) {
	t.Parallel()
	sh := routesShop(t)
	a := sh.register(sh.shopA)
	lamp := sh.item(sh.shopA, "lamp")
	sh.picture(lamp, "lamp photo")
	sh.exec(`UPDATE shop.items SET on_sale = false WHERE id = $1`, lamp)
	sh.item(sh.shopA, "desk")
	sh.pass()
	a.sync()
	a.expectHeld("items", "desk")
	a.expectHeld("pictures")
	a.expectReceived("items", "desk")
	a.expectReceived("pictures")

	// A promotion (another table the view reads) shows the lamp.
	sh.exec(`INSERT INTO shop.promotions (item_id) VALUES ($1)`, lamp)
	sh.pass()
	a.sync()
	a.expectHeld("items", "desk", "lamp")
	a.expectHeld("pictures", "lamp photo")

	// The promotion ends: the lamp and its picture are let go.
	sh.exec(`DELETE FROM shop.promotions WHERE item_id = $1`, lamp)
	sh.pass()
	a.sync()
	a.expectHeld("items", "desk")
	a.expectHeld("pictures")

	// On sale again by its own change.
	sh.exec(`UPDATE shop.items SET on_sale = true WHERE id = $1`, lamp)
	sh.pass()
	a.sync()
	a.expectHeld("items", "desk", "lamp")
	if st := statusOf(t, sh, a.id); tableStatus(st, "items").Should != 2 {
		t.Errorf("items should-hold %d, want 2", tableStatus(st, "items").Should)
	}
}

// A retired item is let go (a replica keeps it only while its own rows
// point at it, which is the replica's to judge), and never sent to a
// replica that lacks it; retired no more, it is sent again.
func TestARetiredRowGoesToNoReplicaThatLacksIt(t *testing.T) {
	t.Parallel()
	sh := routesShop(t)
	a := sh.register(sh.shopA)
	stool := sh.item(sh.shopA, "stool")
	sh.picture(stool, "stool photo")
	sh.pass()
	a.sync()
	a.expectHeld("items", "stool")

	sh.exec(`UPDATE shop.items SET discontinued = true WHERE id = $1`, stool)
	sh.pass()
	before := len(a.msgs)
	a.sync()
	a.expectHeld("items")
	a.expectHeld("pictures")
	for _, m := range a.msgs[before:] {
		if d, ok := m.Body.(*syncpb.ToReplica_Down); ok {
			for _, tc := range d.Down.Tables {
				if len(tc.Upserts) > 0 {
					t.Errorf("retiring sent an upsert of %s", tc.Table)
				}
			}
		}
	}
	// Changed while retired: sent to no one.
	sh.exec(`UPDATE shop.items SET name = 'old stool' WHERE id = $1`, stool)
	sh.pass()
	a.sync()
	a2 := sh.register(sh.shopA)
	sh.pass()
	a2.sync()
	a2.expectReceived("items")
	a2.expectReceived("pictures")
	a.expectReceived("items", "stool")

	sh.exec(`UPDATE shop.items SET discontinued = false WHERE id = $1`, stool)
	sh.pass()
	syncAll(a, a2)
	a.expectHeld("items", "old stool")
	a2.expectHeld("items", "old stool")
	a2.expectHeld("pictures", "stool photo")
}

// tableStatus finds one table's status in a replica's.
func tableStatus(st server.ReplicaStatus, table string) server.TableStatus {
	for _, ts := range st.Tables {
		if ts.Table == table {
			return ts
		}
	}
	return server.TableStatus{Table: table}
}

type Hen struct {
	ID    uuid.UUID  `db:"id" sync:"key"`
	EggID *uuid.UUID `db:"egg_id"`
}

func (Hen) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "hens", Mirror: magicsync.Catalog, Sync: magicsync.Follows("egg_id")}
}

type Egg struct {
	ID    uuid.UUID  `db:"id" sync:"key"`
	HenID *uuid.UUID `db:"hen_id"`
}

func (Egg) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "eggs", Mirror: magicsync.Catalog, Sync: magicsync.Follows("hen_id")}
}

// New checks each Follows route against the database: its column needs a
// foreign key to a declared catalog's key, and routes must not follow
// each other round in a cycle; an Active view must exist and show the key.
func TestNewRefusesRoutesItCannotPlan(t *testing.T) {
	t.Parallel()
	const henAndEgg = `CREATE TABLE shop.hens (id uuid PRIMARY KEY, egg_id uuid);
		CREATE TABLE shop.eggs (id uuid PRIMARY KEY, hen_id uuid REFERENCES shop.hens);
		ALTER TABLE shop.hens ADD FOREIGN KEY (egg_id) REFERENCES shop.eggs;`
	for _, c := range []struct {
		name  string
		setup string
		rows  []magicsync.Declarer
		want  []string
	}{
		{"a Follows column without a foreign key", `ALTER TABLE shop.pictures DROP CONSTRAINT pictures_item_id_fkey`, nil,
			[]string{`"shop"."pictures"`, `Follows("item_id") needs a foreign key`, "ADD FOREIGN KEY"}},
		{"a Follows column pointing at no catalog", `ALTER TABLE shop.pictures DROP CONSTRAINT pictures_item_id_fkey;
			ALTER TABLE shop.pictures ADD FOREIGN KEY (item_id) REFERENCES shop.shops`, nil,
			[]string{`Follows("item_id")`, `"shop"."shops", which is not a declared catalog`}},
		{"Follows routes in a cycle", henAndEgg, []magicsync.Declarer{Hen{}, Egg{}},
			[]string{"cycle", "hens follows eggs follows hens"}},
		{"no Active view", `DROP VIEW shop.items_shown`, nil,
			[]string{`Active view "shop"."items_shown" does not exist`}},
		{"an Active view without the key", `DROP VIEW shop.items_shown; CREATE VIEW shop.items_shown AS SELECT i.id AS item FROM shop.items i`, nil,
			[]string{`has no column "id"`}},
		{"ActiveReads naming a missing table", `DROP TABLE shop.promotions CASCADE;
			CREATE VIEW shop.items_shown AS SELECT i.id FROM shop.items i WHERE i.on_sale`, nil,
			[]string{`ActiveReads names "shop"."promotions"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := shopserver.NewPool(t)
			if _, err := pool.Exec(ctx, routesSchema); err != nil {
				t.Fatal(err)
			}
			rows := append([]magicsync.Declarer{Product{}, Currency{}, Task{}, Receipt{}, Code{}, Picture{}, Ware{}}, c.rows...)
			codecs := shoptest.Codecs(t, rows...)
			if _, err := pool.Exec(ctx, c.setup); err != nil {
				t.Fatal(err)
			}
			s, err := server.New(ctx, pool, codecs, shopOptions)
			if err == nil || s != nil {
				t.Fatalf("New accepted what it cannot plan (%v)", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: %v\nwant it to say %q", err, w)
				}
			}
		})
	}
}
