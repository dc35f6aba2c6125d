package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// Text that comes from outside the engine — a handler's reason, a panic's
// message, a row's text column — holds whatever hardware or a user put
// there: bytes that are not UTF-8, a NUL that PostgreSQL refuses, a
// megabyte. None of it may stop a register's lane: the wish's answer
// reaches the head office, with its reason made safe, and the receipts
// rung after it are filed.

// badTexts are reasons a handler may give.
var badTexts = []struct{ name, text string }{
	{"not UTF-8", "printer status \xff\xfe off"},
	{"NUL", "printer\x00off"},
	{"1 MB", "printer " + strings.Repeat("off ", 1<<18)},
}

// reasonHandler answers every wish with its answer.
type reasonHandler struct {
	answer func() replica.Outcome
}

func (h reasonHandler) CarryOut(context.Context, replica.Wish[Setting]) replica.Outcome {
	return h.answer()
}

// A wish answered Later or Refused with a reason that is not UTF-8, holds
// a NUL or runs to a megabyte — or whose handler panics with such a
// message — reaches the head office with the reason made safe, and the
// receipts rung after the answer are filed: the register's main lane goes
// on.
func TestAReasonThatIsNotSafeTextDoesNotStopTheLane(t *testing.T) {
	t.Parallel()
	type answering struct {
		name   string
		state  server.WishState
		answer func(string) replica.Outcome
	}
	answers := []answering{
		{"Later", server.WishWaiting, replica.Later},
		{"Refused", server.WishRefused, replica.Refused},
		{"panic", server.WishWaiting, func(why string) replica.Outcome { panic(why) }},
	}
	for _, bad := range badTexts {
		for _, a := range answers {
			t.Run(a.name+" "+bad.name, func(t *testing.T) {
				t.Parallel()
				sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
					t.Parallel()
					h := newHeadOfficeOf(t, shoptest.Codecs(t, Product{}, Notice{}, Drawer{}, Receipt{}, Setting{}))
					h.tune = func(s *replica.Settings) {
						s.Wishes = replica.Wishes{replica.Handle[Setting](reasonHandler{func() replica.Outcome { return a.answer(bad.text) }})}
						s.WishesEvery = time.Hour
					}
					g := h.addRegister(h.addShop(), d)
					g.setLocally("footer", "Thank you", time.Now().Add(-time.Hour))
					wanted := h.filedOnce(g, "footer", "Thank you")
					wanted.Value = "Merci"
					w := h.desire(wanted, "")
					h.waitForWish(wanted, w.Number, a.state, "printer")
					got, _ := h.wishOf(wanted)
					if !utf8.ValidString(got.Reason) || strings.ContainsRune(got.Reason, 0) || len(got.Reason) > 4096 {
						t.Errorf("the head office shows the reason %.80q (%d bytes)", got.Reason, len(got.Reason))
					}
					receipt := g.ring(100)
					eventuallyWithin(t, wishWait, "the receipt rung after the answer filed", func() (bool, string) {
						n := h.count("SELECT count(*) FROM shop.receipts WHERE id = $1", receipt)
						return n == 1, fmt.Sprintf("%d filed", n)
					})
				})
			})
		}
	}
}

// A receipt whose note holds a NUL — SQLite takes it, PostgreSQL does not
// — is refused as a row, with its reason: it goes to the register's
// backlog and the head office shows it, while the receipts rung before and
// after it are filed.
func TestAReceiptWithANULInItsTextIsRefusedAndTheLaneGoesOn(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		h := newHeadOffice(t)
		g := h.addRegister(h.addShop(), d)
		before := g.ring(100)
		bad := uuid.New()
		if _, err := g.db.Exec("INSERT INTO receipts (register_id, id, total_cents, note, changed_at) VALUES (?, ?, 200, ?, ?)", g.id, bad, "paid\x00cash", at); err != nil {
			t.Fatal(err)
		}
		var stored int
		if err := g.db.QueryRow("SELECT length(CAST(note AS BLOB)) FROM receipts WHERE id = ?", bad).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if stored != len("paid\x00cash") {
			t.Fatalf("the register stores the note in %d bytes, not %d: the NUL did not reach SQLite", stored, len("paid\x00cash"))
		}
		g.r.Nudge()
		after := g.ring(300)
		eventually(t, "the good receipts filed and the bad one refused with its reason", func() (bool, string) {
			filed := h.count("SELECT count(*) FROM shop.receipts WHERE id = ANY($1)", []uuid.UUID{before, after})
			badFiled := h.count("SELECT count(*) FROM shop.receipts WHERE id = $1", bad)
			st, err := g.r.Status(context.Background())
			if err != nil {
				return false, err.Error()
			}
			shown := false
			if hs, ok := findStatus(t, h, g.id); ok {
				for _, rj := range hs.Rejected {
					shown = shown || (rj.Side == server.SideServer && rj.Table == "receipts" && strings.Contains(rj.Reason, "NUL") && strings.Contains(rj.Reason, `"note"`))
				}
			}
			return filed == 2 && badFiled == 0 && st.Backlog == 1 && shown,
				fmt.Sprintf("%d good receipts filed, the bad one %d times, backlog %d, shown at the head office %v", filed, badFiled, st.Backlog, shown)
		})
	})
}
