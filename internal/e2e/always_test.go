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
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// AlwaysSetting is the registers' settings carried out whatever the
// register holds (Always).
type AlwaysSetting struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Name       string    `db:"name" sync:"key"`
	Value      string    `db:"value" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

func (AlwaysSetting) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "settings", Mirror: magicsync.Setting, Origin: "register_id",
		Apply: magicsync.Always}
}

// offers counts the wishes offered, by setting name, and carries each out.
type offers struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *offers) CarryOut(_ context.Context, w replica.Wish[AlwaysSetting]) replica.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[w.Wanted.Name]++
	return replica.Applied()
}

func (o *offers) of(name string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[name]
}

// Seed 003: "With always, every wish is carried out: the last one wins over
// a change the register's user made before it arrived, and a change made
// after it wins until the next wish." A local change after a wish applied
// stands, on both sides, through what might carry the wish out again — the
// register offered its wishes (OfferWishes, another wish's message),
// restarted, provisioned again — and the wish stays shown applied; the
// next wish then wins over it.
func TestWithAlwaysALocalChangeAfterAWishWinsUntilTheNextWish(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		h := newHeadOfficeOf(t, shoptest.Codecs(t, Product{}, Notice{}, Drawer{}, Receipt{}, AlwaysSetting{}))
		o := &offers{}
		h.tune = func(s *replica.Settings) {
			s.Wishes = replica.Wishes{replica.Handle[AlwaysSetting](o)}
			s.WishesEvery = 200 * time.Millisecond // offered again often, would it be
		}
		g := h.addRegister(h.addShop(), d)
		g.setLocally("footer", "Thank you", time.Now().Add(-time.Hour))
		g.setLocally("header", "Hello", time.Now().Add(-time.Hour))
		a := alwaysOffice{h}
		a.filed(g, "footer", "Thank you")

		footer := AlwaysSetting{RegisterID: g.id, Name: "footer", Value: "Merci"}
		first := a.desire(footer)
		a.waitFor(footer, first, server.WishApplied)
		a.filed(g, "footer", "Merci")

		// The register's user changes it after the wish.
		g.setLocally("footer", "set on the register", time.Now())
		a.filed(g, "footer", "set on the register")
		stands := func(when string) {
			t.Helper()
			settleAll(t, g)
			if v := g.localSetting("footer"); v != "set on the register" {
				t.Fatalf("%s: the register holds %q; want its user's change, made after the wish", when, v)
			}
			if s, _ := h.filedSetting(g.id, "footer"); s.Value != "set on the register" {
				t.Fatalf("%s: the head office records %q; want the register's change", when, s.Value)
			}
			if w := a.wish(footer); w.Number != first || w.State != server.WishApplied {
				t.Fatalf("%s: the wish stands %d %v; want %d applied", when, w.Number, w.State, first)
			}
			if n := o.of("footer"); n != 1 {
				t.Fatalf("%s: the footer's wish was offered %d times; want once", when, n)
			}
		}
		stands("settled")

		// Offered: the header's wish, carried out, is a message that
		// changes a wish; OfferWishes, and WishesEvery's turns.
		header := AlwaysSetting{RegisterID: g.id, Name: "header", Value: "Bonjour"}
		a.waitFor(header, a.desire(header), server.WishApplied)
		g.r.OfferWishes()
		stands("after the register offered its wishes")

		// Restarted.
		g.stop()
		g = h.attachAt(g.id, d, g.path, false)
		header.Value = "Salut"
		a.waitFor(header, a.desire(header), server.WishApplied)
		stands("after the register restarted")

		// Provisioned again: the wish comes down again, with its number.
		h.provisionAgain(g.id)
		eventuallyWithin(t, wishWait, "the provisioning", func() (bool, string) {
			n := h.count(eng("SELECT count(*) FROM public.sync_replicas WHERE id = $1 AND NOT provision_needed AND snapshot = 0"), g.id)
			return n == 1, "still provisioning"
		})
		stands("after the register was provisioned again")

		// The next wish wins over the register's change.
		footer.Value = "Au revoir"
		next := a.desire(footer)
		a.waitFor(footer, next, server.WishApplied)
		a.filed(g, "footer", "Au revoir")
		if v := g.localSetting("footer"); v != "Au revoir" {
			t.Errorf("after the next wish, the register holds %q", v)
		}
	})
}

// alwaysOffice wishes the registers' AlwaysSettings.
type alwaysOffice struct{ h *headOffice }

func (a alwaysOffice) desire(row AlwaysSetting) uint64 {
	h := a.h
	h.t.Helper()
	ctx := context.Background()
	tx, err := h.s.Begin(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	w, err := server.Desire(ctx, h.s, tx, row, "ann at the office")
	if err != nil {
		h.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		h.t.Fatal(err)
	}
	return w.Number
}

func (a alwaysOffice) wish(row AlwaysSetting) server.Wish[AlwaysSetting] {
	h := a.h
	h.t.Helper()
	tc, err := codec.TableOf[AlwaysSetting](h.codecs)
	if err != nil {
		h.t.Fatal(err)
	}
	key, err := tc.KeyOf(row)
	if err != nil {
		h.t.Fatal(err)
	}
	ws, err := server.WishesOf[AlwaysSetting](context.Background(), h.s, h.pool, []magicsync.Key{magicsync.Key(key)})
	if err != nil {
		h.t.Fatal(err)
	}
	if len(ws) == 0 {
		return server.Wish[AlwaysSetting]{}
	}
	return ws[0]
}

func (a alwaysOffice) waitFor(row AlwaysSetting, number uint64, state server.WishState) {
	a.h.t.Helper()
	eventuallyWithin(a.h.t, wishWait, fmt.Sprintf("wish %d of %s standing %v", number, row.Name, state), func() (bool, string) {
		w := a.wish(row)
		return w.Number == number && w.State == state, fmt.Sprintf("wish %d %v %q", w.Number, w.State, w.Reason)
	})
}

func (a alwaysOffice) filed(g *register, name, value string) {
	a.h.t.Helper()
	eventuallyWithin(a.h.t, wishWait, fmt.Sprintf("%s = %q filed", name, value), func() (bool, string) {
		s, ok := a.h.filedSetting(g.id, name)
		return ok && s.Value == value, fmt.Sprintf("%+v (%v)", s, ok)
	})
}
