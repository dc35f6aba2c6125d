package replica

import (
	"context"
	"database/sql"
	"regexp"
	"testing"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// A text key holding a NUL is one SQLite's quote() cuts at the NUL: noted
// so, the row would be looked up under another key, never found, and
// never sent nor reported. Its whole key must be noted, so that it goes
// up — for a server that cannot hold it to refuse it, and the replica to
// keep it in its backlog, saying why.

// nulName is a setting's name holding a NUL.
const nulName = "foot\x00er"

// checkNULKeyGoesUp sends the main lane's next message and checks that it
// carries the setting named nulName as an upsert under its whole key, and
// no delete; it returns the message.
func checkNULKeyGoesUp(t *testing.T, r *Replica, up *recorder) *syncpb.ToServer {
	t.Helper()
	if _, err := r.sendOnce(context.Background(), r.lane("main")); err != nil {
		t.Fatal(err)
	}
	m := up.took(t).msg
	ch := tableOf(m.Up, "settings")
	if ch == nil || len(ch.Deletes) != 0 {
		t.Fatalf("sent settings %v; want the setting whose name holds a NUL as an upsert, and no delete", ch)
	}
	want := keyOf(t, r.codecs, Setting{RegisterID: register, Name: nulName})
	found := false
	for _, k := range ch.UpsertKeys {
		found = found || string(k) == string(want)
	}
	if !found {
		t.Fatalf("sent the settings keyed %q; want one keyed %q", ch.UpsertKeys, want)
	}
	return m
}

func TestAnOwnRowWhoseKeyHoldsANULGoesUpAndARefusalOfItIsKept(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		mustExec(t, r.db, "INSERT INTO settings VALUES (?, ?, 'thank you', ?)", register, nulName, t0)
		m := checkNULKeyGoesUp(t, r, up)
		key := keyOf(t, r.codecs, Setting{RegisterID: register, Name: nulName})
		b := builder{t, r.codecs}
		why := `column "name" holds a NUL character, which PostgreSQL text cannot`
		if _, err := r.Endpoint().Receive(ctx, b.filed(1, "main", m.Sequence, &syncpb.Rejected{Table: "settings", Key: []byte(key), Reason: why})); err != nil {
			t.Fatal(err)
		}
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Backlog != 1 || st.Lanes[0].Unsent != 0 || st.Lanes[0].Unconfirmed != 0 {
			t.Fatalf("status = %+v; want the refused setting in the backlog, nothing else waiting", st)
		}
		var reason string
		if err := r.db.QueryRow("SELECT held_reason FROM sync_pending").Scan(&reason); err != nil || reason != "the server refused it: "+why {
			t.Fatalf("the backlog's reason = %q, %v; want the server's", reason, err)
		}
	})
}

// oldNotedValue matches a key value as notedValue notes it, for the test
// to write the triggers of a build that noted it with quote() alone.
var oldNotedValue = regexp.MustCompile(`CASE WHEN typeof\(([^()]+)\) = 'text' AND instr\(CAST\([^()]+ AS BLOB\), X'00'\) > 0 THEN 'T' \|\| quote\(CAST\([^()]+ AS BLOB\)\) ELSE quote\([^()]+\) END`)

// A row whose key holds a NUL, written while an earlier build's triggers
// noted it cut at the NUL, goes up once Install brings the triggers up to
// date.
func TestInstallNotesAgainARowAnEarlierBuildNotedUnderACutKey(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := shopDB(t, d)
		ctx := context.Background()
		codecs := shopCodecs(t)
		downgradeNoteTriggers(t, db, codecs)
		mustExec(t, db, "INSERT INTO settings VALUES (?, ?, 'thank you', ?)", register, nulName, t0)
		var cut string
		if err := db.QueryRow("SELECT key FROM sync_pending WHERE tbl = 'settings'").Scan(&cut); err != nil {
			t.Fatal(err)
		}
		if _, _, err := parseNotedKey(mustTable(t, codecs, "settings"), cut); err != nil || len(cut) > 50 {
			t.Fatalf("the earlier triggers noted %q (%v); want the key cut at the NUL", cut, err)
		}
		if _, err := New(ctx, db, codecs, Me(register), newRecorder(), quietSettings()); err == nil {
			t.Fatal("New took triggers out of date")
		}
		if err := Install(ctx, db, codecs); err != nil {
			t.Fatal(err)
		}
		up := newRecorder()
		r, err := New(ctx, db, codecs, Me(register), up, quietSettings())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		checkNULKeyGoesUp(t, r, up)
		// Install again changes nothing: the row is noted once.
		if err := Install(ctx, db, codecs); err != nil {
			t.Fatal(err)
		}
		var notes int
		if err := db.QueryRow("SELECT count(*) FROM sync_pending WHERE tbl = 'settings' AND key LIKE '%TX''%'").Scan(&notes); err != nil || notes != 1 {
			t.Fatalf("%d notes of the setting under its whole key (%v); want 1", notes, err)
		}
	})
}

// downgradeNoteTriggers replaces the note triggers with those of a build
// that noted keys with quote() alone.
func downgradeNoteTriggers(t *testing.T, db *sql.DB, codecs interface{ Tables() []*codec.TableCodec }) {
	t.Helper()
	for _, tc := range codecs.Tables() {
		if tc.Mirror == codec.Catalog {
			continue
		}
		for _, op := range []string{"insert", "update", "delete"} {
			name := "sync_" + tc.Name + "_note_" + op
			var text string
			if err := db.QueryRow("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?", name).Scan(&text); err != nil {
				t.Fatal(err)
			}
			old := oldNotedValue.ReplaceAllString(text, "quote($1)")
			if old == text {
				t.Fatalf("trigger %s notes no key as notedValue writes it: %s", name, text)
			}
			mustExec(t, db, "DROP TRIGGER "+codec.QuoteIdent(name))
			mustExec(t, db, old)
		}
	}
}

func mustTable(t *testing.T, codecs interface {
	Table(string) (*codec.TableCodec, error)
}, name string) *codec.TableCodec {
	t.Helper()
	tc, err := codecs.Table(name)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}
