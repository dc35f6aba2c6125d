package e2e

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// steppingClock is the system clock, set back by a step the test moves.
type steppingClock struct{ back atomic.Int64 }

func (c *steppingClock) Now() time.Time                         { return time.Now().Add(-time.Duration(c.back.Load())) }
func (c *steppingClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// A register whose clock steps back between a wish's Waiting and its
// final answer still has that answer filed: the head office shows the
// wish applied, the digests of the answers agree, and the register is not
// provisioned again digest after digest.
func TestAnAnswerAfterTheRegistersClockSteppedBackIsFiledAndTheDigestsAgree(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		p := &printer{}
		clock := &steppingClock{}
		h := newSettingsOffice(t, p)
		tune := h.tune
		h.tune = func(s *replica.Settings) {
			tune(s)
			s.Clock, s.DigestsEvery = clock, 50*time.Millisecond
		}
		g := h.addRegister(h.addShop(), d)
		g.setLocally("footer", "Thank you", time.Now().Add(-2*time.Hour))
		seen := h.filedOnce(g, "footer", "Thank you")

		p.off.Store(true)
		wanted := seen
		wanted.Value = "Merci"
		w := h.desire(wanted, "")
		h.waitForWish(wanted, w.Number, server.WishWaiting, "the printer is off")

		clock.back.Store(int64(time.Hour))
		p.off.Store(false)
		g.r.OfferWishes()
		h.waitForWish(wanted, w.Number, server.WishApplied, "")
		h.filedOnce(g, "footer", "Merci")

		// Digests go up every 50 ms: two rounds after the answer was
		// filed, none disagreed, and none will.
		since := clock.Now()
		eventuallyWithin(t, wishWait, "two rounds of digests after the answer was filed", func() (bool, string) {
			in, err := replica.Inspect(context.Background(), g.db)
			if err != nil {
				return false, err.Error()
			}
			return in.DigestsAt.After(since.Add(100 * time.Millisecond)), "digests last sent " + in.DigestsAt.String()
		})
		if n := h.s.Stats().DigestMismatches; n != 0 {
			t.Errorf("%d digests disagreed", n)
		}
		var reason *string
		if err := h.pool.QueryRow(context.Background(), eng(`SELECT CASE WHEN provision_needed OR snapshot <> 0 THEN coalesce(provision_reason, '?') END FROM public.sync_replicas WHERE id = $1`), g.id).Scan(&reason); err != nil {
			t.Fatal(err)
		}
		if reason != nil {
			t.Errorf("the register is being provisioned again: %s", *reason)
		}
		if st, _ := h.wishOf(wanted); st.State != server.WishApplied {
			t.Errorf("the head office shows the wish %v", st.State)
		}
	})
}
