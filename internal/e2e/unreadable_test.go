package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/server"
)

// A receipt written into a register's file behind the engine's back, with
// text in its integer column, does not block the register's lane: the
// receipts after it are filed, the head office shows the row as one the
// register could not take, naming the column and the value, and once the
// till mends the row it is filed and the head office forgets the report.
func TestUnreadableReceiptIsShownAtTheHeadOfficeAndFiledOnceMended(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		h := newHeadOffice(t)
		g := h.addRegister(h.addShop(), d)
		if _, err := g.db.Exec("INSERT INTO receipts (register_id, id, total_cents, changed_at) VALUES (?, 'ffffffff-0000-4000-8000-000000000001', 'twelve', ?)", g.id, at); err != nil {
			t.Fatal(err)
		}
		g.ring(100)
		g.ring(200)
		reported := func() (bool, string) {
			st, ok := findStatus(t, h, g.id)
			if !ok {
				return false, "the register is not adopted yet"
			}
			filed := h.count("SELECT count(*) FROM shop.receipts WHERE register_id = $1", g.id)
			for _, rj := range st.Rejected {
				if rj.Side == "replica" && rj.Table == "receipts" && strings.Contains(rj.Reason, `"total_cents"`) && strings.Contains(rj.Reason, "twelve") {
					return filed == 2, fmt.Sprintf("%d receipts filed", filed)
				}
			}
			return false, fmt.Sprintf("rejected %v, %d receipts filed", st.Rejected, filed)
		}
		eventually(t, "the good receipts filed and the bad one shown at the head office", reported)
		if _, err := g.db.Exec("UPDATE receipts SET total_cents = 1200 WHERE id = 'ffffffff-0000-4000-8000-000000000001'"); err != nil {
			t.Fatal(err)
		}
		g.r.Nudge()
		eventually(t, "the mended receipt filed and its report forgotten", func() (bool, string) {
			st, _ := findStatus(t, h, g.id)
			filed := h.count("SELECT count(*) FROM shop.receipts WHERE register_id = $1", g.id)
			return filed == 3 && len(replicaSide(st.Rejected)) == 0, fmt.Sprintf("%d filed, rejected %v", filed, st.Rejected)
		})
		settleAll(t, g)
	})
}

func replicaSide(rs []server.RejectedRow) []server.RejectedRow {
	var out []server.RejectedRow
	for _, r := range rs {
		if r.Side == "replica" {
			out = append(out, r)
		}
	}
	return out
}

// findStatus is the head office's status of a replica, if it has one yet.
func findStatus(t testing.TB, h *headOffice, id uuid.UUID) (server.ReplicaStatus, bool) {
	t.Helper()
	all, err := h.s.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range all {
		if st.ID == id {
			return st, true
		}
	}
	return server.ReplicaStatus{}, false
}

// A receipt whose key does not read, deleted on the register, is
// forgotten on both sides: the head office drops its report,
// and the register forgets the clearing it sent once the head office
// confirmed it. A key that never read has no delete to send: the upload
// carries the clearing alone, and is confirmed all the same — else the
// register would send it again and again.
func TestAnUnreadableReceiptDeletedIsForgottenOnBothSides(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		h := newHeadOffice(t)
		g := h.addRegister(h.addShop(), d)
		if _, err := g.db.Exec("INSERT INTO receipts (register_id, id, total_cents, changed_at) VALUES (?, 'receipt twelve', 12, ?)", g.id, at); err != nil {
			t.Fatal(err)
		}
		g.r.Nudge()
		eventually(t, "the unreadable receipt shown at the head office", func() (bool, string) {
			st, _ := findStatus(t, h, g.id)
			return len(replicaSide(st.Rejected)) == 1, fmt.Sprintf("rejected %v", st.Rejected)
		})
		if _, err := g.db.Exec("DELETE FROM receipts WHERE id = 'receipt twelve'"); err != nil {
			t.Fatal(err)
		}
		g.r.Nudge()
		eventually(t, "the report forgotten at the head office and on the register", func() (bool, string) {
			st, _ := findStatus(t, h, g.id)
			left := g.count("SELECT count(*) FROM sync_rejected")
			return len(replicaSide(st.Rejected)) == 0 && left == 0, fmt.Sprintf("head office rejected %v; the register keeps %d reports", st.Rejected, left)
		})
	})
}
