package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/testenv"
)

// routes_property_test.go plays random histories over every route and
// table option at once: items grouped by shop, held while the items_shown
// view shows them (on sale, or promoted: a table the view reads) and not
// discontinued (Retired), with a shelf the register owns
// (replica_owned); their pictures follow them and the codes of a picture
// follow the picture; the registers' sales point at items by a foreign
// key. Products (grouped), notices (broadcast) and drawers (assigned) ride
// along.

type Item struct {
	ID           uuid.UUID `db:"id" sync:"key"`
	ShopID       uuid.UUID `db:"shop_id"`
	Name         string    `db:"name"`
	OnSale       bool      `db:"on_sale"`
	Discontinued bool      `db:"discontinued"`
	Shelf        *string   `db:"shelf" sync:"replica_owned"`
}

func (Item) SyncTable() magicsync.Table {
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

type Sale struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	ItemID     uuid.UUID `db:"item_id"`
}

func (Sale) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "sales", Mirror: magicsync.Record, Origin: "register_id"}
}

const routesPostgresDDL = `
CREATE TABLE shop.items (id uuid PRIMARY KEY, shop_id uuid NOT NULL, name text NOT NULL,
	on_sale bool NOT NULL DEFAULT true, discontinued bool NOT NULL DEFAULT false);
CREATE TABLE shop.promotions (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), item_id uuid NOT NULL REFERENCES shop.items ON DELETE CASCADE);
CREATE VIEW shop.items_shown AS SELECT i.id FROM shop.items i
	WHERE i.on_sale OR EXISTS (SELECT 1 FROM shop.promotions p WHERE p.item_id = i.id);
CREATE TABLE shop.pictures (id uuid PRIMARY KEY, item_id uuid NOT NULL REFERENCES shop.items ON DELETE CASCADE, name text NOT NULL);
CREATE INDEX ON shop.pictures (item_id);
CREATE TABLE shop.codes (code text PRIMARY KEY, picture_id uuid REFERENCES shop.pictures ON DELETE SET NULL);
CREATE INDEX ON shop.codes (picture_id);
CREATE TABLE shop.sales (register_id uuid NOT NULL, id uuid NOT NULL, item_id uuid NOT NULL, PRIMARY KEY (register_id, id));
`

const routesSQLiteDDL = `
CREATE TABLE items (id TEXT PRIMARY KEY, shop_id TEXT NOT NULL, name TEXT NOT NULL,
	on_sale INTEGER NOT NULL, discontinued INTEGER NOT NULL, shelf TEXT);
CREATE TABLE pictures (id TEXT PRIMARY KEY, item_id TEXT NOT NULL REFERENCES items ON DELETE CASCADE, name TEXT NOT NULL);
CREATE TABLE codes (code TEXT PRIMARY KEY, picture_id TEXT REFERENCES pictures ON DELETE CASCADE);
CREATE TABLE sales (register_id TEXT NOT NULL, id TEXT NOT NULL, item_id TEXT NOT NULL REFERENCES items, PRIMARY KEY (register_id, id));
`

// TestRandomRouteHistoriesSettle plays random histories of items moving
// between shops, entering and leaving the view (by their own column and by
// promotions), retired and back, deleted; pictures and codes re-pointed;
// registers selling items, deleting sales and setting shelves; with lost,
// duplicated and reordered messages and registers offline. Then it heals
// the network and checks that every register holds exactly what it
// should: the items, pictures and codes its shop's view shows, plus the
// items its own sales point at (kept, marked retired), nothing more; that
// no message ever brought a register a row none of its shops was ever
// meant to hold; and that no shelf was overwritten. Registers move
// between shops now and then.
//
// Each run plays seeds of its own, drawn afresh and logged:
// MAGICSYNC_PROPERTY_SEEDS=n plays n of them instead of the usual three
// (one under -short), and MAGICSYNC_SEED=s plays seed s alone, as a failed
// run logged it.
func TestRandomRouteHistoriesSettle(t *testing.T) {
	t.Parallel()
	for _, seed := range testenv.Seeds(t, propertySeeds()) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			playRouteHistory(t, seed, 150)
		})
	}
}

// routeWorld is what a route history has written, as the test knows it.
type routeWorld struct {
	h     *headOffice
	shops []uuid.UUID
	regs  []*register
	shop  map[*register]uuid.UUID
	// wasIn records every shop each register was ever in.
	wasIn map[*register][]uuid.UUID
	items []uuid.UUID
	pics  []uuid.UUID
	codes []string
	// mayHold records the shops each row may ever have been sent to:
	// an item, the shops whose view showed it between two steps; a
	// picture (a code), the shops that may have held the item (picture)
	// it pointed at, then or before — a follower goes where its parent
	// was planned, which may be a moment behind the host's tables.
	mayHold map[string]map[magicsync.Key]map[uuid.UUID]bool
	codecs  *magicsync.Codecs
	// shelves records every shelf a register wrote, by item.
	shelves map[*register]map[uuid.UUID][]string
}

func playRouteHistory(t *testing.T, seed uint64, steps int) {
	rnd := rand.New(rand.NewPCG(seed, seed*6271))
	var mu sync.Mutex
	intn := func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		return rnd.IntN(n)
	}
	float := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return rnd.Float64()
	}
	codecs := shoptest.Codecs(t, Product{}, Notice{}, Drawer{}, Receipt{}, Item{}, Picture{}, Code{}, Sale{})
	h := newHeadOfficeWith(t, codecs, routesPostgresDDL, routesSQLiteDDL)
	w := &routeWorld{h: h, shop: map[*register]uuid.UUID{}, wasIn: map[*register][]uuid.UUID{},
		mayHold: map[string]map[magicsync.Key]map[uuid.UUID]bool{}, codecs: codecs, shelves: map[*register]map[uuid.UUID][]string{}}
	w.shops = []uuid.UUID{h.addShop(), h.addShop()}
	for i := range 3 {
		shop := w.shops[i%2]
		g := h.addRegister(shop, sqlitetest.Drivers()[i%2])
		g.faults.set(float, 0.15, 0.15, 0.15, 0.1)
		w.regs = append(w.regs, g)
		w.shop[g] = shop
		w.wasIn[g] = []uuid.UUID{shop}
		w.shelves[g] = map[uuid.UUID][]string{}
	}
	pick := func(ids []uuid.UUID) (uuid.UUID, bool) {
		if len(ids) == 0 {
			return uuid.UUID{}, false
		}
		return ids[intn(len(ids))], true
	}
	for step := range steps {
		g := w.regs[intn(len(w.regs))]
		switch intn(18) {
		case 0, 1:
			id := uuid.New()
			h.exec("INSERT INTO shop.items (id, shop_id, name, on_sale) VALUES ($1, $2, $3, $4)", id, w.shops[intn(2)], fmt.Sprintf("item %d", step), intn(4) > 0)
			w.items = append(w.items, id)
			for n := range intn(3) {
				pic := uuid.New()
				h.exec("INSERT INTO shop.pictures VALUES ($1, $2, $3)", pic, id, fmt.Sprintf("picture %d.%d", step, n))
				w.pics = append(w.pics, pic)
			}
		case 2:
			if id, ok := pick(w.items); ok {
				h.exec("UPDATE shop.items SET name = $1 WHERE id = $2", fmt.Sprintf("renamed %d", step), id)
			}
		case 3:
			if id, ok := pick(w.items); ok {
				h.exec("UPDATE shop.items SET shop_id = $1 WHERE id = $2", w.shops[intn(2)], id)
			}
		case 4:
			if id, ok := pick(w.items); ok {
				h.exec("UPDATE shop.items SET on_sale = NOT on_sale WHERE id = $1", id)
			}
		case 5:
			if id, ok := pick(w.items); ok {
				if intn(2) == 0 {
					h.exec("INSERT INTO shop.promotions (item_id) VALUES ($1)", id)
				} else {
					h.exec("DELETE FROM shop.promotions WHERE item_id = $1", id)
				}
			}
		case 6:
			if id, ok := pick(w.items); ok {
				h.exec("UPDATE shop.items SET discontinued = NOT discontinued WHERE id = $1", id)
			}
		case 7:
			if len(w.items) > 0 && intn(3) == 0 {
				i := intn(len(w.items))
				h.exec("DELETE FROM shop.items WHERE id = $1", w.items[i])
				w.items = slices.Delete(w.items, i, i+1)
			}
		case 8:
			item, ok := pick(w.items)
			if !ok {
				break
			}
			if pic, ok := pick(w.pics); ok && intn(2) == 0 {
				h.exec("UPDATE shop.pictures SET item_id = $1 WHERE id = $2", item, pic) // a picture deleted with its item stays deleted
			} else {
				pic := uuid.New()
				h.exec("INSERT INTO shop.pictures VALUES ($1, $2, $3)", pic, item, fmt.Sprintf("picture %d", step))
				w.pics = append(w.pics, pic)
			}
		case 9, 16:
			pic, ok := pick(w.pics)
			if !ok {
				break
			}
			var to *uuid.UUID
			if intn(5) > 0 {
				to = &pic
			}
			if len(w.codes) > 0 && intn(2) == 0 {
				h.exec("UPDATE shop.codes SET picture_id = (SELECT id FROM shop.pictures WHERE id = $1) WHERE code = $2", to, w.codes[intn(len(w.codes))])
			} else {
				code := fmt.Sprintf("C%03d", step)
				h.exec("INSERT INTO shop.codes VALUES ($1, (SELECT id FROM shop.pictures WHERE id = $2))", code, to)
				w.codes = append(w.codes, code)
			}
		case 10, 11, 17:
			// The register sells an item it holds, not discontinued.
			held := g.holding("items", "id")
			var id string
			if len(held) > 0 {
				id = held[intn(len(held))]
			}
			if id != "" {
				if _, err := g.db.Exec("INSERT INTO sales (register_id, id, item_id) SELECT ?, ?, id FROM items WHERE id = ? AND discontinued = 0",
					g.id, uuid.New(), id); err != nil {
					t.Fatal(err)
				}
				g.r.Nudge()
			}
		case 12:
			// The register deletes one of its sales.
			if _, err := g.db.Exec("DELETE FROM sales WHERE id = (SELECT id FROM sales ORDER BY id LIMIT 1 OFFSET ?)", intn(3)); err != nil {
				t.Fatal(err)
			}
			g.r.Nudge()
		case 13:
			// The register puts an item it holds on a shelf of its own.
			held := g.holding("items", "id")
			if len(held) > 0 {
				id := uuid.MustParse(held[intn(len(held))])
				shelf := fmt.Sprintf("shelf %d", step)
				if _, err := g.db.Exec("UPDATE items SET shelf = ? WHERE id = ?", shelf, id); err != nil {
					t.Fatal(err)
				}
				w.shelves[g][id] = append(w.shelves[g][id], shelf)
			}
		case 14:
			if g.online.Load() {
				g.unplug()
			} else {
				g.plug()
			}
		case 15:
			switch intn(4) {
			case 3:
				// The register moves to the other shop.
				to := w.shops[0]
				if w.shop[g] == to {
					to = w.shops[1]
				}
				h.exec("UPDATE shop.registers SET shop_id = $1 WHERE id = $2", to, g.id)
				w.shop[g] = to
				if !slices.Contains(w.wasIn[g], to) {
					w.wasIn[g] = append(w.wasIn[g], to)
				}
			case 0:
				h.addProduct(w.shops[intn(2)], fmt.Sprintf("p%d", step), int64(step))
			case 1:
				h.exec("INSERT INTO shop.notices VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET text = excluded.text", intn(5), fmt.Sprintf("notice %d", step))
			default:
				h.exec("INSERT INTO shop.drawers VALUES ($1, $2, $3)", uuid.New(), g.id, step)
			}
		}
		w.noteHeld(t)
		if intn(4) == 0 {
			time.Sleep(time.Duration(intn(20)) * time.Millisecond) // let some traffic through
		}
	}
	for _, g := range w.regs {
		g.faults.set(nil, 0, 0, 0, 0)
		if !g.online.Load() {
			g.plug()
		}
	}
	settleAll(t, w.regs...)
	eventuallyWithin(t, 40*time.Second, "every register holding what its shop should", func() (bool, string) {
		for _, g := range w.regs {
			if ok, why := w.settled(g); !ok {
				g.r.Nudge()
				return false, why
			}
		}
		return true, ""
	})
	for _, g := range w.regs {
		w.checkSeen(t, g)
		w.checkShelves(t, g)
		t.Logf("register %v holds %d items (%d kept retired, %d on a shelf), %d pictures, %d codes, %d sales",
			g.id, g.count("SELECT count(*) FROM items"), g.count("SELECT count(*) FROM items WHERE discontinued <> 0"),
			g.count("SELECT count(*) FROM items WHERE shelf IS NOT NULL"), g.count("SELECT count(*) FROM pictures"),
			g.count("SELECT count(*) FROM codes"), g.count("SELECT count(*) FROM sales"))
	}
	if n := h.count(eng("SELECT count(*) FROM public.sync_rejected")); n != 0 {
		t.Errorf("the head office lists %d rejected rows: %v", n, h.should(eng("SELECT side || ' ' || tbl || ': ' || reason FROM public.sync_rejected")))
	}
}

// heldQueries are, per table, what a shop ($1) is meant to hold: the key
// (as the register writes it) and the row's checked columns.
var heldQueries = map[string]string{
	"items": `SELECT i.id::text, i.id::text || ':' || i.name FROM shop.items i JOIN shop.items_shown v ON v.id = i.id
		WHERE NOT i.discontinued AND i.shop_id = $1`,
	"pictures": `SELECT p.id::text, p.id::text || ':' || p.item_id || ':' || p.name FROM shop.pictures p
		JOIN shop.items i ON i.id = p.item_id JOIN shop.items_shown v ON v.id = i.id
		WHERE NOT i.discontinued AND i.shop_id = $1`,
	"codes": `SELECT c.code, c.code || ':' || c.picture_id FROM shop.codes c JOIN shop.pictures p ON p.id = c.picture_id
		JOIN shop.items i ON i.id = p.item_id JOIN shop.items_shown v ON v.id = i.id
		WHERE NOT i.discontinued AND i.shop_id = $1`,
}

// heldColumns are the same columns as a register holds them.
var heldColumns = map[string]string{
	"items":    "id || ':' || name",
	"pictures": "id || ':' || item_id || ':' || name",
	"codes":    "code || ':' || picture_id",
}

// noteHeld records the shops each row may have been sent to so far.
func (w *routeWorld) noteHeld(t *testing.T) {
	t.Helper()
	may := func(table string, key magicsync.Key, shop uuid.UUID) {
		if w.mayHold[table] == nil {
			w.mayHold[table] = map[magicsync.Key]map[uuid.UUID]bool{}
		}
		if w.mayHold[table][key] == nil {
			w.mayHold[table][key] = map[uuid.UUID]bool{}
		}
		w.mayHold[table][key][shop] = true
	}
	for _, shop := range w.shops {
		for _, r := range w.rowsOf(t, heldQueries["items"], shop) {
			may("items", w.keyOf(t, Item{ID: uuid.MustParse(r[0])}), shop)
		}
	}
	for _, r := range w.rowsOf(t, "SELECT id::text, item_id::text FROM shop.pictures WHERE $1::uuid IS NOT NULL", uuid.New()) {
		for shop := range w.mayHold["items"][w.keyOf(t, Item{ID: uuid.MustParse(r[1])})] {
			may("pictures", w.keyOf(t, Picture{ID: uuid.MustParse(r[0])}), shop)
		}
	}
	for _, r := range w.rowsOf(t, "SELECT code, picture_id::text FROM shop.codes WHERE picture_id IS NOT NULL AND $1::uuid IS NOT NULL", uuid.New()) {
		for shop := range w.mayHold["pictures"][w.keyOf(t, Picture{ID: uuid.MustParse(r[1])})] {
			may("codes", w.keyOf(t, Code{Code: r[0]}), shop)
		}
	}
}

// keyOf is the engine's key of a row.
func (w *routeWorld) keyOf(t *testing.T, row magicsync.Declarer) magicsync.Key {
	t.Helper()
	k, err := magicsync.KeyOf(w.codecs, row)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// rowsOf runs a query of two text columns for a shop.
func (w *routeWorld) rowsOf(t *testing.T, q string, shop uuid.UUID) [][2]string {
	t.Helper()
	rows, err := w.h.pool.Query(context.Background(), q, shop)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out [][2]string
	for rows.Next() {
		var r [2]string
		if err := rows.Scan(&r[0], &r[1]); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// settled reports whether a register holds exactly what its shop should,
// and keeps marked retired exactly the items its sales point at that it
// should not hold.
func (w *routeWorld) settled(g *register) (bool, string) {
	shop := w.shop[g]
	for _, table := range []string{"items", "pictures", "codes"} {
		var want []string
		for _, r := range w.rowsOfQuiet(heldQueries[table], shop) {
			want = append(want, r[1])
		}
		slices.Sort(want)
		cond := ""
		if table == "items" {
			cond = " WHERE discontinued = 0"
		}
		have := g.holding(table+cond, heldColumns[table])
		if !slices.Equal(have, want) {
			return false, fmt.Sprintf("register %v %s: %v; want %v", g.id, table, have, want)
		}
	}
	// Kept retired: only items a sale points at.
	if n := g.count("SELECT count(*) FROM items WHERE discontinued <> 0 AND NOT EXISTS (SELECT 1 FROM sales s WHERE s.item_id = items.id)"); n != 0 {
		return false, fmt.Sprintf("register %v keeps %d retired items no sale points at", g.id, n)
	}
	if n := g.count("SELECT count(*) FROM sync_pending"); n != 0 {
		return false, fmt.Sprintf("register %v has %d rows unconfirmed", g.id, n)
	}
	sales := w.h.should("SELECT id::text || ':' || item_id FROM shop.sales WHERE register_id = $1", g.id)
	if have := g.holding("sales", "id || ':' || item_id"); !slices.Equal(have, sales) {
		return false, fmt.Sprintf("register %v sales %v; the head office filed %v", g.id, have, sales)
	}
	return true, ""
}

// rowsOfQuiet is rowsOf for a condition polled from eventually.
func (w *routeWorld) rowsOfQuiet(q string, shop uuid.UUID) [][2]string {
	rows, err := w.h.pool.Query(context.Background(), q, shop)
	if err != nil {
		panic(err)
	}
	defer rows.Close()
	var out [][2]string
	for rows.Next() {
		var r [2]string
		if err := rows.Scan(&r[0], &r[1]); err != nil {
			panic(err)
		}
		out = append(out, r)
	}
	return out
}

// checkSeen checks that no message brought the register a row its shop
// was never meant to hold.
func (w *routeWorld) checkSeen(t *testing.T, g *register) {
	t.Helper()
	g.seenMu.Lock()
	defer g.seenMu.Unlock()
	for _, table := range []string{"items", "pictures", "codes"} {
		for k := range g.seen[table] {
			if !slices.ContainsFunc(w.wasIn[g], func(shop uuid.UUID) bool { return w.mayHold[table][k][shop] }) {
				t.Errorf("register %v was sent %s %v, which its shop was never meant to hold", g.id, table, k)
			}
		}
	}
}

// checkShelves checks that every shelf a register holds is one it wrote
// for that item: the head office never overwrites it.
func (w *routeWorld) checkShelves(t *testing.T, g *register) {
	t.Helper()
	for _, r := range g.holding("items WHERE shelf IS NOT NULL", "id || '|' || shelf") {
		id, shelf, _ := strings.Cut(r, "|")
		if !slices.Contains(w.shelves[g][uuid.MustParse(id)], shelf) {
			t.Errorf("register %v holds item %s on %q, which it never wrote", g.id, id, shelf)
		}
	}
}
