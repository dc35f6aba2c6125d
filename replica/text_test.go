package replica

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Text that comes from outside the engine — a handler's reason, a panic's
// message, a database's error, a build's name, an own row's key — may hold
// bytes that are not UTF-8 (protobuf refuses to encode them), a NUL
// (PostgreSQL refuses it) or a megabyte. The replica keeps and sends it
// made safe, so that the message carrying it can always be encoded and
// filed, and its lane goes on.

// unsafeTexts are texts no message may carry as they are.
var unsafeTexts = []struct{ name, text string }{
	{"not UTF-8", "printer status \xff\xfe off"},
	{"NUL", "printer\x00off"},
	{"1 MB", "printer " + strings.Repeat("off ", 1<<18)},
}

// checkSafe fails the test unless s is text a message can carry and
// PostgreSQL can keep, within the bound of a reason.
func checkSafe(t testing.TB, what, s string) {
	t.Helper()
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 || len(s) > safetext.MaxReason {
		t.Errorf("%s is not safe: %.80q (%d bytes)", what, s, len(s))
	}
}

// sendMain sends the main lane's next message, failing the test when it
// cannot, and returns what the uplink took.
func sendMain(t testing.TB, r *Replica, up *recorder) *syncpb.Up {
	t.Helper()
	if _, err := r.sendOnce(context.Background(), r.lane("main")); err != nil {
		t.Fatalf("the main lane could not send: %v", err)
	}
	return up.took(t).msg.Up
}

// A handler's reason — given to Later or Refused, or as a panic's message
// — that is not UTF-8, holds a NUL or runs to a megabyte is recorded made
// safe, and the answer goes up.
func TestAReasonThatIsNotSafeTextIsRecordedSafeAndGoesUp(t *testing.T) {
	t.Parallel()
	answers := []struct {
		name   string
		state  WishState
		answer func(string) Outcome
	}{
		{"Later", WishWaiting, Later},
		{"Refused", WishRefused, Refused},
		{"panic", WishWaiting, func(why string) Outcome { panic(why) }},
	}
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		for _, bad := range unsafeTexts {
			for _, a := range answers {
				t.Run(a.name+" "+bad.name, func(t *testing.T) {
					w := newWishShop(t, d, handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome {
						return a.answer(bad.text)
					}), nil, nil)
					mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
					sendMain(t, w.r, w.up)
					w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci !"), nil))
					w.offerNow(t)
					_, state, reason := w.held(t, footer("footer"))
					if state != a.state || !strings.Contains(reason, "printer") {
						t.Fatalf("the wish stands %v: %.80q", state, reason)
					}
					checkSafe(t, "the reason recorded", reason)
					got := answersOf(sendMain(t, w.r, w.up))[string(keyOf(t, w.r.codecs, footer("footer")))]
					if got == nil || got.Reason != reason {
						t.Fatalf("the answer sent: %v", got)
					}
				})
			}
		}
	})
}

// A database's refusal of a wish's write, whose message is not UTF-8 (a
// host's trigger raising it), refuses the wish with that reason made safe,
// and the answer goes up.
func TestAWishTheDatabaseRefusesWithAMessageNotUTF8IsRefusedWithItSafe(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		w := newWishShop(t, d, nil, nil, nil)
		mustExec(t, w.r.db, "CREATE TRIGGER knob_stuck BEFORE UPDATE OF level ON knobs BEGIN SELECT RAISE(ABORT, 'knob \xff\xfe stuck'); END")
		mustExec(t, w.r.db, "INSERT INTO knobs VALUES (?, 'volume', 3, 1)", register)
		sendMain(t, w.r, w.up)
		w.down(t, 1, w.wish(t, knob("volume"), 1, integer(4), nil))
		w.offerNow(t)
		_, state, reason := w.held(t, knob("volume"))
		if state != WishRefused || !strings.Contains(reason, "stuck") {
			t.Fatalf("the wish stands %v: %q", state, reason)
		}
		checkSafe(t, "the reason recorded", reason)
		if got := answersOf(sendMain(t, w.r, w.up))[string(keyOf(t, w.r.codecs, knob("volume")))]; got == nil || got.Reason != reason {
			t.Fatalf("the answer sent: %v", got)
		}
	})
}

// A row of the server's that the database refuses with a message that is
// not UTF-8 is left out and reported with the message made safe.
func TestARowRefusedWithAMessageNotUTF8IsReportedWithItSafe(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := shopDB(t, d)
		mustExec(t, db, "CREATE TRIGGER no_freebies BEFORE INSERT ON products WHEN NEW.price_cents = 0 BEGIN SELECT RAISE(ABORT, 'free \xff\xfe products'); END")
		up := newRecorder()
		r, err := New(context.Background(), db, shopCodecs(t), Me(register), up, quietSettings())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		b := builder{t: t, codecs: r.codecs}
		free := Product{ID: uuid.New(), Name: "free", UpdatedAt: t0}
		if _, err := r.Endpoint().Receive(context.Background(), b.down(1, b.upserts(free, Product{ID: uuid.New(), Name: "tea", PriceCents: 250, UpdatedAt: t0}))); err != nil {
			t.Fatal(err)
		}
		var reason string
		if err := db.QueryRow("SELECT reason FROM sync_rejected").Scan(&reason); err != nil {
			t.Fatal(err)
		}
		checkSafe(t, "the reason recorded", reason)
		sent := sendMain(t, r, up)
		if len(sent.Rejected) != 1 || !strings.Contains(sent.Rejected[0].Reason, "products") {
			t.Fatalf("reported %v", sent.Rejected)
		}
		checkSafe(t, "the reason reported", sent.Rejected[0].Reason)
	})
}

// Answers and reports an older build recorded as they were given, not
// made safe, still go up, made safe as they are gathered.
func TestReasonsAnOlderBuildRecordedUnsafeGoUpMadeSafe(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		for _, bad := range unsafeTexts {
			t.Run(bad.name, func(t *testing.T) {
				w := newWishShop(t, d, handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome {
					return Refused("no")
				}), nil, nil)
				mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
				sendMain(t, w.r, w.up)
				w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci !"), nil))
				w.offerNow(t)
				// As an older build wrote them: the engine's own writes.
				tx, err := w.r.db.Begin()
				if err != nil {
					t.Fatal(err)
				}
				for _, q := range []string{
					"UPDATE sync_replica SET applying = 1",
					"UPDATE sync_wishes SET reason = ?",
					"INSERT INTO sync_rejected (tbl, key, reason, message, at) VALUES ('products', NULL, ?, 1, 0)",
					"UPDATE sync_replica SET applying = 0",
				} {
					var args []any
					if strings.Contains(q, "?") {
						args = append(args, bad.text)
					}
					if _, err := tx.Exec(q, args...); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				sent := sendMain(t, w.r, w.up)
				if len(sent.Answers) != 1 || len(sent.Rejected) != 1 {
					t.Fatalf("sent answers %v, reports %v", sent.Answers, sent.Rejected)
				}
				checkSafe(t, "the answer's reason", sent.Answers[0].Reason)
				checkSafe(t, "the report's reason", sent.Rejected[0].Reason)
			})
		}
	})
}

// An own row whose key is text that is not UTF-8 (written behind the
// engine's back) is set aside and reported, named as well as safe text
// can, and the rows after it go up.
func TestAnOwnRowWhoseKeyIsNotUTF8IsReportedAndTheLaneGoesOn(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := shopDB(t, d)
		up := newRecorder()
		r, err := New(context.Background(), db, shopCodecs(t), Me(register), up, quietSettings())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		mustExec(t, db, "INSERT INTO receipts VALUES (?, 'receipt \xff\xfe', 100, NULL, ?)", register, t0)
		good := uuid.New()
		mustExec(t, db, "INSERT INTO receipts VALUES (?, ?, 200, NULL, ?)", register, good, t0)
		sent := sendMain(t, r, up)
		if rc := tableOf(sent, "receipts"); rc == nil || len(rc.Upserts) != 1 {
			t.Fatalf("sent receipts %v", rc)
		}
		if len(sent.Rejected) != 1 || !strings.Contains(sent.Rejected[0].Reason, "receipt") {
			t.Fatalf("reported %v", sent.Rejected)
		}
	})
}

// A build's name that is not UTF-8 goes up made safe: the messages that
// carry it can be encoded.
func TestABuildNameNotUTF8GoesUpMadeSafe(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := shopDB(t, d)
		up := newRecorder()
		s := quietSettings()
		s.Build = "till \xff\x00 v2"
		r, err := New(context.Background(), db, shopCodecs(t), Me(register), up, s)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		mustExec(t, db, "INSERT INTO receipts VALUES (?, ?, 200, NULL, ?)", register, uuid.New(), t0)
		sent := sendMain(t, r, up)
		if !strings.HasPrefix(sent.Build, "till ") {
			t.Fatalf("build %q", sent.Build)
		}
		checkSafe(t, "the build", sent.Build)
	})
}

// A lane whose name is not UTF-8 text without NUL could never be sent:
// New refuses it, saying so.
func TestNewRefusesALaneNameThatIsNotText(t *testing.T) {
	t.Parallel()
	db := shopDB(t, sqlitetest.Modernc())
	for _, name := range []string{"gps\xff", "gps\x00"} {
		s := quietSettings()
		s.Lanes = []Lane{{Name: name, Tables: []string{"positions"}}}
		_, err := New(context.Background(), db, shopCodecs(t), Me(register), newRecorder(), s)
		if err == nil || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("lane %q: %v", name, err)
		}
	}
}
