package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// Setting is a register's setting, which the head office may wish other
// values (IfUnchanged).
type Setting = shoptest.Setting

// printer is the registers' handler of their settings in these tests: it
// carries a wish out while it is on, and has it wait while it is off.
type printer struct {
	off     atomic.Bool
	offered atomic.Int64
}

func (p *printer) CarryOut(_ context.Context, w replica.Wish[Setting]) replica.Outcome {
	p.offered.Add(1)
	if p.off.Load() {
		return replica.Later("the printer is off")
	}
	return replica.Applied()
}

// newSettingsOffice is a head office syncing the shop and the registers'
// settings, whose registers carry wishes out through p.
func newSettingsOffice(t *testing.T, p *printer) *headOffice {
	t.Helper()
	h := newHeadOfficeOf(t, shoptest.Codecs(t, Product{}, Notice{}, Drawer{}, Receipt{}, Setting{}))
	h.tune = func(s *replica.Settings) {
		s.Wishes = replica.Wishes{replica.Handle[Setting](p)}
		s.WishesEvery = time.Hour // offered again only when a test says so
	}
	return h
}

// setLocally writes a register's setting as its user would.
func (g *register) setLocally(name, value string, at time.Time) {
	g.h.t.Helper()
	if _, err := g.db.Exec(`INSERT INTO settings (register_id, name, value, changed_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (register_id, name) DO UPDATE SET value = excluded.value, changed_at = excluded.changed_at`,
		g.id, name, value, at.UTC()); err != nil {
		g.h.t.Fatal(err)
	}
	g.r.Nudge()
}

// localSetting reads a register's setting.
func (g *register) localSetting(name string) string {
	g.h.t.Helper()
	var v string
	if err := g.db.QueryRow(`SELECT value FROM settings WHERE register_id = ? AND name = ?`, g.id, name).Scan(&v); err != nil {
		return "(none: " + err.Error() + ")"
	}
	return v
}

// filedSetting reads a register's setting as the head office records it.
func (h *headOffice) filedSetting(register uuid.UUID, name string) (Setting, bool) {
	h.t.Helper()
	var s Setting
	err := h.pool.QueryRow(context.Background(), `SELECT register_id, name, value, changed_at FROM shop.settings WHERE register_id = $1 AND name = $2`,
		register, name).Scan(&s.RegisterID, &s.Name, &s.Value, &s.ChangedAt)
	return s, err == nil
}

// desire wishes a setting in a transaction of its own.
func (h *headOffice) desire(row Setting, note string) server.Wished {
	h.t.Helper()
	ctx := context.Background()
	tx, err := h.s.Begin(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	w, err := server.Desire(ctx, h.s, tx, row, note)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		h.t.Fatal(err)
	}
	return w
}

// wishOf reads where the wish of a setting stands at the head office.
func (h *headOffice) wishOf(row Setting) (server.Wish[Setting], bool) {
	h.t.Helper()
	tc, err := codec.TableOf[Setting](h.codecs)
	if err != nil {
		h.t.Fatal(err)
	}
	key, err := tc.KeyOf(row)
	if err != nil {
		h.t.Fatal(err)
	}
	ws, err := server.WishesOf[Setting](context.Background(), h.s, h.pool, []magicsync.Key{magicsync.Key(key)})
	if err != nil {
		h.t.Fatal(err)
	}
	if len(ws) == 0 {
		return server.Wish[Setting]{}, false
	}
	return ws[0], true
}

// wishWait bounds the waits of these tests: a wish's way down, its
// offer, and its answer's way up, each a message, under the race detector
// on a loaded machine.
const wishWait = 40 * time.Second

// waitForWish waits until the wish of row stands in state, with a reason
// holding reason.
func (h *headOffice) waitForWish(row Setting, number uint64, state server.WishState, reason string) {
	h.t.Helper()
	eventuallyWithin(h.t, wishWait, fmt.Sprintf("wish %d of %s standing %v", number, row.Name, state), func() (bool, string) {
		w, ok := h.wishOf(row)
		if !ok {
			return false, "no wish"
		}
		return w.Number == number && w.State == state && strings.Contains(w.Reason, reason), fmt.Sprintf("wish %d %v %q", w.Number, w.State, w.Reason)
	})
}

// filedOnce waits until the head office records a register's setting
// with value, and returns it as the head office shows it.
func (h *headOffice) filedOnce(g *register, name, value string) Setting {
	h.t.Helper()
	var got Setting
	eventuallyWithin(h.t, wishWait, fmt.Sprintf("%s = %q filed", name, value), func() (bool, string) {
		s, ok := h.filedSetting(g.id, name)
		got = s
		return ok && s.Value == value, fmt.Sprintf("%+v (%v)", s, ok)
	})
	return got
}

// A wish travels to the register that owns the setting, is carried out
// there through its handler — the value written, its version moved on —
// and the head office shows it applied and files the value. A handler
// that answers Later has the wish wait, shown with its reason, until
// OfferWishes offers it again.
func TestAWishIsCarriedOutOnTheRegisterAndShownApplied(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		p := &printer{}
		h := newSettingsOffice(t, p)
		g := h.addRegister(h.addShop(), d)
		g.setLocally("footer", "Thank you", time.Now().Add(-time.Hour))
		seen := h.filedOnce(g, "footer", "Thank you")

		wanted := seen
		wanted.Value = "Merci"
		w := h.desire(wanted, "ann at the office")
		h.waitForWish(wanted, w.Number, server.WishApplied, "")
		filed := h.filedOnce(g, "footer", "Merci")
		if !filed.ChangedAt.After(seen.ChangedAt) {
			t.Errorf("the setting's version did not move on: %v, was %v", filed.ChangedAt, seen.ChangedAt)
		}
		if v := g.localSetting("footer"); v != "Merci" {
			t.Errorf("the register holds %q", v)
		}

		// The printer is off: the wish waits, and says why.
		p.off.Store(true)
		wanted = filed
		wanted.Value = "Bonjour"
		w = h.desire(wanted, "")
		h.waitForWish(wanted, w.Number, server.WishWaiting, "the printer is off")
		if v := g.localSetting("footer"); v != "Merci" {
			t.Errorf("a wish that waits changed the register's value to %q", v)
		}
		p.off.Store(false)
		g.r.OfferWishes()
		h.waitForWish(wanted, w.Number, server.WishApplied, "")
		h.filedOnce(g, "footer", "Bonjour")
	})
}

// With IfUnchanged, a wish based on a version the register changed since
// is superseded, not carried out: the register's value stands, on both
// sides.
func TestAWishAfterALocalEditIsSupersededAndTheLocalValueStands(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		p := &printer{}
		h := newSettingsOffice(t, p)
		g := h.addRegister(h.addShop(), d)
		g.setLocally("footer", "Thank you", time.Now().Add(-time.Hour))
		seen := h.filedOnce(g, "footer", "Thank you")

		// A technician edits it on the register before the wish arrives.
		g.unplug()
		g.setLocally("footer", "set by the technician", time.Now())
		wanted := seen
		wanted.Value = "from the office"
		w := h.desire(wanted, "")
		g.plug()
		h.waitForWish(wanted, w.Number, server.WishSuperseded, "")
		h.filedOnce(g, "footer", "set by the technician")
		if v := g.localSetting("footer"); v != "set by the technician" {
			t.Errorf("the register holds %q", v)
		}
		if n := p.offered.Load(); n != 0 {
			t.Errorf("the handler was offered a superseded wish %d times", n)
		}
	})
}

// A write the database refuses (a CHECK of the host's) answers the wish
// refused, with the database's reason; the register's value stands.
func TestAWishTheDatabaseRefusesIsRefusedWithItsReason(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		h := newSettingsOffice(t, &printer{})
		g := h.addRegister(h.addShop(), d)
		g.setLocally("footer", "Thank you", time.Now().Add(-time.Hour))
		seen := h.filedOnce(g, "footer", "Thank you")
		wanted := seen
		wanted.Value = strings.Repeat("long ", 10)
		w := h.desire(wanted, "")
		h.waitForWish(wanted, w.Number, server.WishRefused, "CHECK")
		if v := g.localSetting("footer"); v != "Thank you" {
			t.Errorf("the register holds %q", v)
		}
		if s, _ := h.filedSetting(g.id, "footer"); s.Value != "Thank you" {
			t.Errorf("the head office records %q", s.Value)
		}
	})
}
