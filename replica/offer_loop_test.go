package replica

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// loopIdle returns once the offers' loop is past every pass asked for so
// far: it asks for a pass twice, each time waiting until the loop took the
// request, which it takes only between passes.
func (w *wishShop) loopIdle(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for range 2 {
		w.r.offers.ask(false)
		for len(w.r.offers.nudge) > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the offers' loop took no request for a pass within 10 s")
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// waitForClock returns once the clock was asked for a wait of d.
func waitForClock(t testing.TB, c *fakeClock, d time.Duration) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-c.waits:
			if got == d {
				return
			}
		case <-deadline:
			t.Fatalf("no wait of %v asked of the clock within 10 s", d)
		}
	}
}

// A wish a handler answers Later while Run runs, after the pass that
// offered it is over, is offered again WishesEvery later.
func TestOfferWishAnsweredLaterDuringRunIsOfferedAgainAfterWishesEvery(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		clock := newFakeClock()
		var calls atomic.Int32
		started, proceed := make(chan struct{}), make(chan struct{})
		w := newWishShop(t, d, handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome {
			if calls.Add(1) == 1 {
				close(started)
				<-proceed // the printer takes its time to say it is off
				return Later("the printer is off")
			}
			return Applied()
		}), nil, func(s *Settings) {
			s.Clock = clock
			s.Idle = time.Hour
			s.WishesTimeout = time.Minute
			s.WishesEvery = 7 * time.Minute
		})
		mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
		runReplica(t, w.r)
		w.loopIdle(t) // the start pass is over
		w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci !"), nil))
		<-started
		w.loopIdle(t) // so is the pass that offered the wish
		close(proceed)
		if a := w.answer(t, footer("footer"), 1, WishWaiting); !a.recorded || a.reason != "the printer is off" {
			t.Fatalf("answer %+v", a)
		}
		waitForClock(t, clock, 7*time.Minute)
		clock.fireAll()
		if a := w.answer(t, footer("footer"), 1, WishApplied); !a.recorded {
			t.Fatalf("answer %+v", a)
		}
		if n := calls.Load(); n != 2 {
			t.Fatalf("offered %d times; want twice", n)
		}
	})
}

// newWishShopOn is newWishShop on the database db, with Direct knobs.
func newWishShopOn(t *testing.T, db *sql.DB, settings CarryOut[Setting], tweak func(*Settings)) *wishShop {
	t.Helper()
	mustExec(t, db, shopSchema)
	mustExec(t, db, knobSchema)
	c, err := magicsync.NewCodecs(Product{}, Image{}, Receipt{}, Position{}, Setting{}, Knob{})
	if err != nil {
		t.Fatal(err)
	}
	if err := Install(context.Background(), db, c); err != nil {
		t.Fatal(err)
	}
	s := quietSettings()
	s.Wishes = Wishes{Handle(settings), Handle(Direct[Knob]{})}
	if tweak != nil {
		tweak(&s)
	}
	up := newRecorder()
	r, err := New(context.Background(), db, c, Me(register), up, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	w := &wishShop{r: r, up: up, b: builder{t: t, codecs: c}, answers: make(chan wishAnswer, 1000)}
	r.offers.answered = func(a wishAnswer) { w.answers <- a }
	return w
}

// An answer that fails to record — the database busy beyond its busy
// timeout, for the row's write and for every fallback — leaves no wish
// pending for ever: the wish is offered again after a backoff, and ends
// applied once the database is free.
func TestOfferAnswerThatFailsToRecordIsOfferedAgainAndEndsApplied(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		path := sqlitetest.NewPath(t)
		p := sqlitetest.Safe()
		p.BusyTimeout = 100 * time.Millisecond
		db := sqlitetest.OpenPath(t, d, path, p)
		other := sqlitetest.OpenPath(t, d, path, p)
		lock, err := other.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Close()
		var calls atomic.Int32
		w := newWishShopOn(t, db, handlerFunc[Setting](func(ctx context.Context, _ Wish[Setting]) Outcome {
			// The first offer takes the database's write lock from
			// another connection before it answers; the second gives it
			// back.
			q := "BEGIN IMMEDIATE"
			if calls.Add(1) > 1 {
				q = "ROLLBACK"
			}
			if _, err := lock.ExecContext(ctx, q); err != nil && !strings.Contains(err.Error(), "no transaction") {
				t.Errorf("%s: %v", q, err)
			}
			return Applied()
		}), func(s *Settings) { s.WishesEvery = time.Hour })
		mustExec(t, db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
		runReplica(t, w.r)
		w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci"), nil))
		if a := w.answer(t, footer("footer"), 1, WishApplied); !a.recorded {
			t.Fatalf("answer %+v", a)
		}
		if n := calls.Load(); n < 2 {
			t.Fatalf("offered %d times; want again after the record failed", n)
		}
		if _, state, _ := w.held(t, footer("footer")); state != WishApplied {
			t.Fatalf("state %v", state)
		}
		if value, _ := w.setting(t, "footer"); value != "Merci" {
			t.Fatalf("the row holds %q", value)
		}
	})
}

// Many wishes at once (2,000, Direct): every one ends applied, soon, and
// their answers are recorded many to a transaction.
func TestOfferManyWishesAtOnceAllEndAppliedInFewTransactions(t *testing.T) {
	t.Parallel()
	const n = 2000
	// bound is what a loaded 2-core machine meets, with room to spare:
	// there, the wishes take about 2 s (modernc 1.8 s, mattn 1.1 s), and
	// under -race 20 s with modernc, 2 s with mattn.
	const bound = 60 * time.Second
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		w := newWishShop(t, d, nil, nil, func(s *Settings) { s.WishesEvery = time.Hour })
		tx, err := w.r.db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := tx.Exec("INSERT INTO settings VALUES (?, ?, 'Thanks', ?)", register, fmt.Sprint("s", i), t0); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		var applied, batches, batched atomic.Int32
		all := make(chan struct{})
		w.r.offers.answered = func(a wishAnswer) {
			if a.state == WishApplied && a.recorded && applied.Add(1) == n {
				close(all)
			}
		}
		w.r.offers.batched = func(k int) {
			batches.Add(1)
			batched.Add(int32(k))
		}
		ws := w.wish(t, footer("s0"), 1, text("Merci"), nil)
		wishes := append(make([]*syncpb.Wish, 0, n), ws)
		for i := 1; i < n; i++ {
			wishes = append(wishes, w.wish(t, footer(fmt.Sprint("s", i)), 1, text("Merci"), nil))
		}
		runReplica(t, w.r)
		start := time.Now()
		w.down(t, 1, wishes...)
		t.Logf("%s: message applied in %v", d.Label, time.Since(start))
		select {
		case <-all:
		case <-time.After(bound):
			t.Fatalf("%d of %d wishes applied within %v", applied.Load(), n, bound)
		}
		t.Logf("%s: %d wishes applied in %v, %d transactions", d.Label, n, time.Since(start), batches.Load())
		if k := count(t, w.r.db, "SELECT count(*) FROM sync_wishes WHERE state = ?", int(WishApplied)); k != n {
			t.Fatalf("%d wishes applied; want %d", k, n)
		}
		if k := count(t, w.r.db, "SELECT count(*) FROM settings WHERE value = 'Merci'"); k != n {
			t.Fatalf("%d rows written; want %d", k, n)
		}
		if b, k := batches.Load(), batched.Load(); b > n/10 || k != n {
			t.Fatalf("%d answers recorded in %d transactions; want %d in at most %d", k, b, n, n/10)
		}
	})
}

// A write the database refuses (a CHECK) in a batch answers that wish
// refused, with the database's reason, and commits the others' writes in
// the same transaction.
func TestOfferBatchWithAWriteRefusedAnswersItRefusedAndAppliesTheOthers(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		w := newWishShop(t, d, nil, nil, nil)
		var batches []int
		w.r.offers.batched = func(k int) { batches = append(batches, k) }
		mustExec(t, w.r.db, "INSERT INTO knobs VALUES (?, 'bass', 3, 1), (?, 'volume', 3, 1), (?, 'treble', 3, 1)", register, register, register)
		w.down(t, 1, w.wish(t, knob("bass"), 1, integer(7), nil), w.wish(t, knob("volume"), 1, integer(42), nil), w.wish(t, knob("treble"), 1, integer(8), nil))
		ctx := context.Background()
		held, err := w.r.wishesToOffer(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		var batch []*outcome
		for _, h := range held {
			batch = append(batch, &outcome{h: w.r.offers.handlers[h.row.tbl], w: h, apply: true})
		}
		if len(batch) != 3 {
			t.Fatalf("%d wishes to offer", len(batch))
		}
		w.r.writeBatch(ctx, batch)
		if len(batches) != 1 || batches[0] != 3 {
			t.Fatalf("transactions of %v answers; want one of 3", batches)
		}
		if _, state, reason := w.held(t, knob("volume")); state != WishRefused || !strings.Contains(reason, "CHECK constraint failed") {
			t.Fatalf("volume: %v %q", state, reason)
		}
		if level, version := w.knob(t, "volume"); level != 3 || version != 1 {
			t.Fatalf("volume holds %d at %d", level, version)
		}
		for name, want := range map[string]int64{"bass": 7, "treble": 8} {
			if _, state, _ := w.held(t, knob(name)); state != WishApplied {
				t.Fatalf("%s: %v", name, state)
			}
			if level, version := w.knob(t, name); level != want || version != 2 {
				t.Fatalf("%s holds %d at %d; want %d at 2", name, level, version, want)
			}
		}
	})
}

// After a message, the wishes waiting for their row are offered only when
// the replica now holds it: the others are not offered, nor answered
// again.
func TestOfferAfterAMessageOffersOnlyTheWishesWhoseRowCame(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		var mu sync.Mutex
		var offered []string
		w := newWishShop(t, d, handlerFunc[Setting](func(_ context.Context, wish Wish[Setting]) Outcome {
			mu.Lock()
			offered = append(offered, wish.Wanted.Name)
			mu.Unlock()
			return Applied()
		}), nil, nil)
		w.down(t, 1, w.wish(t, footer("a"), 1, text("x"), nil), w.wish(t, footer("b"), 1, text("x"), nil), w.wish(t, footer("c"), 1, text("x"), nil))
		w.offerNow(t)
		if n := count(t, w.r.db, "SELECT count(*) FROM sync_wishes WHERE state = 2 AND needs_row = 1"); n != 3 {
			t.Fatalf("%d wishes wait for their row; want 3", n)
		}
		w.settle()
		mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'b', 'Thanks', ?)", register, t0)
		var wg sync.WaitGroup
		if err := w.r.offerPass(context.Background(), &wg, false); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if len(offered) != 1 || offered[0] != "b" {
			t.Fatalf("offered %v; want only b", offered)
		}
		select {
		case a := <-w.answers:
			if a.state != WishApplied || !a.recorded {
				t.Fatalf("answer %+v", a)
			}
		default:
			t.Fatal("no answer")
		}
		select {
		case a := <-w.answers:
			t.Fatalf("another answer: %+v", a)
		default:
		}
	})
}

// At most maxHandlers handlers run at once; the others wait their turn,
// and every wish ends applied.
func TestOfferRunsAtMostMaxHandlersAtOnce(t *testing.T) {
	t.Parallel()
	const n = maxHandlers + 36
	var running, most atomic.Int32
	arrived := make(chan struct{}, n)
	gate := make(chan struct{})
	w := newWishShop(t, sqlitetest.Modernc(), handlerFunc[Setting](func(ctx context.Context, _ Wish[Setting]) Outcome {
		k := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if k <= m || most.CompareAndSwap(m, k) {
				break
			}
		}
		arrived <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return Applied()
	}), nil, func(s *Settings) { s.WishesTimeout = time.Minute })
	tx, err := w.r.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := tx.Exec("INSERT INTO settings VALUES (?, ?, 'Thanks', ?)", register, fmt.Sprint("s", i), t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var wishes []*syncpb.Wish
	for i := range n {
		wishes = append(wishes, w.wish(t, footer(fmt.Sprint("s", i)), 1, text("Merci"), nil))
	}
	w.down(t, 1, wishes...)
	var wg sync.WaitGroup
	if err := w.r.offerPass(context.Background(), &wg, true); err != nil {
		t.Fatal(err)
	}
	for range maxHandlers {
		<-arrived
	}
	// None more may start while these run.
	select {
	case <-arrived:
		t.Fatalf("a handler started beyond the %d running", maxHandlers)
	case <-time.After(100 * time.Millisecond):
	}
	close(gate)
	wg.Wait()
	if m := most.Load(); m != maxHandlers {
		t.Fatalf("at most %d handlers ran at once; want %d", m, maxHandlers)
	}
	if k := count(t, w.r.db, "SELECT count(*) FROM sync_wishes WHERE state = ?", int(WishApplied)); k != n {
		t.Fatalf("%d wishes applied; want %d", k, n)
	}
}
