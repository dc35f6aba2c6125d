package server_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// A wish not answered for good by its deadline shows expired, saying why,
// is counted expired and sent with its deadline; a wish answered for good
// before it does not expire; and a replica's later word on an expired
// wish stands over the server's, for it is what happened.
func TestAWishPastItsDeadlineShowsExpiredAndTheReplicasWordStands(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	footer := w.setting(r, "footer", "Thank you", time.Now())
	volume := w.setting(r, "volume", "3", time.Now())
	deadline := time.Now().Add(100 * time.Millisecond).UTC().Truncate(time.Microsecond)
	var late, early server.Wished
	w.inTx(func(tx pgx.Tx) error {
		footer.Value = "Merci"
		var err error
		if late, err = server.DesireWith(w.ctx, w.s, tx, footer, server.DesireOptions{Note: "ann", Deadline: deadline}); err != nil {
			return err
		}
		volume.Value = "5"
		early, err = server.DesireWith(w.ctx, w.s, tx, volume, server.DesireOptions{Deadline: deadline})
		return err
	})
	w.pass()
	sent := wishesIn(w.drain(r))
	if len(sent) != 2 || sent[0].Deadline != deadline.UnixMicro() {
		t.Fatalf("the register was sent %v; want both wishes with their deadline", sent)
	}
	w.answer(r, early, syncpb.WishState_WISH_STATE_APPLIED, "")
	time.Sleep(time.Until(deadline) + 10*time.Millisecond) // the deadline is a time: nothing signals it
	if err := w.s.ExpireWishes(w.ctx); err != nil {
		t.Fatal(err)
	}
	got := w.wishOf(footer)
	if got.State != server.WishExpired || got.Reason == "" || !got.Deadline.Equal(deadline) || got.AnsweredAt.IsZero() {
		t.Fatalf("the wish past its deadline: %v %q, deadline %v, answered %v; want expired, saying why", got.State, got.Reason, got.Deadline, got.AnsweredAt)
	}
	if st := w.wishOf(volume).State; st != server.WishApplied {
		t.Errorf("the wish applied before its deadline: %v; want applied", st)
	}
	list, err := w.s.Wishes(w.ctx, server.WishScope{})
	if err != nil {
		t.Fatal(err)
	}
	if list.Counts[server.WishExpired] != 1 || list.Wishes[0].State != server.WishExpired {
		t.Errorf("the list: counts %v, first %v; want the expired wish counted and first", list.Counts, list.Wishes[0].State)
	}
	// The register's clock was behind: it carried the wish out.
	w.answer(r, late, syncpb.WishState_WISH_STATE_APPLIED, "")
	if st := w.wishOf(footer).State; st != server.WishApplied {
		t.Errorf("after the register said it applied it: %v; want applied", st)
	}
	// Its own word of expiry is taken too.
	footer.Value = "Danke"
	again := w.desireWith(footer, server.DesireOptions{Deadline: time.Now().Add(time.Hour)})
	w.answer(r, again, syncpb.WishState_WISH_STATE_EXPIRED, "its deadline passed before it was carried out (by the replica's clock)")
	if st := w.wishOf(footer).State; st != server.WishExpired {
		t.Errorf("after the register said it expired: %v; want expired", st)
	}
}

// desireWith wishes row with opts in a transaction of its own.
func (w *wishShop) desireWith(row any, opts server.DesireOptions) server.Wished {
	w.t.Helper()
	var wished server.Wished
	w.inTx(func(tx pgx.Tx) error {
		var err error
		wished, err = server.DesireWith(w.ctx, w.s, tx, row, opts)
		return err
	})
	return wished
}
