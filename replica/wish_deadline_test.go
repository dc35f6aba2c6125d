package replica

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// A wish whose deadline passed, by the replica's clock, before the
// replica came to carry it out is answered expired, saying so, and its
// handler is never offered it; one whose deadline is ahead is carried out
// and handed its deadline.
func TestAWishPastItsDeadlineIsAnsweredExpiredAndNotCarriedOut(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		var offered atomic.Int32
		deadlines := make(chan time.Time, 4)
		w := newWishShop(t, d, handlerFunc[Setting](func(_ context.Context, wish Wish[Setting]) Outcome {
			offered.Add(1)
			deadlines <- wish.Deadline
			return Applied()
		}), nil, nil)
		mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
		mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'header', 'Hello', ?)", register, t0)
		late := w.wish(t, footer("footer"), 1, text("Merci !"), nil)
		late.Deadline = time.Now().Add(-time.Minute).UnixMicro()
		ahead := w.wish(t, footer("header"), 1, text("Bonjour"), nil)
		soon := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
		ahead.Deadline = soon.UnixMicro()
		w.down(t, 1, late, ahead)
		runReplica(t, w.r)
		// The two answers come in either order.
		a := w.answers2(t, footer("footer"), WishExpired, footer("header"), WishApplied)
		if !strings.Contains(a.reason, "deadline passed") || !a.recorded {
			t.Errorf("expired, saying %q, recorded %v", a.reason, a.recorded)
		}
		if got := <-deadlines; !got.Equal(soon) {
			t.Errorf("the handler was handed the deadline %v; want %v", got, soon)
		}
		if n := offered.Load(); n != 1 {
			t.Errorf("the handler was offered %d wishes; want only the one before its deadline", n)
		}
		if value, _ := w.setting(t, "footer"); value != "Thanks" {
			t.Errorf("the expired wish changed the row to %q", value)
		}
		if _, state, _ := w.held(t, footer("footer")); state != WishExpired {
			t.Errorf("the replica holds the wish %v; want expired", state)
		}
		for {
			s := w.up.next(t)
			for _, ans := range s.msg.GetUp().GetAnswers() {
				if ans.State == syncpb.WishState_WISH_STATE_EXPIRED {
					return
				}
			}
		}
	})
}

func TestInWindowTakesTheReplicasLocalDay(t *testing.T) {
	t.Parallel()
	at := func(h, m int) time.Time { return time.Date(2026, 12, 6, h, m, 0, 0, time.Local) }
	for _, tc := range []struct {
		now      time.Time
		from, to int
		want     bool
	}{
		{at(12, 0), 0, 0, true},             // no window: the whole day
		{at(3, 0), 2 * 60, 5 * 60, true},    // in the quiet hours
		{at(5, 0), 2 * 60, 5 * 60, false},   // their end is not in them
		{at(1, 59), 2 * 60, 5 * 60, false},  // before them
		{at(23, 30), 22 * 60, 6 * 60, true}, // past midnight, before it
		{at(5, 59), 22 * 60, 6 * 60, true},  // past midnight, after it
		{at(12, 0), 22 * 60, 6 * 60, false}, // the middle of the day
	} {
		if got := inWindow(tc.now, tc.from, tc.to); got != tc.want {
			t.Errorf("inWindow(%s, %d, %d) = %v, want %v", tc.now.Format("15:04"), tc.from, tc.to, got, tc.want)
		}
	}
}

// A wish held to a window of the replica's day that now is not in waits,
// saying which window, and its handler is not offered it.
func TestAWishOutsideItsWindowWaitsForIt(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		var offered atomic.Int32
		w := newWishShop(t, d, handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome {
			offered.Add(1)
			return Applied()
		}), nil, nil)
		mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
		now := time.Now().Local()
		m := now.Hour()*60 + now.Minute()
		wish := w.wish(t, footer("footer"), 1, text("Merci !"), nil)
		// A window of an hour that starts two hours from now.
		wish.WindowFrom, wish.WindowTo = uint32((m+120)%1440), uint32((m+180)%1440)
		w.down(t, 1, wish)
		runReplica(t, w.r)
		a := w.answer(t, footer("footer"), 1, WishWaiting)
		if !strings.Contains(a.reason, "of the replica's day: it waits for it") {
			t.Errorf("waiting, saying %q", a.reason)
		}
		if n := offered.Load(); n != 0 {
			t.Errorf("the handler was offered a wish outside its window %d times", n)
		}
	})
}

// answers2 waits for the answers, in state1 to wish 1 of row1 and in
// state2 to wish 1 of row2, in whichever order they come, and returns the
// first.
func (w *wishShop) answers2(t testing.TB, row1 magicsync.Declarer, state1 WishState, row2 magicsync.Declarer, state2 WishState) wishAnswer {
	t.Helper()
	key1, key2 := string(keyOf(t, w.r.codecs, row1)), string(keyOf(t, w.r.codecs, row2))
	var first wishAnswer
	got1, got2 := false, false
	deadline := time.After(10 * time.Second)
	for !got1 || !got2 {
		select {
		case a := <-w.answers:
			switch {
			case a.row.key == key1 && a.wish == 1 && a.state == state1:
				first, got1 = a, true
			case a.row.key == key2 && a.wish == 1 && a.state == state2:
				got2 = true
			}
		case <-deadline:
			t.Fatalf("within 10 s: answer %v to %v %v, answer %v to %v %v", state1, row1, got1, state2, row2, got2)
		}
	}
	return first
}
