package replica

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/sqlitetest"
)

// Seed 003: a wish a handler answered Later "waits, and is offered again:
// when you call Replica::offer_wishes, after the next message that changes
// a wish, at start, and every wishes_every while one waits". The third of
// these alone: with OfferWishes never called, Run started long before,
// and WishesEvery an hour that never passes (a fake clock), a message
// wishing another row has the waiting wish offered again — and, its
// printer back on, carried out.
func TestAWaitingWishIsOfferedAgainAfterTheNextMessageThatChangesAWish(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		var on atomic.Bool
		var footerOffers atomic.Int32
		w := newWishShop(t, d, handlerFunc[Setting](func(_ context.Context, wish Wish[Setting]) Outcome {
			if wish.Wanted.Name != "footer" {
				return Applied()
			}
			footerOffers.Add(1)
			if !on.Load() {
				return Later("the printer is off")
			}
			return Applied()
		}), nil, func(s *Settings) {
			s.Clock = newFakeClock() // its timers never fire
			s.Idle = time.Hour
			s.WishesEvery = time.Hour
		})
		mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?), (?, 'header', 'Hello', ?)", register, t0, register, t0)
		runReplica(t, w.r)
		w.loopIdle(t) // the start pass is over
		w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci !"), nil))
		if a := w.answer(t, footer("footer"), 1, WishWaiting); !a.recorded || a.reason != "the printer is off" {
			t.Fatalf("answer %+v", a)
		}
		w.loopIdle(t) // the pass that offered it is over
		offered := footerOffers.Load()

		on.Store(true) // the printer is back, and nobody calls OfferWishes
		w.down(t, 2, w.wish(t, footer("header"), 1, text("Bonjour"), nil))
		// Both are carried out: the message's own wish, and the one that
		// waited.
		want := map[string]bool{string(keyOf(t, w.r.codecs, footer("footer"))): true, string(keyOf(t, w.r.codecs, footer("header"))): true}
		for deadline := time.After(10 * time.Second); len(want) > 0; {
			select {
			case a := <-w.answers:
				if a.state == WishApplied && a.recorded {
					delete(want, a.row.key)
				}
			case <-deadline:
				t.Fatalf("after the next message wishing another row, %d wishes not applied within 10 s; want the waiting one too", len(want))
			}
		}
		if n := footerOffers.Load(); n != offered+1 {
			t.Errorf("the waiting wish was offered %d times after the message; want once", n-offered)
		}
		if value, _ := w.setting(t, "footer"); value != "Merci !" {
			t.Errorf("the footer holds %q; want the wish's value", value)
		}
		// The message's own wish is carried out too (its answer recorded
		// in a batch of its own, maybe after the footer's).
		for deadline := time.Now().Add(10 * time.Second); ; {
			_, state, _ := w.held(t, footer("header"))
			if state == WishApplied {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the message's own wish stands %v 10 s on; want applied", state)
			}
			time.Sleep(5 * time.Millisecond) // the answer's commit has no signal here
		}
	})
}
