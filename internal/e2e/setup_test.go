package e2e

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
)

// Seed 002: while the replica does not know its id, "its database refuses
// none of your writes: you are setting it up. … What you wrote to the
// server's tables is not noted, and the provisioning sets it straight:
// the rows the server sends overwrite the ones of the same key, and the
// ones it does not send go." A register set up with placeholders of every
// kind of catalog — a row of a key the server has, with other values; a
// row of a key it does not have; a row the server has but routes to
// another shop — holds exactly what the head office routes to it once its
// first provisioning applied, the head office's rows untouched; and its
// own row written during setup is filed.
func TestCatalogRowsWrittenDuringSetupAreSetStraightByTheFirstProvisioning(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		h := newHeadOffice(t)
		shop, other := h.addShop(), h.addShop()
		bread := h.addProduct(shop, "bread", 100)
		wine := h.addProduct(other, "wine", 900)
		id := uuid.New()
		h.exec("INSERT INTO shop.registers (id, shop_id) VALUES ($1, $2)", id, shop)
		h.exec("INSERT INTO shop.notices VALUES (1, 'open at 9')")
		drawer := uuid.New()
		h.exec("INSERT INTO shop.drawers VALUES ($1, $2, 5000)", drawer, id)

		who := &learnt{}
		receipt := uuid.New()
		g := h.attachWith(id, d, registerOptions{identity: who, beforeRun: func(db *sql.DB, _ *replica.Replica) {
			for _, w := range []struct {
				sql  string
				args []any
			}{
				// The server's rows, as the host guessed them.
				{"INSERT INTO products VALUES (?, ?, 'bread (placeholder)', 1, ?)", []any{bread, shop, at}},
				{"INSERT INTO products VALUES (?, ?, 'stray', 5, ?)", []any{uuid.New(), shop, at}},
				{"INSERT INTO products VALUES (?, ?, 'wine', 900, ?)", []any{wine, other, at}},
				{"INSERT INTO notices VALUES (1, 'placeholder'), (2, 'stray notice')", nil},
				{"INSERT INTO drawers VALUES (?, ?, 1), (?, ?, 2)", []any{drawer, id, uuid.New(), id}},
				// A row of its own.
				{"INSERT INTO receipts (register_id, id, total_cents, changed_at) VALUES (?, ?, 250, ?)", []any{id, receipt, at}},
			} {
				if _, err := db.Exec(w.sql, w.args...); err != nil {
					t.Fatalf("during setup, the host's %q was refused: %v", w.sql, err)
				}
			}
			who.learn(id)
		}})
		settleAll(t, g)

		var name string
		if err := g.db.QueryRow("SELECT name FROM products WHERE id = ?", bread).Scan(&name); err != nil || name != "bread" {
			t.Errorf("the register's bread is named %q (%v); want the head office's name", name, err)
		}
		if n := h.count("SELECT count(*) FROM shop.products"); n != 2 {
			t.Errorf("the head office holds %d products; want its 2, none of the register's placeholders", n)
		}
		if n := h.count("SELECT count(*) FROM shop.products WHERE id = $1 AND name = 'bread' AND price_cents = 100", bread); n != 1 {
			t.Error("the head office's bread changed")
		}
		if n := h.count("SELECT count(*) FROM shop.notices WHERE text = 'open at 9'"); n != 1 || h.count("SELECT count(*) FROM shop.notices") != 1 {
			t.Error("the head office's notices changed")
		}
		if n := h.count("SELECT count(*) FROM shop.receipts WHERE register_id = $1 AND id = $2 AND total_cents = 250", id, receipt); n != 1 {
			t.Error("the receipt written during setup was not filed")
		}
		// From then on, the server's tables are the server's.
		if _, err := g.db.Exec("UPDATE products SET price_cents = 1"); err == nil || !strings.Contains(err.Error(), "products is the server's table") {
			t.Errorf("once set up, the host's write of products = %v; want it refused", err)
		}
		if st, err := g.r.Status(context.Background()); err != nil || len(st.Rejected) != 0 || st.Backlog != 0 {
			t.Errorf("the register's status: %+v, %v; want nothing refused nor set aside", st, err)
		}
	})
}
