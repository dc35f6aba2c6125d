package replica

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Knob is a setting applied IfUnchanged, with an integer version and a
// CHECK on its desired column.
type Knob struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Name       string    `db:"name" sync:"key"`
	Level      int64     `db:"level" sync:"desired"`
	Version    int64     `db:"version" sync:"version"`
}

func (Knob) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "knobs", Mirror: magicsync.Setting, Origin: "register_id", Apply: magicsync.IfUnchanged}
}

const knobSchema = `CREATE TABLE knobs (register_id TEXT NOT NULL, name TEXT NOT NULL, level INTEGER NOT NULL CHECK (level BETWEEN 0 AND 10),
	version INTEGER NOT NULL, PRIMARY KEY (register_id, name));`

// handlerFunc adapts a function to a CarryOut.
type handlerFunc[T any] func(ctx context.Context, w Wish[T]) Outcome

func (f handlerFunc[T]) CarryOut(ctx context.Context, w Wish[T]) Outcome { return f(ctx, w) }

// wishShop is a replica of the shop with knobs, whose settings and knobs
// are carried out by the handlers given, and the answers it records.
type wishShop struct {
	r       *Replica
	up      *recorder
	b       builder
	answers chan wishAnswer
}

func newWishShop(t *testing.T, d sqlitetest.Driver, settings CarryOut[Setting], knobs CarryOut[Knob], tweak func(*Settings)) *wishShop {
	t.Helper()
	db := sqlitetest.Open(t, d)
	mustExec(t, db, shopSchema)
	mustExec(t, db, knobSchema)
	c, err := magicsync.NewCodecs(Product{}, Image{}, Receipt{}, Position{}, Setting{}, Knob{})
	if err != nil {
		t.Fatal(err)
	}
	if err := Install(context.Background(), db, c); err != nil {
		t.Fatal(err)
	}
	if settings == nil {
		settings = Direct[Setting]{}
	}
	if knobs == nil {
		knobs = Direct[Knob]{}
	}
	s := quietSettings()
	s.Wishes = Wishes{Handle(settings), Handle(knobs)}
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

// wish is a wish of the setting or knob called name: value wanted, based
// on version (nil: none).
func (w *wishShop) wish(t testing.TB, row magicsync.Declarer, n uint64, wanted codec.Value, basedOn *codec.Value) *syncpb.Wish {
	t.Helper()
	tc, err := w.r.codecs.Of(row)
	if err != nil {
		t.Fatal(err)
	}
	ws := &syncpb.Wish{Table: tc.Name, Key: []byte(keyOf(t, w.r.codecs, row)), Wish: n,
		Columns: tc.ColumnNames(tc.DesiredIndex), Wanted: wire.AppendTuple(nil, []codec.Value{wanted}),
		Note: "ann at the office", WishedAt: t0.UnixMicro()}
	if basedOn != nil {
		ws.BasedOn = wire.AppendTuple(nil, []codec.Value{*basedOn})
	}
	return ws
}

func (w *wishShop) receive(t testing.TB, m *syncpb.ToReplica) Received {
	t.Helper()
	body, err := wire.EncodeToReplica(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.r.Endpoint().Receive(context.Background(), body)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (w *wishShop) down(t testing.TB, id uint64, ws ...*syncpb.Wish) Received {
	t.Helper()
	return w.receive(t, &syncpb.ToReplica{Id: id, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Wishes: ws}}})
}

// answer waits for an answer in state, recorded or dropped, to wish n of
// row; an offer may be made twice (at start and after a message), so the
// answers in other states are skipped.
func (w *wishShop) answer(t testing.TB, row magicsync.Declarer, n uint64, state WishState) wishAnswer {
	t.Helper()
	key := string(keyOf(t, w.r.codecs, row))
	deadline := time.After(10 * time.Second)
	for {
		select {
		case a := <-w.answers:
			if a.row.key == key && a.wish == n && a.state == state {
				return a
			}
		case <-deadline:
			t.Fatalf("no answer %v to wish %d of %v within 10 s", state, n, row)
			return wishAnswer{}
		}
	}
}

// settle forgets the answers seen so far and the requests for a pass made,
// before the test starts the offers' loop.
func (w *wishShop) settle() {
	select {
	case <-w.r.offers.nudge:
	default:
	}
	for {
		select {
		case <-w.answers:
		default:
			return
		}
	}
}

// offerNow makes one pass of the offers, as Run's loop does, and waits for
// it to finish.
func (w *wishShop) offerNow(t testing.TB) {
	t.Helper()
	var wg sync.WaitGroup
	if err := w.r.offerPass(context.Background(), &wg, true); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// held reads the wish held of row: its number, state and reason.
func (w *wishShop) held(t testing.TB, row magicsync.Declarer) (n uint64, state WishState, reason string) {
	t.Helper()
	tc, _ := w.r.codecs.Of(row)
	err := w.r.db.QueryRow("SELECT wish, state, reason FROM sync_wishes WHERE tbl = ? AND key = ?", tc.Name, []byte(keyOf(t, w.r.codecs, row))).Scan(&n, &state, &reason)
	if err != nil {
		t.Fatalf("the wish of %v: %v", row, err)
	}
	return n, state, reason
}

func (w *wishShop) setting(t testing.TB, name string) (value string, changedAt time.Time) {
	t.Helper()
	var at any
	if err := w.r.db.QueryRow("SELECT value, changed_at FROM settings WHERE register_id = ? AND name = ?", register, name).Scan(&value, &at); err != nil {
		t.Fatal(err)
	}
	v, err := (&codec.Column{Name: "changed_at", Kind: wire.Time}).Canonical(at)
	if err != nil {
		t.Fatal(err)
	}
	return value, time.UnixMicro(v.I).UTC()
}

func (w *wishShop) knob(t testing.TB, name string) (level, version int64) {
	t.Helper()
	if err := w.r.db.QueryRow("SELECT level, version FROM knobs WHERE register_id = ? AND name = ?", register, name).Scan(&level, &version); err != nil {
		t.Fatal(err)
	}
	return level, version
}

func footer(name string) Setting { return Setting{RegisterID: register, Name: name} }
func knob(name string) Knob      { return Knob{RegisterID: register, Name: name} }

func text(s string) codec.Value   { return wire.TextValue(s) }
func integer(i int64) codec.Value { return wire.IntValue(i) }

// answersOf lists the answers an Up carries, by their row's key.
func answersOf(up *syncpb.Up) map[string]*syncpb.Answer {
	out := map[string]*syncpb.Answer{}
	for _, a := range up.GetAnswers() {
		out[string(a.Key)] = a
	}
	return out
}

// Applied: in one transaction, the desired columns are written onto the
// row, its version moved on (as the replica's own write, so the row goes
// up as records do), and the answer recorded. The handler is offered the
// row as held, with the wanted values in its desired columns.
func TestWishAppliedWritesTheRowItsVersionAndTheAnswerTogether(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		offered := make(chan Wish[Setting], 1)
		w := newWishShop(t, d, handlerFunc[Setting](func(_ context.Context, wish Wish[Setting]) Outcome {
			offered <- wish
			return Applied()
		}), nil, nil)
		mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
		runReplica(t, w.r)
		first := w.up.nextWith(t, "main", "settings") // the host's own write goes up first
		if got := upRows[Setting](t, w.r.codecs, first.msg.Up); len(got) != 1 || got[0].Value != "Thanks" {
			t.Fatalf("first up: %+v", got)
		}
		w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci !"), nil))
		if a := w.answer(t, footer("footer"), 1, WishApplied); !a.recorded {
			t.Fatalf("answer %+v; want applied", a)
		}
		wish := <-offered
		if wish.Wanted.Value != "Merci !" || !wish.Wanted.ChangedAt.Equal(t0) || wish.Wanted.Name != "footer" || wish.Number != 1 ||
			wish.Note != "ann at the office" || !wish.WishedAt.Equal(t0) {
			t.Fatalf("offered %+v", wish)
		}
		value, at := w.setting(t, "footer")
		if value != "Merci !" || !at.After(t0) {
			t.Fatalf("the row holds %q at %v; want the wanted value at a version after %v", value, at, t0)
		}
		// The row and the answer were committed together: the Up that
		// carries the row carries the answer.
		m := w.up.nextWith(t, "main", "settings")
		rows := upRows[Setting](t, w.r.codecs, m.msg.Up)
		a := answersOf(m.msg.Up)[string(keyOf(t, w.r.codecs, footer("footer")))]
		if len(rows) != 1 || rows[0].Value != "Merci !" || !rows[0].ChangedAt.Equal(at) || a == nil || a.State != syncpb.WishState_WISH_STATE_APPLIED || a.Wish != 1 {
			t.Fatalf("up: rows %+v, answers %v", rows, m.msg.Up.GetAnswers())
		}
		if _, state, _ := w.held(t, footer("footer")); state != WishApplied {
			t.Fatalf("state %v", state)
		}
	})
}

// Refused(why): final. The row stays as it is, the reason is recorded, and
// the wish is never offered again.
func TestWishRefusedIsFinalAndLeavesTheRow(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	w := newWishShop(t, sqlitetest.Modernc(), handlerFunc[Setting](func(_ context.Context, wish Wish[Setting]) Outcome {
		if wish.Wanted.Name == "footer" {
			calls.Add(1)
			return Refused("longer than the printer's 40 characters")
		}
		return Applied()
	}), nil, nil)
	mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?), (?, 'logo', 'a', ?)", register, t0, register, t0)
	w.down(t, 1, w.wish(t, footer("footer"), 1, text(strings.Repeat("x", 41)), nil))
	w.offerNow(t)
	if _, state, reason := w.held(t, footer("footer")); state != WishRefused || reason != "longer than the printer's 40 characters" {
		t.Fatalf("state %v %q", state, reason)
	}
	w.r.OfferWishes()
	w.offerNow(t)
	w.down(t, 2, w.wish(t, footer("logo"), 1, text("b"), nil))
	w.offerNow(t)
	if n := calls.Load(); n != 1 {
		t.Fatalf("the refused wish was offered %d times", n)
	}
	if value, at := w.setting(t, "footer"); value != "Thanks" || !at.Equal(t0) {
		t.Fatalf("the row holds %q at %v", value, at)
	}
	if st, err := w.r.Status(context.Background()); err != nil || st.Wishes != (WishCounts{Refused: 1, Applied: 1}) {
		t.Fatalf("Status.Wishes = %+v, %v", st.Wishes, err)
	}
}

// Later(why): the wish stays WAITING with that reason, and is offered
// again on OfferWishes; then Applied.
func TestWishLaterWaitsThenOfferWishesAppliesIt(t *testing.T) {
	t.Parallel()
	var on atomic.Bool
	w := newWishShop(t, sqlitetest.Modernc(), handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome {
		if !on.Load() {
			return Later("the printer is off")
		}
		return Applied()
	}), nil, func(s *Settings) { s.WishesEvery = time.Hour })
	mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
	w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci !"), nil))
	w.offerNow(t)
	if a := w.answer(t, footer("footer"), 1, WishWaiting); !a.recorded || a.reason != "the printer is off" {
		t.Fatalf("answer %+v", a)
	}
	// Run offers it again as it starts, and then only when asked: the
	// message's request for a pass was made above.
	w.settle()
	runReplica(t, w.r)
	if a := w.answer(t, footer("footer"), 1, WishWaiting); a.recorded {
		t.Fatalf("answer at start %+v", a)
	}
	if _, state, reason := w.held(t, footer("footer")); state != WishWaiting || reason != "the printer is off" {
		t.Fatalf("state %v %q", state, reason)
	}
	if value, _ := w.setting(t, "footer"); value != "Thanks" {
		t.Fatalf("the row holds %q while the wish waits", value)
	}
	on.Store(true)
	w.r.OfferWishes()
	if a := w.answer(t, footer("footer"), 1, WishApplied); !a.recorded {
		t.Fatalf("answer %+v after OfferWishes", a)
	}
	if value, _ := w.setting(t, "footer"); value != "Merci !" {
		t.Fatalf("the row holds %q", value)
	}
}

// A wish that waits is offered again every WishesEvery, and at start.
func TestWishWaitingIsOfferedAgainEveryWishesEveryAndAtStart(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	clock := newFakeClock()
	w := newWishShop(t, sqlitetest.Modernc(), handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome {
		if calls.Add(1) < 3 {
			return Later("the printer is off")
		}
		return Applied()
	}), nil, func(s *Settings) {
		s.Clock = clock
		s.Idle = time.Hour
		s.WishesEvery = 7 * time.Minute
	})
	mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
	w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci !"), nil))
	w.offerNow(t) // waits
	w.settle()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.r.runWishes(ctx) }()
	defer func() { cancel(); <-done }()
	// At start: offered again, still waiting (the same answer: not
	// recorded again), and the loop waits WishesEvery.
	if a := w.answer(t, footer("footer"), 1, WishWaiting); a.recorded {
		t.Fatalf("answer at start %+v", a)
	}
	for d := range clock.waits {
		if d == 7*time.Minute {
			break
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("offered %d times by the start", n)
	}
	clock.fireAll()
	if a := w.answer(t, footer("footer"), 1, WishApplied); !a.recorded {
		t.Fatalf("answer %+v", a)
	}
}

// IfUnchanged with a local edit first: the answer is SUPERSEDED without
// offering, and the local value stands. At the version based on, the wish
// is carried out and the integer version moves on by one.
func TestWishIfUnchangedAfterALocalEditIsSupersededAndTheLocalValueStands(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	w := newWishShop(t, sqlitetest.Modernc(), nil, handlerFunc[Knob](func(context.Context, Wish[Knob]) Outcome {
		calls.Add(1)
		return Applied()
	}), nil)
	mustExec(t, w.r.db, "INSERT INTO knobs VALUES (?, 'volume', 3, 1), (?, 'bass', 3, 1)", register, register)
	mustExec(t, w.r.db, "UPDATE knobs SET level = 4, version = 2 WHERE name = 'volume'") // the technician
	v1 := integer(1)
	w.down(t, 1, w.wish(t, knob("volume"), 1, integer(7), &v1), w.wish(t, knob("bass"), 1, integer(7), &v1))
	w.offerNow(t)
	if _, state, reason := w.held(t, knob("volume")); state != WishSuperseded || !strings.Contains(reason, "changed since") {
		t.Fatalf("volume: %v %q", state, reason)
	}
	if level, version := w.knob(t, "volume"); level != 4 || version != 2 {
		t.Fatalf("volume holds %d at version %d; want the local 4 at 2", level, version)
	}
	if _, state, _ := w.held(t, knob("bass")); state != WishApplied {
		t.Fatalf("bass: %v", state)
	}
	if level, version := w.knob(t, "bass"); level != 7 || version != 2 {
		t.Fatalf("bass holds %d at version %d; want 7 at 2", level, version)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the handler was offered %d wishes; want only bass's", n)
	}
}

// Always with a local edit first: the wish wins.
func TestWishAlwaysWinsOverALocalEditMadeBeforeIt(t *testing.T) {
	t.Parallel()
	w := newWishShop(t, sqlitetest.Modernc(), nil, nil, nil)
	mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
	t1 := t0.Add(time.Hour)
	mustExec(t, w.r.db, "UPDATE settings SET value = 'Local', changed_at = ? WHERE name = 'footer'", t1)
	based := wire.TimeValue(t0.UnixMicro())
	w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci !"), &based))
	w.offerNow(t)
	if value, at := w.setting(t, "footer"); value != "Merci !" || !at.After(t1) {
		t.Fatalf("the row holds %q at %v; want the wish's value after %v", value, at, t1)
	}
}

// A panic or a timeout leaves the wish WAITING with a reason saying so;
// one wish's trouble never holds back another's.
func TestWishPanicAndTimeoutWaitAndHoldBackNoOtherWish(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	w := newWishShop(t, sqlitetest.Modernc(), handlerFunc[Setting](func(_ context.Context, wish Wish[Setting]) Outcome {
		switch wish.Wanted.Name {
		case "panics":
			panic("the module fell over")
		case "hangs":
			<-release // ignores its context: the bound holds all the same
			return Applied()
		}
		return Applied()
	}), nil, func(s *Settings) { s.WishesTimeout = 100 * time.Millisecond })
	t.Cleanup(func() { close(release) })
	for _, n := range []string{"panics", "hangs", "fine"} {
		mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, ?, 'a', ?)", register, n, t0)
	}
	w.down(t, 1, w.wish(t, footer("panics"), 1, text("b"), nil), w.wish(t, footer("hangs"), 1, text("b"), nil), w.wish(t, footer("fine"), 1, text("b"), nil))
	w.offerNow(t)
	if _, state, reason := w.held(t, footer("panics")); state != WishWaiting || !strings.Contains(reason, "panicked: the module fell over") {
		t.Fatalf("panics: %v %q", state, reason)
	}
	if _, state, reason := w.held(t, footer("hangs")); state != WishWaiting || !strings.Contains(reason, "did not answer within 100ms") {
		t.Fatalf("hangs: %v %q", state, reason)
	}
	if _, state, _ := w.held(t, footer("fine")); state != WishApplied {
		t.Fatalf("fine: %v", state)
	}
	if value, _ := w.setting(t, "fine"); value != "b" {
		t.Fatalf("fine holds %q", value)
	}
}

// A wish replaced while its handler runs: the late answer of the older wish
// is dropped, and the newer is carried out.
func TestNewerWishWhileTheOlderRunsIsCarriedOutAndTheOlderAnswerIgnored(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	w := newWishShop(t, sqlitetest.Modernc(), handlerFunc[Setting](func(_ context.Context, wish Wish[Setting]) Outcome {
		if wish.Number == 1 {
			close(started)
			<-release
		}
		return Applied()
	}), nil, nil)
	mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
	runReplica(t, w.r)
	w.down(t, 1, w.wish(t, footer("footer"), 1, text("first"), nil))
	<-started
	w.down(t, 2, w.wish(t, footer("footer"), 2, text("second"), nil))
	close(release)
	if a := w.answer(t, footer("footer"), 1, WishApplied); a.recorded {
		t.Fatalf("the older wish's late answer was recorded: %+v", a)
	}
	if a := w.answer(t, footer("footer"), 2, WishApplied); !a.recorded {
		t.Fatalf("the newer wish: %+v", a)
	}
	if value, _ := w.setting(t, "footer"); value != "second" {
		t.Fatalf("the row holds %q; want the newer wish's value", value)
	}
	if n, state, _ := w.held(t, footer("footer")); n != 2 || state != WishApplied {
		t.Fatalf("held wish %d %v", n, state)
	}
}

// A newer wish number of a row replaces the older (and clears its answer);
// an older or equal number changes nothing.
func TestNewerWishReplacesTheOlderAndAnOlderNumberChangesNothing(t *testing.T) {
	t.Parallel()
	w := newWishShop(t, sqlitetest.Modernc(), handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome { return Later("off") }), nil, nil)
	mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
	w.down(t, 1, w.wish(t, footer("footer"), 3, text("three"), nil))
	w.offerNow(t)
	if _, state, _ := w.held(t, footer("footer")); state != WishWaiting {
		t.Fatalf("state %v", state)
	}
	w.down(t, 2, w.wish(t, footer("footer"), 2, text("two"), nil), w.wish(t, footer("logo"), 0, text("x"), nil))
	w.down(t, 3, w.wish(t, footer("footer"), 3, text("three again"), nil))
	if n, state, _ := w.held(t, footer("footer")); n != 3 || state != WishWaiting {
		t.Fatalf("after older and equal numbers: wish %d %v", n, state)
	}
	w.down(t, 4, w.wish(t, footer("footer"), 4, text("four"), nil))
	if n, state, reason := w.held(t, footer("footer")); n != 4 || state != WishPending || reason != "" {
		t.Fatalf("after a newer number: wish %d %v %q", n, state, reason)
	}
}

// Withdrawn deletes the wish: it is not offered again.
func TestWithdrawnWishIsDeletedAndNotOfferedAgain(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	w := newWishShop(t, sqlitetest.Modernc(), handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome {
		calls.Add(1)
		return Later("off")
	}), nil, nil)
	mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
	w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci !"), nil))
	w.offerNow(t)
	got := w.down(t, 2, &syncpb.Wish{Table: "settings", Key: []byte(keyOf(t, w.r.codecs, footer("footer"))), Withdrawn: true})
	if got.Rejected != 0 {
		t.Fatalf("%d rows left out", got.Rejected)
	}
	if n := count(t, w.r.db, "SELECT count(*) FROM sync_wishes"); n != 0 {
		t.Fatalf("%d wishes held after the withdrawal", n)
	}
	w.offerNow(t)
	if n := calls.Load(); n != 1 {
		t.Fatalf("offered %d times", n)
	}
}

// A wish of a row not held waits, and is offered again once a message
// brings the row (here: once the row is written, with the next message).
func TestWishOfARowNotYetHeldWaitsForTheRow(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	w := newWishShop(t, sqlitetest.Modernc(), handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome {
		calls.Add(1)
		return Applied()
	}), nil, nil)
	runReplica(t, w.r)
	w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci !"), nil))
	if a := w.answer(t, footer("footer"), 1, WishWaiting); !strings.Contains(a.reason, "holds no such row") {
		t.Fatalf("answer %+v", a)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the handler was offered a wish of a row not held")
	}
	mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
	w.receive(t, &syncpb.ToReplica{Id: 2, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Tables: []*syncpb.TableChanges{w.b.upserts(product(1, 100))}}}})
	if a := w.answer(t, footer("footer"), 1, WishApplied); !a.recorded {
		t.Fatalf("answer %+v once the row is held", a)
	}
	if value, _ := w.setting(t, "footer"); value != "Merci !" {
		t.Fatalf("the row holds %q", value)
	}
}

// A write the database refuses (a CHECK) answers REFUSED with the
// database's message; the row stays as it was.
func TestWishTheDatabaseRefusesIsRefusedWithItsReason(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		w := newWishShop(t, d, nil, nil, nil)
		mustExec(t, w.r.db, "INSERT INTO knobs VALUES (?, 'volume', 3, 1)", register)
		w.down(t, 1, w.wish(t, knob("volume"), 1, integer(42), nil))
		w.offerNow(t)
		_, state, reason := w.held(t, knob("volume"))
		if state != WishRefused || !strings.Contains(reason, "CHECK constraint failed") {
			t.Fatalf("state %v %q", state, reason)
		}
		if level, version := w.knob(t, "volume"); level != 3 || version != 1 {
			t.Fatalf("the row holds %d at %d", level, version)
		}
		if n := count(t, w.r.db, "SELECT count(*) FROM sync_pending WHERE tbl = 'knobs' AND change > 1"); n != 0 {
			t.Fatal("the refused write was noted as the replica's own")
		}
	})
}

// replica.New refuses a setting table with no handler, naming the table
// and saying how to fix it; and a handler for a table that is not a
// declared setting.
func TestNewRefusesASettingWithoutAHandlerAndAHandlerOfNoSetting(t *testing.T) {
	t.Parallel()
	db := shopDB(t, sqlitetest.Modernc())
	for _, tc := range []struct {
		name   string
		wishes Wishes
		want   []string
	}{
		{"none", nil, []string{`setting table "settings" has no wish handler`, "Settings.Wishes", "Direct"}},
		{"a record", Wishes{Handle(Direct[Setting]{}), Handle(Direct[Receipt]{})}, []string{`table "receipts", a record: only settings take wishes`}},
		{"undeclared", Wishes{Handle(Direct[Setting]{}), Handle(Direct[Knob]{})}, []string{"replica.Knob, which is not a declared row type"}},
		{"twice", Wishes{Handle(Direct[Setting]{}), Handle(Direct[*Setting]{})}, []string{`"settings" has two handlers`}},
		{"nil", Wishes{Handle[Setting](nil)}, []string{"nil CarryOut"}},
	} {
		s := quietSettings()
		s.Wishes = tc.wishes
		_, err := New(context.Background(), db, shopCodecs(t), Me(register), newRecorder(), s)
		if err == nil {
			t.Fatalf("%s: New took it", tc.name)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant it to say %q", tc.name, err, w)
			}
		}
	}
}

// A handler is offered a wish only after the message that brought it
// committed, with no transaction open: it sees the message applied, and
// may write the database itself.
func TestWishIsOfferedOnlyAfterItsMessageCommitted(t *testing.T) {
	t.Parallel()
	var w *wishShop
	w = newWishShop(t, sqlitetest.Modernc(), handlerFunc[Setting](func(ctx context.Context, wish Wish[Setting]) Outcome {
		var last uint64
		if err := w.r.db.QueryRowContext(ctx, "SELECT last_applied FROM sync_replica").Scan(&last); err != nil || last != 7 {
			return Refused("the message was not committed")
		}
		conn, err := w.r.db.Conn(ctx)
		if err != nil {
			return Refused(err.Error())
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return Refused("a write transaction is open: " + err.Error())
		}
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			return Refused(err.Error())
		}
		return Applied()
	}), nil, func(s *Settings) { s.WishesTimeout = time.Minute })
	mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
	runReplica(t, w.r)
	w.down(t, 7, w.wish(t, footer("footer"), 1, text("Merci !"), nil))
	if a := w.answer(t, footer("footer"), 1, WishApplied); !a.recorded {
		t.Fatalf("answer %+v", a)
	}
}

// Answers go up in the main lane's Up (state, reason, answered_at in UTC
// microseconds), are confirmed by Filed like reports, and are sent again
// after ResendAfter when unconfirmed.
func TestAnswersGoUpAndFiledConfirmsThem(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	w := newWishShop(t, sqlitetest.Modernc(), handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome {
		return Refused("out of range")
	}), nil, func(s *Settings) { s.Clock = clock; s.ResendAfter = time.Minute })
	ctx := context.Background()
	main := w.r.lane("main")
	mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
	if _, err := w.r.sendOnce(ctx, main); err != nil {
		t.Fatal(err)
	}
	w.up.took(t)
	w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci !"), nil))
	w.offerNow(t)
	key := string(keyOf(t, w.r.codecs, footer("footer")))
	if _, err := w.r.sendOnce(ctx, main); err != nil {
		t.Fatal(err)
	}
	m := w.up.took(t)
	a := answersOf(m.msg.Up)[key]
	if a == nil || a.Table != "settings" || a.Wish != 1 || a.State != syncpb.WishState_WISH_STATE_REFUSED || a.Reason != "out of range" || a.AnsweredAt != clock.Now().UnixMicro() {
		t.Fatalf("answers %v", m.msg.Up.GetAnswers())
	}
	// Unconfirmed: sent again after ResendAfter, not before.
	if more, err := w.r.sendOnce(ctx, main); err != nil || more {
		t.Fatal(more, err)
	}
	select {
	case s := <-w.up.got:
		t.Fatalf("sent again before ResendAfter: %v", s.msg.Up)
	default:
	}
	clock.mu.Lock()
	clock.now = clock.now.Add(2 * time.Minute)
	clock.mu.Unlock()
	if _, err := w.r.sendOnce(ctx, main); err != nil {
		t.Fatal(err)
	}
	again := w.up.took(t)
	if answersOf(again.msg.Up)[key] == nil {
		t.Fatalf("not sent again after ResendAfter: %v", again.msg.Up)
	}
	w.receive(t, &syncpb.ToReplica{Id: 2, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Lane: "main", Sequence: again.msg.Sequence}}})
	if n := count(t, w.r.db, "SELECT count(*) FROM sync_wishes WHERE filed = 1"); n != 1 {
		t.Fatalf("%d answers filed", n)
	}
	clock.mu.Lock()
	clock.now = clock.now.Add(time.Hour)
	clock.mu.Unlock()
	if say, err := w.r.anythingToSay(ctx, main, clock.Now()); err != nil || say {
		t.Fatalf("something left to say once the answer was filed: %v %v", say, err)
	}
}

// A Down with snapshot set stages its wishes; EndSnapshot: staged wishes
// replace the wishes held (a wish held under the same number keeps its
// answer), and every answer held is marked to be sent again.
func TestEndSnapshotReplacesTheWishesWithTheStagedAndSendsTheAnswersAgain(t *testing.T) {
	t.Parallel()
	w := newWishShop(t, sqlitetest.Modernc(), handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome {
		return Refused("no")
	}), nil, nil)
	ctx := context.Background()
	main := w.r.lane("main")
	for _, n := range []string{"kept", "gone", "new"} {
		mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, ?, 'a', ?)", register, n, t0)
	}
	w.down(t, 1, w.wish(t, footer("kept"), 1, text("b"), nil), w.wish(t, footer("gone"), 1, text("b"), nil))
	w.offerNow(t)
	if _, err := w.r.sendOnce(ctx, main); err != nil {
		t.Fatal(err)
	}
	m := w.up.took(t)
	w.receive(t, &syncpb.ToReplica{Id: 2, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Lane: "main", Sequence: m.msg.Sequence}}})
	if n := count(t, w.r.db, "SELECT count(*) FROM sync_wishes WHERE filed = 1"); n != 2 {
		t.Fatalf("%d answers filed", n)
	}
	got := w.receive(t, &syncpb.ToReplica{Id: 3, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Snapshot: 3,
		Wishes: []*syncpb.Wish{w.wish(t, footer("kept"), 1, text("b"), nil), w.wish(t, footer("new"), 1, text("c"), nil)}}}})
	if !got.Staged || count(t, w.r.db, "SELECT count(*) FROM sync_wishes") != 2 || count(t, w.r.db, "SELECT count(*) FROM sync_staged_wishes") != 2 {
		t.Fatal("the snapshot's wishes were not staged apart")
	}
	w.receive(t, &syncpb.ToReplica{Id: 4, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{Snapshot: 3,
		Answers: []*syncpb.WishRef{{Table: "settings", Key: []byte(keyOf(t, w.r.codecs, footer("kept"))), Wish: 1}}}}})
	if _, state, reason := w.held(t, footer("kept")); state != WishRefused || reason != "no" {
		t.Fatalf("kept: %v %q", state, reason)
	}
	if _, state, _ := w.held(t, footer("new")); state != WishPending {
		t.Fatalf("new: %v", state)
	}
	if n := count(t, w.r.db, "SELECT count(*) FROM sync_wishes WHERE tbl = 'settings' AND key = ?", []byte(keyOf(t, w.r.codecs, footer("gone")))); n != 0 {
		t.Fatal("a wish the snapshot did not stage is still held")
	}
	if n := count(t, w.r.db, "SELECT count(*) FROM sync_staged_wishes"); n != 0 {
		t.Fatalf("%d staged wishes left", n)
	}
	// The answer goes again, in an Up of its own marked resent.
	var again *syncpb.Up
	for again == nil {
		more, err := w.r.sendOnce(ctx, main)
		if err != nil {
			t.Fatal(err)
		}
		if up := w.up.took(t).msg.Up; len(up.GetAnswers()) > 0 {
			again = up
		} else if !more {
			t.Fatal("the answer was not sent again")
		}
	}
	a := answersOf(again)[string(keyOf(t, w.r.codecs, footer("kept")))]
	if !again.Resent || len(again.Answers) != 1 || a == nil || a.State != syncpb.WishState_WISH_STATE_REFUSED {
		t.Fatalf("resent %v, answers %v", again.Resent, again.Answers)
	}
}

// A replica whose build has no handler for a wish's table sets the wish
// aside: it holds it, answered waiting with the reason, until a build that
// carries it out runs — not as a row it cannot take, which nothing would
// clear once such a build carried it out.
func TestWishOfATableWithoutAHandlerIsSetAside(t *testing.T) {
	t.Parallel()
	w := newWishShop(t, sqlitetest.Modernc(), nil, nil, nil)
	key := wire.AppendTuple(nil, []codec.Value{wire.TextValue("d1")})
	got := w.down(t, 1, &syncpb.Wish{Table: "drawers", Key: key, Wish: 1, Columns: []string{"open"}, Wanted: wire.AppendTuple(nil, []codec.Value{wire.BoolValue(true)})},
		&syncpb.Wish{Table: "receipts", Key: key, Wish: 1, Columns: []string{"note"}, Wanted: wire.AppendTuple(nil, []codec.Value{wire.TextValue("x")})})
	if got.Rejected != 0 {
		t.Fatalf("%d rows left out; want the wishes held, set aside", got.Rejected)
	}
	st, err := w.r.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Rejected) != 0 || st.Wishes.Waiting != 2 {
		t.Fatalf("Status: rejected %+v, wishes %+v; want the 2 wishes waiting", st.Rejected, st.Wishes)
	}
	for table, want := range map[string]string{"drawers": `table "drawers", which this build of the replica does not declare`, "receipts": "only settings take wishes"} {
		var state WishState
		var reason string
		if err := w.r.db.QueryRow("SELECT state, reason FROM sync_wishes WHERE tbl = ?", table).Scan(&state, &reason); err != nil {
			t.Fatal(err)
		}
		if state != WishWaiting || !strings.Contains(reason, want) || !strings.Contains(reason, "waits for a build that carries it out") {
			t.Errorf("the wish of %s stands %v %q; want waiting, saying %q", table, state, reason, want)
		}
	}
	if _, err := w.r.sendOnce(context.Background(), w.r.lane("main")); err != nil {
		t.Fatal(err)
	}
	if up := w.up.took(t).msg.Up; len(up.Answers) != 2 || up.Answers[0].State != syncpb.WishState_WISH_STATE_WAITING {
		t.Fatalf("answers sent %v; want the 2 waiting", up.Answers)
	}
}

// Run, stopping, ends the handlers' context and waits for them: the answer
// of a handler that honours it is recorded.
func TestRunStoppingWaitsForTheHandlersAndRecordsTheirAnswers(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	w := newWishShop(t, sqlitetest.Modernc(), handlerFunc[Setting](func(ctx context.Context, wish Wish[Setting]) Outcome {
		close(started)
		<-ctx.Done() // the printer took the footer as Run stopped
		return Applied()
	}), nil, func(s *Settings) { s.WishesTimeout = time.Minute })
	mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
	w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci !"), nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.r.Run(ctx) }()
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, state, _ := w.held(t, footer("footer")); state != WishApplied {
		t.Fatalf("state %v once Run returned", state)
	}
	if value, _ := w.setting(t, "footer"); value != "Merci !" {
		t.Fatalf("the row holds %q", value)
	}
}
