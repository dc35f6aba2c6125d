package replica

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
)

// ReleaseBacklog, run from another pool on the file of a running replica,
// hands the rows of the tables named back to their queue — the others stay
// set aside — and the running replica sends them on its next idle turn,
// although its build set them aside.
func TestReleaseBacklogHandsRowsBackToTheRunningReplica(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Build = "v1"
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		up.fail = func(context.Context, string) error {
			return TransportError(false, errors.New("422: unknown register"))
		}
		receipt := uuid.New()
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, receipt, t0)
		mustExec(t, r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
		if _, err := r.sendOnce(ctx, r.lane("main")); err == nil {
			t.Fatal("sendOnce took a message the uplink refused")
		}
		if st, err := r.Status(ctx); err != nil || st.Backlog != 2 {
			t.Fatalf("status = %+v, %v; want both rows in the backlog", st, err)
		}
		up.fail = nil
		runReplica(t, r)

		other, err := sql.Open(d.Name, d.DSN(r.file, sqlitetest.Pragmas{BusyTimeout: 5 * time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		n, err := ReleaseBacklog(ctx, other, "receipts")
		if err != nil || n != 1 {
			t.Fatalf("ReleaseBacklog(receipts) = %d, %v; want the receipt released", n, err)
		}
		m := up.nextWith(t, "main", "receipts")
		if got := upRows[Receipt](t, r.codecs, m.msg.Up); len(got) != 1 || got[0].ID != receipt {
			t.Fatalf("sent %+v; want the released receipt", got)
		}
		if rows := upRows[Setting](t, r.codecs, m.msg.Up); len(rows) != 0 {
			t.Fatalf("sent the settings %+v; want them left in the backlog", rows)
		}
		in, err := Inspect(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		if in.Backlog != 1 || in.BacklogRows[0].Table != "settings" {
			t.Fatalf("backlog = %+v; want the setting alone", in.BacklogRows)
		}
		if n, err := ReleaseBacklog(ctx, other); err != nil || n != 1 {
			t.Fatalf("ReleaseBacklog() = %d, %v; want the setting released", n, err)
		}
		up.nextWith(t, "main", "settings")
	})
}

// ReleaseBacklog refuses a table the file does not have, naming it, and
// releases nothing.
func TestReleaseBacklogRefusesAnUnknownTable(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		up.fail = func(context.Context, string) error {
			return TransportError(false, errors.New("422: unknown register"))
		}
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		if _, err := r.sendOnce(ctx, r.lane("main")); err == nil {
			t.Fatal("sendOnce took a message the uplink refused")
		}
		_, err := ReleaseBacklog(ctx, r.db, "receipts", "reciepts")
		if err == nil || !strings.Contains(err.Error(), `"reciepts"`) {
			t.Fatalf("ReleaseBacklog = %v; want a refusal naming the table", err)
		}
		if n := count(t, r.db, "SELECT count(held) FROM sync_pending"); n != 1 {
			t.Fatalf("%d rows in the backlog; want the receipt still there", n)
		}
	})
}
