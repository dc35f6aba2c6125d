package replica

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
		a := w.answer(t, footer("footer"), 1, WishExpired)
		if !strings.Contains(a.reason, "deadline passed") || !a.recorded {
			t.Errorf("expired, saying %q, recorded %v", a.reason, a.recorded)
		}
		w.answer(t, footer("header"), 1, WishApplied)
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
