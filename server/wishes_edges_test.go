package server_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// A wish withdrawn stays visible, withdrawn, with where it stood then —
// a page can say "withdrawn" rather than lose it — until a new wish of
// the row replaces it. The row names itself: WithdrawRow and
// WishesOfRows take rows, not keys.
func TestAWithdrawnWishStaysVisibleUntilANewWish(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := w.setting(r, "footer", "Thank you", time.Now())
	row.Value = "Merci"
	wished := w.desire(row, "ann")
	w.pass()
	w.drain(r)
	w.answer(r, wished, syncpb.WishState_WISH_STATE_WAITING, "the printer is off")
	before := time.Now()
	w.inTx(func(tx pgx.Tx) error { return server.WithdrawRow(w.ctx, w.s, tx, row) })

	ws, err := server.WishesOfRows(w.ctx, w.s, w.pool, []shoptest.Setting{row})
	if err != nil || len(ws) != 1 {
		t.Fatalf("WishesOfRows after the withdrawal: %+v, %v", ws, err)
	}
	got := ws[0]
	if got.State != server.WishWithdrawn || got.Before != server.WishWaiting || got.Reason != "the printer is off" ||
		got.Number != wished.Number || got.Note != "ann" || got.WithdrawnAt.Before(before.Add(-time.Minute)) || got.Wanted.Value != "Merci" {
		t.Errorf("the wish withdrawn reads %+v", got)
	}
	if got.State.String() != "withdrawn" {
		t.Errorf("WishWithdrawn reads %q", got.State)
	}
	list, err := w.s.Wishes(w.ctx, server.WishScope{Table: "settings"})
	if err != nil || len(list.Wishes) != 1 || list.Wishes[0].State != server.WishWithdrawn || list.Wishes[0].Before != server.WishWaiting {
		t.Fatalf("Wishes after the withdrawal: %+v, %v", list, err)
	}

	// A new wish replaces it.
	row.Value = "Bonjour"
	again := w.desire(row, "")
	if st := w.wishOf(row); st.State != server.WishPending || st.Number != again.Number || !st.WithdrawnAt.IsZero() || st.Before != 0 {
		t.Errorf("the new wish reads %+v", st)
	}
	list, err = w.s.Wishes(w.ctx, server.WishScope{Replica: r})
	if err != nil || len(list.Wishes) != 1 || list.Counts[server.WishWithdrawn] != 0 {
		t.Errorf("Wishes after a new wish: %+v, %v", list, err)
	}
}

// A rollout aborted takes back its wishes not carried out: they show
// withdrawn, pending when taken back.
func TestAnAbortedRolloutsWishesShowWithdrawn(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := w.setting(r, "footer", "Thank you", time.Now())
	row.Value = "Merci"
	var ro server.Rollout
	w.inTx(func(tx pgx.Tx) error {
		var err error
		ro, err = server.Roll(w.ctx, w.s, tx, row, server.RolloutScope{All: true}, server.RolloutOptions{})
		return err
	})
	if err := w.s.AbortRollout(w.ctx, ro.ID, "wrong value"); err != nil {
		t.Fatal(err)
	}
	if st := w.wishOf(row); st.State != server.WishWithdrawn || st.Before != server.WishPending {
		t.Errorf("the wish of a rollout aborted reads %v (before %v)", st.State, st.Before)
	}
}

// WishScope.Table and Settings take a setting table's name as declared or
// qualified by its schema; a name that is no setting table is an error
// saying so, not an empty list.
func TestASettingTableIsNamedWithOrWithoutItsSchema(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := w.setting(r, "footer", "Thank you", time.Now())
	row.Value = "Merci"
	w.desire(row, "")
	for _, name := range []string{"settings", "shop.settings"} {
		list, err := w.s.Wishes(w.ctx, server.WishScope{Table: name})
		if err != nil || len(list.Wishes) != 1 || list.Wishes[0].Table != "settings" {
			t.Errorf("Wishes of %q: %+v, %v", name, list, err)
		}
		rows, err := w.s.Settings(w.ctx, name)
		if err != nil || len(rows) != 1 {
			t.Errorf("Settings of %q: %+v, %v", name, rows, err)
		}
	}
	for name, want := range map[string]error{
		"products":       server.ErrNotASetting,
		"shop.products":  server.ErrNotASetting,
		"other.settings": magicsync.ErrNotDeclared,
		"nope":           magicsync.ErrNotDeclared,
	} {
		if _, err := w.s.Wishes(w.ctx, server.WishScope{Table: name}); !errors.Is(err, want) {
			t.Errorf("Wishes of %q: %v; want %v", name, err, want)
		}
		if _, err := w.s.Settings(w.ctx, name); !errors.Is(err, want) {
			t.Errorf("Settings of %q: %v; want %v", name, err, want)
		}
	}
}

// The wish of a row the register has not filed yet says so: Filed is
// false, and Wanted holds the key, the origin and the values wanted, its
// other fields zero. Once filed, Wanted is the row as filed.
func TestAWishOfARowNotFiledYetSaysSo(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := shoptest.Setting{RegisterID: r, Name: "footer", Value: "Merci"}
	w.desire(row, "")
	st := w.wishOf(row)
	if st.Filed || st.Wanted.Value != "Merci" || st.Wanted.RegisterID != r || st.Wanted.Name != "footer" || !st.Wanted.ChangedAt.IsZero() {
		t.Errorf("the wish of a row not filed: Filed %v, Wanted %+v", st.Filed, st.Wanted)
	}
	filed := w.setting(r, "footer", "Thank you", time.Now())
	st = w.wishOf(row)
	if !st.Filed || st.Wanted.Value != "Merci" || !st.Wanted.ChangedAt.Equal(filed.ChangedAt) {
		t.Errorf("the wish of a row filed: Filed %v, Wanted %+v (filed %v)", st.Filed, st.Wanted, filed.ChangedAt)
	}
}

// inTx runs f in a transaction of its own, and commits it.
func (w *wishShop) inTx(f func(tx pgx.Tx) error) {
	w.t.Helper()
	tx, err := w.s.Begin(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	defer tx.Rollback(w.ctx) //nolint:errcheck // after Commit, a no-op
	if err := f(tx); err != nil {
		w.t.Fatal(err)
	}
	if err := tx.Commit(w.ctx); err != nil {
		w.t.Fatal(err)
	}
}
