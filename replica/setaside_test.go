package replica

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
)

// badReceipt is a receipt written into the register's file by another
// program (the sqlite3 CLI, the host app) with a value its column's type
// cannot hold.
type badReceipt struct {
	name string
	// insert writes the bad row of id; column is the column it names.
	insert string
	column string
	// readable lists the drivers that read the value as its column's type
	// after all (mattn/go-sqlite3 reads an integer in a TIMESTAMP column
	// as Unix seconds): there the row simply goes up.
	readable string
}

var badReceipts = []badReceipt{
	{name: "integer in a time column", insert: "INSERT INTO receipts VALUES (?, ?, 100, NULL, 1234567)", column: "at", readable: "mattn"},
	{name: "text in an integer column", insert: "INSERT INTO receipts VALUES (?, ?, 'twelve', NULL, '2026-03-04 05:06:07')", column: "total_cents"},
	{name: "real in an integer column", insert: "INSERT INTO receipts VALUES (?, ?, 1.5, NULL, '2026-03-04 05:06:07')", column: "total_cents"},
	{name: "key that is no uuid", insert: "INSERT INTO receipts VALUES (?, 'not-a-uuid-' || ?, 100, NULL, '2026-03-04 05:06:07')", column: "id"},
}

// An own row the engine cannot read is set aside, reported (Status, and to
// the server as a row the replica could not take, naming the column and
// the value), and the rest of the lane goes on.
func TestUnreadableOwnRowIsSetAsideAndTheLaneGoesOn(t *testing.T) {
	t.Parallel()
	for _, bad := range badReceipts {
		t.Run(bad.name, func(t *testing.T) {
			t.Parallel()
			sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
				r, up := newShopReplica(t, d, quietSettings())
				ctx := context.Background()
				good := uuid.New()
				mustExec(t, r.db, bad.insert, register, uuid.New().String())
				mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, good, t0)
				if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
					t.Fatalf("sendOnce = %v; want the lane to go on", err)
				}
				m := up.took(t).msg.Up
				receipts := upRows[Receipt](t, r.codecs, m)
				if strings.Contains(bad.readable, d.Label) {
					if len(receipts) != 2 {
						t.Fatalf("sent %d receipts; want both (%s reads the value)", len(receipts), d.Label)
					}
					return
				}
				if len(receipts) != 1 || receipts[0].ID != good {
					t.Fatalf("sent %v; want only the good receipt", receipts)
				}
				if len(m.Rejected) != 1 || m.Rejected[0].Table != "receipts" || !strings.Contains(m.Rejected[0].Reason, `"`+bad.column+`"`) {
					t.Fatalf("reported %v; want the unreadable row, naming column %q", m.Rejected, bad.column)
				}
				st, err := r.Status(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st.Unreadable != 1 || len(st.Rejected) != 1 || !strings.Contains(st.Rejected[0].Reason, bad.column) || st.Lanes[0].Unsent != 0 {
					t.Fatalf("status = %+v; want the row set aside, named, and nothing else waiting", st)
				}
				// Set aside, it blocks nothing and is not read again.
				mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 200, NULL, ?)", register, uuid.New(), t0)
				if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
					t.Fatal(err)
				}
				if m := up.took(t).msg.Up; len(upRows[Receipt](t, r.codecs, m)) != 1 || len(m.Rejected) != 0 {
					t.Fatalf("the next message carried %v and reported %v; want the new receipt alone", upRows[Receipt](t, r.codecs, m), m.Rejected)
				}
			})
		})
	}
}

// A row set aside as unreadable goes up once it is written again with good
// values, and its report is cleared — on the server too, by Up.Cleared —
// and forgotten once the server confirmed the clearing.
func TestUnreadableRowWrittenAgainGoesUpAndClearsItsReport(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		b := builder{t, r.codecs}
		id := uuid.New()
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 'twelve', NULL, ?)", register, id, t0)
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		first := up.took(t).msg
		if len(first.Up.Rejected) != 1 {
			t.Fatalf("reported %v; want the unreadable row", first.Up.Rejected)
		}
		if _, err := r.Endpoint().Receive(ctx, b.filed(1, "main", first.Sequence)); err != nil {
			t.Fatal(err)
		}
		mustExec(t, r.db, "UPDATE receipts SET total_cents = 1200 WHERE id = ?", id)
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		m := up.took(t).msg
		if rows := upRows[Receipt](t, r.codecs, m.Up); len(rows) != 1 || rows[0].ID != id || rows[0].TotalCents != 1200 {
			t.Fatalf("sent %v; want the mended receipt", rows)
		}
		if len(m.Up.Cleared) != 1 || m.Up.Cleared[0].Table != "receipts" || string(m.Up.Cleared[0].Key) != string(first.Up.Rejected[0].Key) {
			t.Fatalf("cleared %v; want the report of the mended receipt", m.Up.Cleared)
		}
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Unreadable != 0 || len(st.Rejected) != 0 {
			t.Fatalf("status = %+v; want nothing set aside", st)
		}
		if _, err := r.Endpoint().Receive(ctx, b.filed(2, "main", m.Sequence)); err != nil {
			t.Fatal(err)
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_rejected"); n != 0 {
			t.Fatalf("%d reports kept after the server confirmed the clearing", n)
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_pending"); n != 0 {
			t.Fatalf("%d rows wait after everything was filed", n)
		}
	})
}

// A row whose key is no UUID cannot go up, not even as a delete: deleting
// it forgets its note, clears its report, and sends nothing for it.
func TestUnreadableKeyDeletedIsForgottenAndCleared(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, 'not-a-uuid', 100, NULL, ?)", register, t0)
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		first := up.took(t).msg.Up
		if len(first.Rejected) != 1 || !strings.Contains(first.Rejected[0].Reason, "not-a-uuid") {
			t.Fatalf("reported %v; want the row, naming its key's value", first.Rejected)
		}
		mustExec(t, r.db, "DELETE FROM receipts WHERE id = 'not-a-uuid'")
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		m := up.took(t).msg.Up
		if len(m.Tables) != 0 {
			t.Fatalf("sent %v for a row the server never had", m.Tables)
		}
		if len(m.Cleared) != 1 || string(m.Cleared[0].Key) != string(first.Rejected[0].Key) {
			t.Fatalf("cleared %v; want the deleted row's report", m.Cleared)
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_pending"); n != 0 {
			t.Fatalf("%d notes kept of a deleted row that never went up", n)
		}
	})
}

// Rows a process recorded as sent and never saw confirmed — killed before
// its message reached the server, say — go again as soon as the next
// process starts, not after ResendAfter.
func TestRowsSentByAnEarlierProcessGoAgainAtStart(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		clock := newFakeClock()
		s.Clock = clock
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		// Recorded as sent; the process dies before it hears back.
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		up.took(t)
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		if len(up.got) != 0 {
			t.Fatal("the same process sent the unconfirmed row again before ResendAfter")
		}
		r2, err := New(ctx, r.db, r.codecs, Me(register), up, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r2.sendOnce(ctx, r2.lane("main")); err != nil {
			t.Fatal(err)
		}
		if rows := upRows[Receipt](t, r.codecs, up.took(t).msg.Up); len(rows) != 1 {
			t.Fatalf("the next process sent %v; want the unconfirmed receipt at once", rows)
		}
	})
}
