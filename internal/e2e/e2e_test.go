package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/server"
)

func statusOf(t testing.TB, h *headOffice, id uuid.UUID) server.ReplicaStatus {
	t.Helper()
	all, err := h.s.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range all {
		if st.ID == id {
			return st
		}
	}
	t.Fatalf("no status for replica %v", id)
	return server.ReplicaStatus{}
}

func tableStatus(st server.ReplicaStatus, table string) server.TableStatus {
	for _, ts := range st.Tables {
		if ts.Table == table {
			return ts
		}
	}
	return server.TableStatus{Table: table}
}

// The first edition's README: a head office and two registers; register 2
// offline while 7 products exist and 2 receipts are rung up on it; back
// online, both converge, every receipt filed once.
func TestReadmeScenarioOfflineRegisterConverges(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		h := newHeadOffice(t)
		shop := h.addShop()
		for i := range 5 {
			h.addProduct(shop, fmt.Sprintf("product %d", i), int64(100*(i+1)))
		}
		r1, r2 := h.addRegister(shop, d), h.addRegister(shop, d)
		settleAll(t, r1, r2)
		r2.unplug()
		h.addProduct(shop, "product 6", 600)
		h.addProduct(shop, "product 7", 700)
		r1.ring(1000)
		r2.ring(2000)
		r2.ring(3000)
		settleAll(t, r1)
		eventually(t, "the head office seeing register 2 behind", func() (bool, string) {
			p2 := tableStatus(statusOf(t, h, r2.id), "products")
			return p2.Holds == 5 && p2.Should == 7, fmt.Sprintf("register 2 holds %d of %d products", p2.Holds, p2.Should)
		})
		// What a register holds, the head office knows from its last
		// report, which comes with an upload after the messages it applied:
		// register 1 settled is not yet register 1 reported.
		eventually(t, "the head office seeing register 1 hold every product", func() (bool, string) {
			p1 := tableStatus(statusOf(t, h, r1.id), "products")
			return p1.Holds == 7 && p1.Should == 7, fmt.Sprintf("register 1 holds %d of %d products; want 7 of 7", p1.Holds, p1.Should)
		})
		st, err := r2.r.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// On their way: unsent, or in a send the unplugged network fails.
		if n := st.Lanes[0].Unsent + st.Lanes[0].Unconfirmed; n != 2 {
			t.Fatalf("register 2 has %d receipts on their way; want 2", n)
		}
		r2.plug()
		settleAll(t, r1, r2)
		if n := h.count("SELECT count(*) FROM shop.receipts"); n != 3 {
			t.Fatalf("%d receipts filed; want 3, each once", n)
		}
		eventually(t, "the head office seeing register 2 caught up", func() (bool, string) {
			p2 := tableStatus(statusOf(t, h, r2.id), "products")
			return p2.Holds == 7 && p2.Should == 7, fmt.Sprintf("register 2 holds %d of %d", p2.Holds, p2.Should)
		})
	})
}

func TestRowsReachExactlyTheReplicasTheirRoutesName(t *testing.T) {
	t.Parallel()
	h := newHeadOffice(t)
	shopA, shopB := h.addShop(), h.addShop()
	a1, a2, b1 := h.addRegister(shopA, sqlitetest.Modernc()), h.addRegister(shopA, sqlitetest.Mattn()), h.addRegister(shopB, sqlitetest.Modernc())
	productA := h.addProduct(shopA, "apples", 100)
	productB := h.addProduct(shopB, "bread", 200)
	h.exec("INSERT INTO shop.notices VALUES (1, 'closed on Sunday')")
	drawerA1 := uuid.New()
	h.exec("INSERT INTO shop.drawers VALUES ($1, $2, 5000)", drawerA1, a1.id)
	settleAll(t, a1, a2, b1)
	if b1.count("SELECT count(*) FROM products WHERE id = ?", productA) != 0 || a1.count("SELECT count(*) FROM products WHERE id = ?", productB) != 0 {
		t.Fatal("a product reached a register of another shop")
	}
	if n := a2.count("SELECT count(*) FROM notices") + b1.count("SELECT count(*) FROM notices"); n != 2 {
		t.Fatal("the broadcast notice did not reach every register")
	}
	drawerKey := magicsync.Key(codec.KeyOfValues(wire.UUIDValue(drawerA1)))
	for _, g := range []*register{a2, b1} {
		if g.sawKey("drawers", drawerKey) {
			t.Fatalf("register %v was sent a drawer assigned to another", g.id)
		}
	}
	if b1.sawKey("products", magicsync.Key(codec.KeyOfValues(wire.UUIDValue(productA)))) {
		t.Fatal("a register was sent a product of another shop")
	}
	if !a1.sawKey("drawers", drawerKey) {
		t.Fatal("the drawer's message to its register was not seen (the check above would prove nothing)")
	}
	// An update moving a drawer to another register moves it.
	h.exec("UPDATE shop.drawers SET register_id = $1 WHERE id = $2", a2.id, drawerA1)
	settleAll(t, a1, a2, b1)
	if a1.count("SELECT count(*) FROM drawers") != 0 || a2.count("SELECT count(*) FROM drawers") != 1 {
		t.Fatal("the reassigned drawer did not move")
	}
	// Deletes propagate.
	h.exec("DELETE FROM shop.notices")
	h.exec("DELETE FROM shop.products WHERE id = $1", productA)
	settleAll(t, a1, a2, b1)
	// A register moved to another shop gains its rows and loses the old,
	// while its old shop, still with products, keeps them on the others.
	productA2 := h.addProduct(shopA, "apricots", 300)
	settleAll(t, a1, a2, b1)
	if a1.count("SELECT count(*) FROM products WHERE id = ?", productA2) != 1 {
		t.Fatal("the register did not gain its shop's new product (the check below would prove nothing)")
	}
	h.exec("UPDATE shop.registers SET shop_id = $1 WHERE id = $2", shopB, a1.id)
	settleAll(t, a1, a2, b1)
	if a1.count("SELECT count(*) FROM products WHERE id = ?", productB) != 1 {
		t.Fatal("the moved register did not gain its new shop's products")
	}
	if a1.count("SELECT count(*) FROM products WHERE id = ?", productA2) != 0 {
		t.Fatal("the moved register did not lose its old shop's products")
	}
	if a2.count("SELECT count(*) FROM products WHERE id = ?", productA2) != 1 {
		t.Fatal("the register left in the old shop lost its products")
	}
}

// A transaction that commits after a later-started one is never skipped.
func TestLateCommittingTransactionIsNotSkipped(t *testing.T) {
	t.Parallel()
	h := newHeadOffice(t)
	shop := h.addShop()
	g := h.addRegister(shop, sqlitetest.Modernc())
	ctx := context.Background()
	early, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Rollback(ctx)
	if _, err := early.Exec(ctx, "INSERT INTO shop.products VALUES ($1, $2, 'early', 1, $3)", uuid.New(), shop, at); err != nil {
		t.Fatal(err)
	}
	h.addProduct(shop, "late", 2) // starts later, commits first
	eventually(t, "the later transaction's product arriving", func() (bool, string) {
		return g.count("SELECT count(*) FROM products") == 1, "not yet"
	})
	if err := early.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	settleAll(t, g)
	if n := g.count("SELECT count(*) FROM products"); n != 2 {
		t.Fatalf("%d products; the early transaction's was skipped", n)
	}
}

func TestFilingNewerWinsAndOtherReplicasRowsAreRefused(t *testing.T) {
	t.Parallel()
	h := newHeadOffice(t)
	shop := h.addShop()
	g := h.addRegister(shop, sqlitetest.Modernc())
	other := h.addRegister(shop, sqlitetest.Modernc())
	id := g.ring(100)
	settleAll(t, g, other)
	if _, err := g.db.Exec("UPDATE receipts SET total_cents = 150, changed_at = ? WHERE id = ?", at.Add(time.Minute), id); err != nil {
		t.Fatal(err)
	}
	g.r.Nudge()
	settleAll(t, g)
	if n := h.count("SELECT total_cents FROM shop.receipts WHERE id = $1", id); n != 150 {
		t.Fatalf("the newer version was not filed: %d", n)
	}
	// An older version is a no-op.
	if _, err := g.db.Exec("UPDATE receipts SET total_cents = 120, changed_at = ? WHERE id = ?", at, id); err != nil {
		t.Fatal(err)
	}
	g.r.Nudge()
	eventually(t, "the older version being answered", func() (bool, string) {
		return g.count("SELECT count(*) FROM sync_pending") == 0, "unconfirmed"
	})
	if n := h.count("SELECT total_cents FROM shop.receipts WHERE id = $1", id); n != 150 {
		t.Fatalf("an older version overwrote a newer one: %d", n)
	}
	// A register writing another's receipt is refused; nothing is written.
	forged := uuid.New()
	if _, err := g.db.Exec("INSERT INTO receipts (register_id, id, total_cents, changed_at) VALUES (?, ?, 999, ?)", other.id, forged, at); err != nil {
		t.Fatal(err)
	}
	g.r.Nudge()
	eventually(t, "the forged receipt being refused", func() (bool, string) {
		st, err := g.r.Status(context.Background())
		return err == nil && st.Backlog == 1, fmt.Sprintf("%+v", st)
	})
	if n := h.count("SELECT count(*) FROM shop.receipts WHERE id = $1", forged); n != 0 {
		t.Fatal("a register filed another register's receipt")
	}
	if rj := statusOf(t, h, g.id).Rejected; len(rj) == 0 {
		t.Fatal("the head office does not show the refused row")
	}
}

func TestManyRegistersUnderLossAndDuplicationSettle(t *testing.T) {
	t.Parallel()
	h := newHeadOffice(t)
	shop := h.addShop()
	var regs []*register
	for i := range 3 {
		g := h.addRegister(shop, sqlitetest.Drivers()[i%2])
		regs = append(regs, g)
	}
	var wg sync.WaitGroup
	for i, g := range regs {
		wg.Go(func() {
			for j := range 10 {
				g.ring(int64(100*i + j))
			}
		})
	}
	for j := range 10 {
		h.addProduct(shop, fmt.Sprintf("p%d", j), int64(j))
	}
	wg.Wait()
	settleAll(t, regs...)
	if n := h.count("SELECT count(*) FROM shop.receipts"); n != 30 {
		t.Fatalf("%d receipts filed; want 30", n)
	}
}
