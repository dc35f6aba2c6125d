package server_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/shoptest"

	"github.com/magicsync/magicsync/server"
)

// shoptestFooter is a footer setting with value, for a rollout.
func shoptestFooter(value string) shoptest.Setting {
	return shoptest.Setting{Name: "footer", Value: value}
}

// A rollout scheduled to start later wishes nothing until its start, then
// its first stage, each wish held to the rollout's window of the
// replicas' day, and sent with it.
func TestAScheduledRolloutWishesNothingUntilItsStartThenHoldsToItsWindow(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	a, b := w.register(), w.register()
	start := time.Now().Add(300 * time.Millisecond)
	quiet := server.DayWindow{From: 2 * time.Hour, To: 5*time.Hour + 30*time.Minute}
	ro := w.roll("Closed Monday", server.RolloutScope{All: true}, server.RolloutOptions{StartAt: start, Window: quiet})
	if ro.Wished != 0 || ro.Replicas != 2 {
		t.Fatalf("rolled %+v; want 2 replicas, none wished before the start", ro)
	}
	if err := w.s.AdvanceRollouts(w.ctx); err != nil {
		t.Fatal(err)
	}
	st, err := w.s.RolloutStatus(w.ctx, ro.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Scheduled || st.Wished != 0 || !st.Options.StartAt.Equal(start.Truncate(time.Microsecond)) || st.Options.Window != quiet {
		t.Fatalf("before its start: %+v; want scheduled, nothing wished, its start and window", st)
	}
	time.Sleep(time.Until(start) + 10*time.Millisecond) // the start is a time: nothing signals it
	if err := w.s.AdvanceRollouts(w.ctx); err != nil {
		t.Fatal(err)
	}
	if st, err = w.s.RolloutStatus(w.ctx, ro.ID); err != nil || st.Scheduled || st.Wished != 2 {
		t.Fatalf("after its start: %+v (%v); want both replicas wished", st, err)
	}
	w.pass()
	for _, r := range []uuid.UUID{a, b} {
		sent := wishesIn(w.drain(r))
		if len(sent) != 1 || sent[0].WindowFrom != 120 || sent[0].WindowTo != 330 {
			t.Errorf("replica %s was sent %v; want the wish, held to 02:00–05:30", r, sent)
		}
	}
}

// A window that is no window of a day is refused before anything is
// written, saying what to give.
func TestAWindowThatIsNoWindowOfADayIsRefused(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	w.register()
	for _, win := range []server.DayWindow{{From: time.Hour, To: time.Hour}, {From: -time.Minute, To: time.Hour}, {From: time.Hour, To: 24 * time.Hour},
		{From: 90 * time.Second, To: time.Hour}} {
		tx, err := w.s.Begin(w.ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = server.Roll(w.ctx, w.s, tx, shoptestFooter("x"), server.RolloutScope{All: true}, server.RolloutOptions{Window: win})
		_ = tx.Rollback(w.ctx)
		if err == nil {
			t.Errorf("a rollout held to %v–%v was taken", win.From, win.To)
		}
	}
}

// A command rollout scheduled to start later issues nothing until then.
func TestAScheduledCommandRolloutIssuesNothingUntilItsStart(t *testing.T) {
	t.Parallel()
	w := newCommandShop(t)
	w.register()
	start := time.Now().Add(300 * time.Millisecond)
	ro := w.rollCommand(server.CommandRequest{Name: "reboot"}, server.RolloutScope{All: true}, server.RolloutOptions{StartAt: start})
	if st := w.rolledStatus(ro.ID); ro.Issued != 0 || st.Issued != 0 || !st.Scheduled {
		t.Fatalf("before its start: %+v, %+v; want nothing issued, scheduled", ro, st)
	}
	time.Sleep(time.Until(start) + 10*time.Millisecond) // the start is a time: nothing signals it
	if st := w.rolledStatus(ro.ID); st.Issued != 1 || st.Scheduled {
		t.Fatalf("after its start: %+v; want the command issued", st)
	}
	var err error
	w.inTx(func(tx pgx.Tx) error {
		_, err = server.RollCommand(w.ctx, w.s, tx, server.CommandRequest{Name: "reboot"}, server.RolloutScope{All: true},
			server.RolloutOptions{Window: server.DayWindow{From: time.Hour, To: 2 * time.Hour}})
		return nil
	})
	if !errors.Is(err, server.ErrBadCommand) {
		t.Errorf("a command rollout with a window: %v; want ErrBadCommand", err)
	}
}
