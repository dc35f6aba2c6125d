package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// A register's own row whose text key holds a NUL — SQLite takes it,
// PostgreSQL does not — goes up, is refused as a row with its reason, and
// waits in the register's backlog, shown at the head office; the rows
// written before and after it are filed. Nothing is dropped unseen.
func TestASettingWhoseKeyHoldsANULIsRefusedAndTheLaneGoesOn(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		h := newHeadOfficeOf(t, shoptest.Codecs(t, Product{}, Notice{}, Drawer{}, Receipt{}, Setting{}))
		h.tune = func(s *replica.Settings) {
			s.Wishes = replica.Wishes{replica.Handle[Setting](replica.Direct[Setting]{})}
		}
		g := h.addRegister(h.addShop(), d)
		g.setLocally("header", "Welcome", time.Now())
		g.setLocally("foot\x00er", "Thank you", time.Now())
		var stored int
		if err := g.db.QueryRow("SELECT length(CAST(name AS BLOB)) FROM settings WHERE value = 'Thank you'").Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if stored != len("foot\x00er") {
			t.Fatalf("the register stores the name in %d bytes, not %d: the NUL did not reach SQLite", stored, len("foot\x00er"))
		}
		g.setLocally("trailer", "Goodbye", time.Now())
		eventually(t, "the good settings filed and the bad one refused with its reason", func() (bool, string) {
			filed := h.count("SELECT count(*) FROM shop.settings WHERE register_id = $1 AND name IN ('header', 'trailer')", g.id)
			badFiled := h.count("SELECT count(*) FROM shop.settings WHERE register_id = $1 AND name LIKE 'foot%'", g.id)
			st, err := g.r.Status(context.Background())
			if err != nil {
				return false, err.Error()
			}
			shown := false
			if hs, ok := findStatus(t, h, g.id); ok {
				for _, rj := range hs.Rejected {
					shown = shown || (rj.Side == server.SideServer && rj.Table == "settings" && strings.Contains(rj.Reason, "NUL") && strings.Contains(rj.Reason, `"name"`))
				}
			}
			unsent := 0
			for _, l := range st.Lanes {
				unsent += l.Unsent + l.Unconfirmed
			}
			return filed == 2 && badFiled == 0 && st.Backlog == 1 && unsent == 0 && shown,
				fmt.Sprintf("%d good settings filed, the bad one %d times, backlog %d, unsent or unconfirmed %d, shown at the head office %v", filed, badFiled, st.Backlog, unsent, shown)
		})
	})
}
