package replica

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/sqlitetest"
)

// The time of a wish's answer never goes back from the time of the
// answer before it to the same wish, even when the replica's clock steps
// back between a Waiting and the final answer: the server keeps, of two
// answers to one wish, the later in time, and would otherwise drop the
// final one.
func TestAnswerTimeNeverGoesBackForTheSameWishWhenTheClockStepsBack(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		clock := newFakeClock()
		var on atomic.Bool
		w := newWishShop(t, d, handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome {
			if !on.Load() {
				return Later("the printer is off")
			}
			return Applied()
		}), nil, func(s *Settings) { s.Clock = clock; s.WishesEvery = time.Hour })
		mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
		w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci !"), nil))
		w.offerNow(t)
		waited := answeredAt(t, w, footer("footer"))
		if waited != clock.Now().UnixMicro() {
			t.Fatalf("the Waiting answer is at %d; want the clock's %d", waited, clock.Now().UnixMicro())
		}
		clock.mu.Lock()
		clock.now = clock.now.Add(-time.Hour)
		clock.mu.Unlock()
		on.Store(true)
		w.offerNow(t)
		if _, state, _ := w.held(t, footer("footer")); state != WishApplied {
			t.Fatalf("the wish stands %v; want applied", state)
		}
		if applied := answeredAt(t, w, footer("footer")); applied <= waited {
			t.Errorf("the Applied answer is at %d, not after the Waiting one at %d", applied, waited)
		}

		// A new wish of the row starts afresh: its answer takes the clock's
		// time.
		w.down(t, 2, w.wish(t, footer("footer"), 2, text("Bonjour"), nil))
		w.offerNow(t)
		if at := answeredAt(t, w, footer("footer")); at != clock.Now().UnixMicro() {
			t.Errorf("the answer to a new wish is at %d; want the clock's %d", at, clock.Now().UnixMicro())
		}
	})
}

// answeredAt reads the time of the answer held to the wish of row.
func answeredAt(t testing.TB, w *wishShop, row Setting) int64 {
	t.Helper()
	var at int64
	if err := w.r.db.QueryRow("SELECT answered_at FROM sync_wishes WHERE tbl = 'settings' AND key = ?", []byte(keyOf(t, w.r.codecs, row))).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// Digests that went up before the clock stepped back are due again at
// once, not once the clock has caught up with their time: a clock set
// back an hour must not switch the safety net off for that hour.
func TestDigestsGoUpWhenTheClockSteppedBackSinceTheLast(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		s := quietSettings()
		s.DigestsEvery = time.Minute
		clock := newFakeClock()
		s.Clock = clock
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		if got := up.next(t).msg.Up.GetDigests(); len(got) == 0 {
			t.Fatal("no digests at first")
		}
		clock.mu.Lock()
		clock.now = clock.now.Add(-time.Hour)
		clock.mu.Unlock()
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-up.got:
			if len(s.msg.Up.GetDigests()) == 0 {
				t.Fatalf("sent %v without digests", s.msg.Up)
			}
		default:
			t.Fatal("no digests after the clock stepped back an hour")
		}
	})
}
