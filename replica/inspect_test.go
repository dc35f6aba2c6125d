package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// openReadOnly opens the file of a replica again, read-only, with a busy
// timeout: as an operator's tool opens a running replica's file.
func openReadOnly(t testing.TB, d sqlitetest.Driver, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open(d.Name, d.DSN(path, sqlitetest.Pragmas{BusyTimeout: 5 * time.Second})+"&mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Inspect reads, from a read-only connection beside a running replica,
// the replica's identity, the last message applied, what waits per table
// and per lane, the backlog with its reason, and the rows it could not
// take — as the replica's own Status counts them.
func TestInspectReadsTheReplicaFromAReadOnlyConnection(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Build = "v1"
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(ctx, b.down(7, b.upserts(product(1, 100)))); err != nil {
			t.Fatal(err)
		}
		// A receipt the server refuses for good goes to the backlog.
		up.fail = func(context.Context, string) error {
			return TransportError(false, errors.New("422: the register is closed"))
		}
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		if _, err := r.sendOnce(ctx, r.lane("main")); err == nil {
			t.Fatal("sendOnce took a message the uplink refused")
		}
		up.fail = nil
		// One unsent receipt, and one unreadable.
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 200, NULL, ?)", register, uuid.New(), t0)
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 'twelve', NULL, ?)", register, uuid.New(), t0)

		ro := openReadOnly(t, d, r.file)
		in, err := Inspect(ctx, ro)
		if err != nil {
			t.Fatal(err)
		}
		if in.ID != register || !in.Known || in.LastApplied != 7 || in.Build != "v1" || in.SchemaVersion != schemaVersion {
			t.Fatalf("inspection = %+v; want register %s, known, message 7 applied, build v1", in, register)
		}
		if in.Backlog != 1 || len(in.BacklogRows) != 1 || in.BacklogRows[0].Table != "receipts" || in.BacklogRows[0].Build != "v1" ||
			!strings.Contains(in.BacklogRows[0].Reason, "the register is closed") {
			t.Fatalf("backlog = %d %+v; want the refused receipt, with the server's reason", in.Backlog, in.BacklogRows)
		}
		if len(in.Tables) != 1 || in.Tables[0] != (TableInspection{Table: "receipts", Unsent: 2, Backlog: 1}) {
			t.Fatalf("tables = %+v; want two receipts unsent (one unreadable, not yet read) and one in the backlog", in.Tables)
		}
		if len(in.Lanes) != 1 || in.Lanes[0].Name != "main" || in.Lanes[0].Sent != 1 || in.Lanes[0].Unconfirmed != 0 {
			t.Fatalf("lanes = %+v; want main, one message sent, nothing unconfirmed", in.Lanes)
		}
		// Sent, the unreadable row is set aside and listed.
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		in, err = Inspect(ctx, ro)
		if err != nil {
			t.Fatal(err)
		}
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if in.Unreadable != 1 || in.RejectedTotal != 1 || len(in.Rejected) != 1 || !strings.Contains(in.Rejected[0].Reason, "total_cents") {
			t.Fatalf("inspection = %+v; want the unreadable receipt listed", in)
		}
		if in.Unreadable != st.Unreadable || in.Backlog != st.Backlog || in.Tables[0].Unconfirmed != st.Lanes[0].Unconfirmed || in.Lanes[0].Unconfirmed != st.Lanes[0].Unconfirmed {
			t.Fatalf("inspection = %+v; status = %+v: they disagree", in, st)
		}
	})
}

// Inspect lists the server's wishes with the replica's answers.
func TestInspectListsWishesAndTheirAnswers(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		w := newWishShop(t, d, handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome {
			return Refused("the printer takes 40 characters")
		}), nil, nil)
		mustExec(t, w.r.db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
		w.down(t, 1, w.wish(t, footer("footer"), 3, text(strings.Repeat("x", 41)), nil))
		w.offerNow(t)
		in, err := Inspect(context.Background(), openReadOnly(t, d, w.r.file))
		if err != nil {
			t.Fatal(err)
		}
		if in.Wishes != (WishCounts{Refused: 1}) || len(in.WishList) != 1 {
			t.Fatalf("wishes = %+v %+v; want the refused wish", in.Wishes, in.WishList)
		}
		got := in.WishList[0]
		if got.Table != "settings" || got.Key != keyOf(t, w.r.codecs, footer("footer")) || got.Wish != 3 || got.State != WishRefused ||
			got.Reason != "the printer takes 40 characters" || got.Note != "ann at the office" || !got.WishedAt.Equal(t0) ||
			got.AnsweredAt.IsZero() || got.Filed || strings.Join(got.Columns, ",") != "value" {
			t.Fatalf("wish = %+v; want wish 3 of the footer, refused with the handler's reason", got)
		}
	})
}

// Inspect refuses a file that is not a replica's, saying so, and changes
// nothing in it.
func TestInspectRefusesAFileThatIsNoReplica(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		path := sqlitetest.NewPath(t)
		db := sqlitetest.OpenPath(t, d, path, sqlitetest.Safe())
		mustExec(t, db, "CREATE TABLE notes (id INTEGER PRIMARY KEY)")
		_, err := Inspect(context.Background(), openReadOnly(t, d, path))
		if err == nil || !strings.Contains(err.Error(), "not a magicsync replica's file") {
			t.Fatalf("Inspect = %v; want a refusal saying the file is no replica's", err)
		}
		if n := count(t, db, "SELECT count(*) FROM sqlite_master"); n != 1 {
			t.Fatalf("the file holds %d objects after Inspect; want its one table", n)
		}
	})
}

// Inspect lists the first wishes and says whether more follow;
// InspectWishes pages through them all, each wish once, in order.
func TestInspectWishesPagesThroughEveryWish(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		w := newWishShop(t, d, handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome { return Later("off") }), nil, nil)
		const n = InspectRows + 37
		var ws []*syncpb.Wish
		for i := range n {
			ws = append(ws, w.wish(t, footer(fmt.Sprintf("line %03d", i)), uint64(i+1), text("x"), nil))
		}
		ws = append(ws, w.wish(t, knob("volume"), 1, integer(3), nil))
		w.down(t, 1, ws...)
		in, err := Inspect(context.Background(), w.r.db)
		if err != nil {
			t.Fatal(err)
		}
		if len(in.WishList) != InspectRows || !in.MoreWishes {
			t.Fatalf("Inspect lists %d wishes, more %v; want %d and more", len(in.WishList), in.MoreWishes, InspectRows)
		}
		seen := map[string]bool{}
		var last WishInspection
		from := in.WishList[len(in.WishList)-1].Cursor()
		for _, wi := range in.WishList {
			seen[wi.Table+string(wi.Key)] = true
		}
		for pages := 0; ; pages++ {
			if pages > n {
				t.Fatal("no end of pages")
			}
			page, err := InspectWishes(context.Background(), w.r.db, from, 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, wi := range page.Wishes {
				id := wi.Table + string(wi.Key)
				if seen[id] {
					t.Fatalf("wish %s %v listed twice", wi.Table, wi.Key)
				}
				if last.Table != "" && (wi.Table < last.Table || wi.Table == last.Table && string(wi.Key) <= string(last.Key)) {
					t.Fatalf("wish %s %v after %s %v: out of order", wi.Table, wi.Key, last.Table, last.Key)
				}
				seen[id], last = true, wi
			}
			if !page.More {
				break
			}
			if len(page.Wishes) != 10 || page.Next != page.Wishes[9].Cursor() {
				t.Fatalf("a page of %d wishes, next %v", len(page.Wishes), page.Next)
			}
			from = page.Next
		}
		if len(seen) != n+1 {
			t.Errorf("the pages listed %d wishes; want %d", len(seen), n+1)
		}
		if first, err := InspectWishes(context.Background(), w.r.db, WishCursor{}, 0); err != nil || len(first.Wishes) != InspectRows || first.Wishes[0].Key != in.WishList[0].Key {
			t.Errorf("the first page from the zero cursor: %d wishes, %v", len(first.Wishes), err)
		}
	})
}
