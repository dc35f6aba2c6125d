package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync/server"
)

// badNotes are notes a host may pass on from its users: bytes that are not
// UTF-8, a NUL PostgreSQL refuses, a megabyte.
var badNotes = []struct{ name, note string }{
	{"not UTF-8", "ann \xff\xfe at the office"},
	{"NUL", "ann\x00at the office"},
	{"1 MB", "ann " + strings.Repeat("at the office ", 1<<16)},
}

// A wish's note that is not UTF-8, holds a NUL or runs to a megabyte is
// kept made safe: Desire fails neither itself nor the host's transaction,
// which goes on and commits, and the wish reaches its register with the
// note safe.
func TestANoteThatIsNotSafeTextIsKeptSafeAndTheHostsTransactionGoesOn(t *testing.T) {
	t.Parallel()
	for _, bad := range badNotes {
		t.Run(bad.name, func(t *testing.T) {
			t.Parallel()
			w := newWishShop(t)
			r := w.register()
			row := w.setting(r, "footer", "Thank you", time.Now())
			row.Value = "Merci"
			tx, err := w.s.Begin(w.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(w.ctx) //nolint:errcheck // after Commit, a no-op
			if _, err := server.Desire(w.ctx, w.s, tx, row, bad.note); err != nil {
				t.Fatalf("Desire with a note %s: %v", bad.name, err)
			}
			var one int
			if err := tx.QueryRow(w.ctx, "SELECT 1").Scan(&one); err != nil {
				t.Fatalf("the host's transaction after Desire: %v", err)
			}
			if err := tx.Commit(w.ctx); err != nil {
				t.Fatal(err)
			}
			if got := w.wishOf(row); !strings.HasPrefix(got.Note, "ann") || !safeText(got.Note) {
				t.Errorf("the wish's note is %.80q (%d bytes); want it safe", got.Note, len(got.Note))
			}
			w.pass()
			sent := wishesIn(w.drain(r))
			if len(sent) != 1 || !strings.HasPrefix(sent[0].Note, "ann") || !safeText(sent[0].Note) {
				t.Fatalf("the register was sent %.200v; want the wish, its note safe", sent)
			}
		})
	}
}

// A rollout's note likewise: Roll takes it made safe, and every wish of
// the rollout carries it so.
func TestARolloutsNoteThatIsNotSafeTextIsKeptSafe(t *testing.T) {
	t.Parallel()
	for _, bad := range badNotes {
		t.Run(bad.name, func(t *testing.T) {
			t.Parallel()
			w := newWishShop(t)
			r := w.register()
			w.setting(r, "footer", "Thank you", time.Now().Add(-time.Hour))
			ro := w.roll("Merci", server.RolloutScope{Group: w.shop.String()}, server.RolloutOptions{Note: bad.note})
			if ro.Wished != 1 {
				t.Fatalf("Roll = %+v; want the register wished", ro)
			}
			st := w.status(ro.ID)
			if !strings.HasPrefix(st.Options.Note, "ann") || !safeText(st.Options.Note) {
				t.Errorf("the rollout's note is %.80q (%d bytes); want it safe", st.Options.Note, len(st.Options.Note))
			}
			w.pass()
			sent := wishesIn(w.drain(r))
			if len(sent) != 1 || !strings.HasPrefix(sent[0].Note, "ann") || !safeText(sent[0].Note) {
				t.Fatalf("the register was sent %.200v; want the wish, its note safe", sent)
			}
		})
	}
}
