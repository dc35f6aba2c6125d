package replica

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Dial is a setting with a generated column between its key and its
// desired column: the generated one never goes up, nor into its digest.
type Dial struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Name       string    `db:"name" sync:"key"`
	Shown      string    `db:"shown" sync:"generated"`
	Level      int64     `db:"level" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

func (Dial) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "dials", Mirror: magicsync.Setting, Origin: "register_id"}
}

const dialSchema = `CREATE TABLE dials (register_id TEXT NOT NULL, name TEXT NOT NULL,
	shown TEXT GENERATED ALWAYS AS (upper(name)) VIRTUAL, level INTEGER NOT NULL, changed_at TIMESTAMP NOT NULL,
	PRIMARY KEY (register_id, name));`

// newDialShop is a replica of the shop with dials, whose digests are due
// every hour of clock, and whose unconfirmed rows are never sent again
// within the test.
func newDialShop(t *testing.T, d sqlitetest.Driver, clock *fakeClock) (*Replica, *recorder) {
	t.Helper()
	db := sqlitetest.Open(t, d)
	mustExec(t, db, shopSchema)
	mustExec(t, db, dialSchema)
	c, err := magicsync.NewCodecs(Product{}, Image{}, Receipt{}, Position{}, Setting{}, Dial{})
	if err != nil {
		t.Fatal(err)
	}
	if err := Install(context.Background(), db, c); err != nil {
		t.Fatal(err)
	}
	s := quietSettings()
	s.Wishes = Wishes{Handle(Direct[Setting]{}), Handle(Direct[Dial]{})}
	s.Clock, s.DigestsEvery, s.ResendAfter = clock, time.Hour, 1000*time.Hour
	up := newRecorder()
	r, err := New(context.Background(), db, c, Me(register), up, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, up
}

// sendDue makes the digests due, has the main lane send, and returns the
// message it sent.
func sendDue(t testing.TB, r *Replica, up *recorder, clock *fakeClock) *syncpb.ToServer {
	t.Helper()
	clock.advance(time.Hour)
	if _, err := r.sendOnce(context.Background(), r.lane("main")); err != nil {
		t.Fatal(err)
	}
	return up.took(t).msg
}

// digestOf is the digest of table an Up carries, or nil.
func digestOf(up *syncpb.Up, table string) *syncpb.Digest {
	var out *syncpb.Digest
	for _, d := range up.GetDigests() {
		if d.Table == table {
			if out != nil {
				return &syncpb.Digest{Table: "named twice"}
			}
			out = d
		}
	}
	return out
}

// upDigest is the digest the server computes of rows of an own table: the
// tuples of the columns that go up, every one but the generated ones, in
// declaration order.
func upDigest(t testing.TB, c *magicsync.Codecs, rows ...magicsync.Declarer) digest.Sum {
	t.Helper()
	var sum digest.Sum
	for _, row := range rows {
		tc, err := c.Of(row)
		if err != nil {
			t.Fatal(err)
		}
		var up []int
		for i, col := range tc.Columns {
			if !col.Generated {
				up = append(up, i)
			}
		}
		vals, err := tc.Values(row, nil)
		if err != nil {
			t.Fatal(err)
		}
		sum.Add(tc.EncodeRow(nil, vals, up))
	}
	return sum
}

// checkDigest fails the test unless d is want, its row count the sum's,
// as of message asOf.
func checkDigest(t testing.TB, d *syncpb.Digest, want digest.Sum, asOf uint64) {
	t.Helper()
	switch {
	case d == nil:
		t.Fatalf("no digest; want one of %d rows", want.Rows())
	case string(d.Sum) != string(want.Bytes()):
		t.Fatalf("digest of %s = %x (%d rows); want %x (%d rows)", d.Table, d.Sum, d.Rows, want.Bytes(), want.Rows())
	case d.Rows != want.Rows():
		t.Fatalf("digest of %s counts %d rows; its sum counts %d", d.Table, d.Rows, want.Rows())
	case d.AsOf != asOf:
		t.Fatalf("digest of %s as of message %d; want %d", d.Table, d.AsOf, asOf)
	}
}

// A setting's digest adds the tuples of its columns that go up — the same
// bytes as the rows the replica uploads, and as the server's tuples over
// its non-generated columns — once its rows are confirmed.
func TestSettingDigestIsTheTuplesOfTheColumnsThatGoUp(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		clock := newFakeClock()
		r, up := newDialShop(t, d, clock)
		ctx := context.Background()
		b := builder{t, r.codecs}
		volume := Dial{RegisterID: register, Name: "volume", Shown: "VOLUME", Level: 7, ChangedAt: t0}
		bright := Dial{RegisterID: register, Name: "brightness", Shown: "BRIGHTNESS", Level: -2, ChangedAt: t0.Add(time.Second)}
		for _, dl := range []Dial{volume, bright} {
			mustExec(t, r.db, "INSERT INTO dials (register_id, name, level, changed_at) VALUES (?, ?, ?, ?)", dl.RegisterID, dl.Name, dl.Level, dl.ChangedAt)
		}
		first := sendDue(t, r, up, clock)
		uploaded := tableOf(first.Up, "dials")
		if uploaded == nil || len(uploaded.Upserts) != 2 {
			t.Fatalf("the dials did not go up: %v", first.Up)
		}
		if _, err := r.Endpoint().Receive(ctx, b.filed(1, "main", first.Sequence)); err != nil {
			t.Fatal(err)
		}
		got := digestOf(sendDue(t, r, up, clock).Up, "dials")
		want := upDigest(t, r.codecs, volume, bright)
		checkDigest(t, got, want, 1)
		var sent digest.Sum
		for _, tuple := range uploaded.Upserts {
			sent.Add(tuple)
		}
		if string(sent.Bytes()) != string(got.Sum) {
			t.Fatalf("the digest %x is not that of the tuples uploaded, %x", got.Sum, sent.Bytes())
		}
		// The other setting holds no row: its digest is that of none.
		checkDigest(t, digestOf(sendDue(t, r, up, clock).Up, "settings"), digest.Sum{}, 1)
	})
}

// While a row of a setting is on its way up — written and unsent, or sent
// and unconfirmed — the server's copy differs as it should, and the
// setting goes without a digest; the other digests go all the same. Once
// the server refused it for good, it waits in the backlog, set aside, and
// the setting's digest goes again, without it.
func TestSettingDigestWaitsWhileARowIsOnItsWayUp(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		clock := newFakeClock()
		r, up := newDialShop(t, d, clock)
		ctx := context.Background()
		b := builder{t, r.codecs}
		mustExec(t, r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
		noSettingDigest := func(m *syncpb.ToServer, when string) {
			t.Helper()
			if digestOf(m.Up, "settings") != nil {
				t.Fatalf("%s: the settings' digest went up: %v", when, m.Up.Digests)
			}
			if digestOf(m.Up, "products") == nil || digestOf(m.Up, "dials") == nil {
				t.Fatalf("%s: the other digests did not go up: %v", when, m.Up.Digests)
			}
		}
		unsent := sendDue(t, r, up, clock)
		if tableOf(unsent.Up, "settings") == nil {
			t.Fatalf("the setting did not go up with the digests: %v", unsent.Up)
		}
		noSettingDigest(unsent, "the row unsent as the digests were taken")
		noSettingDigest(sendDue(t, r, up, clock), "the row sent and unconfirmed")
		if _, err := r.Endpoint().Receive(ctx, b.filed(1, "main", unsent.Sequence)); err != nil {
			t.Fatal(err)
		}
		footer := Setting{RegisterID: register, Name: "footer", Value: "Thanks", ChangedAt: t0}
		checkDigest(t, digestOf(sendDue(t, r, up, clock).Up, "settings"), upDigest(t, r.codecs, footer), 1)

		// Written again, and refused: it waits in the backlog.
		mustExec(t, r.db, "UPDATE settings SET value = 'Merci' WHERE name = 'footer'")
		again := sendDue(t, r, up, clock)
		noSettingDigest(again, "the row written again")
		refused := &syncpb.Rejected{Table: "settings", Key: []byte(keyOf(t, r.codecs, footer)), Reason: "no such register"}
		if _, err := r.Endpoint().Receive(ctx, b.filed(2, "main", again.Sequence, refused)); err != nil {
			t.Fatal(err)
		}
		if n := count(t, r.db, "SELECT count(held) FROM sync_pending"); n != 1 {
			t.Fatalf("%d rows held; want the refused one", n)
		}
		checkDigest(t, digestOf(sendDue(t, r, up, clock).Up, "settings"), digest.Sum{}, 2)
	})
}

// The answers' digest adds the answers the server confirmed, as
// codec.AnswerTuple has them, and leaves out the wishes not answered yet;
// while an answer is unsent or unconfirmed it does not go at all.
func TestAnswersDigestCoversConfirmedAnswersOnly(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		clock := newFakeClock()
		w := newWishShop(t, d, handlerFunc[Setting](func(_ context.Context, wish Wish[Setting]) Outcome {
			if wish.Wanted.Name == "logo" {
				return Refused("no logo on this printer")
			}
			return Applied()
		}), nil, func(s *Settings) {
			s.Clock, s.DigestsEvery, s.ResendAfter = clock, time.Hour, 1000*time.Hour
		})
		r, up := w.r, w.up
		ctx := context.Background()
		mustExec(t, r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?), (?, 'logo', 'a', ?)", register, t0, register, t0)
		mustExec(t, r.db, "INSERT INTO knobs VALUES (?, 'volume', 3, 1)", register)
		rowsUp := sendDue(t, r, up, clock)
		checkDigest(t, digestOf(rowsUp.Up, codec.AnswersTable), digest.Sum{}, 0)
		if _, err := r.Endpoint().Receive(ctx, w.b.filed(1, "main", rowsUp.Sequence)); err != nil {
			t.Fatal(err)
		}

		// Wishes not answered yet are no answers.
		w.down(t, 2, w.wish(t, footer("footer"), 1, text("Merci"), nil), w.wish(t, footer("logo"), 4, text("b"), nil))
		checkDigest(t, digestOf(sendDue(t, r, up, clock).Up, codec.AnswersTable), digest.Sum{}, 2)

		w.offerNow(t)
		if _, state, _ := w.held(t, footer("logo")); state != WishRefused {
			t.Fatalf("the logo's wish is %v; want refused", state)
		}
		answersUp := sendDue(t, r, up, clock)
		if len(answersUp.Up.Answers) != 2 {
			t.Fatalf("answers sent: %v; want both", answersUp.Up.Answers)
		}
		if dg := digestOf(answersUp.Up, codec.AnswersTable); dg != nil {
			t.Fatalf("the answers' digest went up with the answers unsent as it was taken: %v", dg)
		}
		if dg := digestOf(sendDue(t, r, up, clock).Up, codec.AnswersTable); dg != nil {
			t.Fatalf("the answers' digest went up with the answers unconfirmed: %v", dg)
		}
		if _, err := r.Endpoint().Receive(ctx, w.b.filed(3, "main", answersUp.Sequence)); err != nil {
			t.Fatal(err)
		}

		// A wish of the knob comes, not answered yet: left out.
		w.down(t, 4, w.wish(t, knob("volume"), 9, integer(5), nil))
		var want digest.Sum
		want.Add(codec.AnswerTuple("settings", []byte(keyOf(t, r.codecs, footer("footer"))), 1, int(WishApplied)))
		want.Add(codec.AnswerTuple("settings", []byte(keyOf(t, r.codecs, footer("logo"))), 4, int(WishRefused)))
		m := sendDue(t, r, up, clock)
		checkDigest(t, digestOf(m.Up, codec.AnswersTable), want, 4)
		if len(m.Up.Answers) != 0 {
			t.Fatalf("answers sent again: %v", m.Up.Answers)
		}
	})
}

// An answer held after the server refused its message for good is not on
// the server either: the answers' digest waits for it as for one on its
// way up.
func TestAnswersDigestWaitsForAnAnswerSetAside(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	w := newWishShop(t, sqlitetest.Modernc(), nil, nil, func(s *Settings) {
		s.Clock, s.DigestsEvery, s.ResendAfter = clock, time.Hour, 1000*time.Hour
	})
	mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
	w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci"), nil))
	w.offerNow(t)
	if _, state, _ := w.held(t, footer("footer")); state != WishApplied {
		t.Fatalf("the wish is %v; want applied", state)
	}
	// As send does when the server refuses a message for good.
	asEngine(t, w.r.db, "UPDATE sync_wishes SET held = ?", w.r.build)
	m := sendDue(t, w.r, w.up, clock)
	if len(m.Up.Answers) != 0 {
		t.Fatalf("the answer set aside went up: %v", m.Up.Answers)
	}
	if dg := digestOf(m.Up, codec.AnswersTable); dg != nil {
		t.Fatalf("the answers' digest went up with an answer set aside: %v", dg)
	}
}
