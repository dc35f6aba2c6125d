package replica

import (
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// The engine's own tables refuse the host's writes, as catalogs do, with
// a message naming the table: a wish, its answer, the rows on their way
// up, the replica's own state. The host's writes to its own tables still
// note their rows, and the engine's own writes pass.
func TestTheHostCannotWriteTheEnginesOwnTables(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		clock := newFakeClock()
		w := newWishShop(t, d, nil, nil, func(s *Settings) { s.Clock = clock; s.DigestsEvery = time.Hour })
		db := w.r.db
		mustExec(t, db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
		w.down(t, 1, w.wish(t, footer("footer"), 1, text("Merci"), nil))
		w.offerNow(t)
		mustExec(t, db, "INSERT INTO receipts (id, register_id, total_cents, note, at) VALUES ('00000000-0000-4000-8000-0000000000aa', ?, 100, '', ?)", register, t0)
		refused := []struct{ table, sql string }{
			{"sync_wishes", "UPDATE sync_wishes SET state = 3, reason = 'done by hand'"},
			{"sync_wishes", "DELETE FROM sync_wishes"},
			{"sync_wishes", "INSERT INTO sync_wishes (tbl, key, wish, columns, wanted, wished_at, message) VALUES ('settings', x'00', 9, 'value', x'', 0, 1)"},
			{"sync_staged_wishes", "INSERT INTO sync_staged_wishes (snapshot, tbl, key, wish, columns, wanted, wished_at, message) VALUES (1, 'settings', x'00', 9, 'value', x'', 0, 1)"},
			{"sync_pending", "DELETE FROM sync_pending"},
			{"sync_pending", "UPDATE sync_pending SET held = 'by hand'"},
			{"sync_pending", "INSERT INTO sync_pending (tbl, key, row_id, sent_seq) VALUES ('receipts', 'x', 1, 7)"},
			{"sync_pending", "INSERT INTO sync_pending (tbl, key, row_id) VALUES ('products', 'x', 1)"},
			{"sync_replica", "UPDATE sync_replica SET last_applied = 0"},
			{"sync_replica", "DELETE FROM sync_replica"},
			{"sync_lanes", "INSERT INTO sync_lanes (lane, next_seq) VALUES ('main', 1)"},
			{"sync_rejected", "INSERT INTO sync_rejected (tbl, key, reason, message, at) VALUES ('products', x'00', 'by hand', 1, 0)"},
			{"sync_staged", "INSERT INTO sync_staged (snapshot, tbl, key, columns, row, message) VALUES (1, 'products', x'00', 'id', x'', 1)"},
			{"sync_retained", "INSERT INTO sync_retained (tbl, key) VALUES ('products', x'00')"},
		}
		for _, c := range refused {
			_, err := db.Exec(c.sql)
			if err == nil || !strings.Contains(err.Error(), c.table+" is the engine's own table") {
				t.Errorf("%s: %v; want a refusal naming %s", c.sql, err, c.table)
			}
		}
		if _, state, _ := w.held(t, footer("footer")); state != WishApplied {
			t.Errorf("the wish stands %v after the host's writes; want applied", state)
		}
		// The engine's own writes pass: the receipt and the answer go up,
		// with the digests.
		if _, err := w.r.sendOnce(t.Context(), w.r.lane("main")); err != nil {
			t.Fatal(err)
		}
		up := w.up.took(t).msg.Up
		if len(up.GetAnswers()) != 1 || up.GetAnswers()[0].State != syncpb.WishState_WISH_STATE_APPLIED {
			t.Errorf("answers sent: %v", up.GetAnswers())
		}
		receipts := 0
		for _, tch := range up.GetTables() {
			if tch.Table == "receipts" {
				receipts += len(tch.Upserts)
			}
		}
		if receipts != 1 {
			t.Errorf("%d receipts sent; want the one written", receipts)
		}
	})
}
