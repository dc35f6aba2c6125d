package replica

// Rows whose refusal undoes a message's whole transaction rather than
// their own statement — seed 002: "one bad row never blocks the queue" —
// are left out, reported, and the rest of the message applies.

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// newReplicaOver opens a replica of the shop's codecs over a schema of the
// test's own, with the host's extra DDL run after it.
func newReplicaOver(t *testing.T, d sqlitetest.Driver, schema string) (*Replica, *recorder) {
	t.Helper()
	db := sqlitetest.Open(t, d)
	mustExec(t, db, schema)
	ctx := context.Background()
	if err := Install(ctx, db, shopCodecs(t)); err != nil {
		t.Fatal(err)
	}
	up := newRecorder()
	r, err := New(ctx, db, shopCodecs(t), Me(register), up, quietSettings())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, up
}

// reportedReasons sends the main lane's message and returns the reasons
// it reports, by key.
func reportedReasons(t *testing.T, r *Replica, up *recorder) map[magicsync.Key]string {
	t.Helper()
	if _, err := r.sendOnce(context.Background(), r.lane("main")); err != nil {
		t.Fatal(err)
	}
	reasons := map[magicsync.Key]string{}
	for _, rj := range up.next(t).msg.Up.Rejected {
		reasons[magicsync.Key(rj.Key)] = rj.Reason
	}
	return reasons
}

func TestRowWhoseTriggerRollsBackTheMessageIsLeftOutAndTheRestApplies(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newReplicaOver(t, d, shopSchema+`
CREATE TRIGGER no_poison BEFORE INSERT ON products WHEN NEW.name = 'poison'
BEGIN SELECT RAISE(ROLLBACK, 'poison is not sold here'); END;`)
		b := builder{t, r.codecs}
		// More rows than one statement carries, so that the row is first
		// found among many.
		rows := make([]magicsync.Declarer, 100)
		for i := range rows {
			rows[i] = product(i, 100)
		}
		poison := product(70, 100)
		poison.Name = "poison"
		rows[70] = poison
		got, err := r.Endpoint().Receive(context.Background(), b.down(1, b.upserts(rows...)))
		if err != nil {
			t.Fatalf("Receive = %v; want the message applied without the row", err)
		}
		if got.Rejected != 1 || len(got.Applied["products"]) != 99 {
			t.Fatalf("Received %d applied, %d rejected; want 99 and 1", len(got.Applied["products"]), got.Rejected)
		}
		if n := count(t, r.db, "SELECT count(*) FROM products"); n != 99 {
			t.Fatalf("%d products held; want 99", n)
		}
		if n := count(t, r.db, "SELECT last_applied FROM sync_replica"); n != 1 {
			t.Fatalf("last applied = %d; want 1", n)
		}
		if why := reportedReasons(t, r, up)[keyOf(t, r.codecs, poison)]; !strings.Contains(why, "poison is not sold here") {
			t.Fatalf("the poisoned row's reason = %q; want the trigger's", why)
		}
	})
}

func TestRowRefusedByAnOnConflictRollbackConstraintIsLeftOut(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		schema := strings.Replace(shopSchema, "name TEXT NOT NULL, price_cents", "name TEXT NOT NULL UNIQUE ON CONFLICT ROLLBACK, price_cents", 1)
		r, up := newReplicaOver(t, d, schema)
		b := builder{t, r.codecs}
		first, twin, other := product(1, 100), product(2, 200), product(3, 300)
		twin.Name = first.Name
		got, err := r.Endpoint().Receive(context.Background(), b.down(1, b.upserts(first, twin, other)))
		if err != nil {
			t.Fatalf("Receive = %v; want the message applied without the row", err)
		}
		if got.Rejected != 1 || count(t, r.db, "SELECT count(*) FROM products") != 2 {
			t.Fatalf("Received %+v; want two products applied and one left out", got)
		}
		if why := reportedReasons(t, r, up)[keyOf(t, r.codecs, twin)]; !strings.Contains(strings.ToUpper(why), "UNIQUE") {
			t.Fatalf("the twin's reason = %q; want the UNIQUE constraint", why)
		}
	})
}

func TestRowBreakingADeferredForeignKeyIsLeftOutAtCommit(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		schema := strings.Replace(shopSchema, "REFERENCES products (id)", "REFERENCES products (id) DEFERRABLE INITIALLY DEFERRED", 1)
		r, up := newReplicaOver(t, d, schema)
		ctx := context.Background()
		b := builder{t, r.codecs}
		p := product(1, 100)
		good := Image{ID: uuidOf("image 1"), ProductID: p.ID, URL: "https://example.org/1.png"}
		orphan := Image{ID: uuidOf("image 2"), ProductID: uuidOf("no such product"), URL: "https://example.org/2.png"}
		got, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(p), b.upserts(good, orphan)))
		if err != nil {
			t.Fatalf("Receive = %v; want the message applied without the orphan", err)
		}
		if got.Rejected != 1 || count(t, r.db, "SELECT count(*) FROM images") != 1 || count(t, r.db, "SELECT count(*) FROM products") != 1 {
			t.Fatalf("Received %+v; want the product and one image applied, the orphan left out", got)
		}
		if why := reportedReasons(t, r, up)[keyOf(t, r.codecs, orphan)]; !strings.Contains(why, "FOREIGN KEY") {
			t.Fatalf("the orphan's reason = %q; want the foreign key", why)
		}

		// A delete of a parent that a held row still points at is left
		// out; the rest of the message applies.
		other := product(2, 200)
		del := &syncpb.TableChanges{Table: "products", Deletes: [][]byte{[]byte(keyOf(t, r.codecs, p))}}
		got, err = r.Endpoint().Receive(ctx, b.down(2, del, b.upserts(other)))
		if err != nil {
			t.Fatalf("Receive = %v; want the message applied without the delete", err)
		}
		if got.Rejected != 1 || count(t, r.db, "SELECT count(*) FROM products") != 2 {
			t.Fatalf("Received %+v; want the delete left out and the other product applied", got)
		}
		// Every pooled connection is clean after the refused commits.
		for id := uint64(3); id < 8; id++ {
			if _, err := r.Endpoint().Receive(ctx, b.down(id, b.upserts(product(int(id), 100)))); err != nil {
				t.Fatalf("message %d after a refused commit: %v", id, err)
			}
		}
	})
}

func uuidOf(name string) uuid.UUID { return uuid.NewSHA1(uuid.NameSpaceOID, []byte(name)) }

func TestStorageFailureFailsTheMessageRatherThanLeavingTheRowOut(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, _ := newReplicaOver(t, d, shopSchema)
		ctx := context.Background()
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(product(1, 100)))); err != nil {
			t.Fatal(err)
		}
		// One connection, whose database may grow no further: a big row
		// fails with SQLITE_FULL while the transaction stays open.
		r.db.SetMaxOpenConns(1)
		var pages int
		if err := r.db.QueryRow("PRAGMA page_count").Scan(&pages); err != nil {
			t.Fatal(err)
		}
		mustExec(t, r.db, fmt.Sprintf("PRAGMA max_page_count = %d", pages+2))
		big := product(2, 200)
		big.Name = strings.Repeat("x", 1<<20)
		if _, err := r.Endpoint().Receive(ctx, b.down(2, b.upserts(big, product(3, 300)))); err == nil {
			t.Fatal("Receive returned nil though storage was full")
		}
		if n := count(t, r.db, "SELECT last_applied FROM sync_replica"); n != 1 {
			t.Fatalf("last applied = %d after a storage failure; want 1", n)
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_rejected"); n != 0 {
			t.Fatalf("a storage failure was recorded as %d rows left out", n)
		}
		// With room again, the message comes again and applies whole.
		mustExec(t, r.db, "PRAGMA max_page_count = 1073741823")
		got, err := r.Endpoint().Receive(ctx, b.down(2, b.upserts(big, product(3, 300))))
		if err != nil || got.Rejected != 0 || len(got.Applied["products"]) != 2 {
			t.Fatalf("Receive = %+v, %v; want both rows applied", got, err)
		}
	})
}

func TestTriggerRefusalSpeakingOfFullnessIsStillARefusal(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, _ := newReplicaOver(t, d, shopSchema+`
CREATE TRIGGER shelf BEFORE INSERT ON products WHEN NEW.price_cents > 1000
BEGIN SELECT RAISE(ROLLBACK, 'the shelf is full'); END;`)
		b := builder{t, r.codecs}
		got, err := r.Endpoint().Receive(context.Background(), b.down(1, b.upserts(product(1, 100), product(2, 5000))))
		if err != nil || got.Rejected != 1 || len(got.Applied["products"]) != 1 {
			t.Fatalf("Receive = %+v, %v; want one applied, one left out", got, err)
		}
	})
}

func TestMessageWithManyRowsUndoingItAppliesOverSeveralDeliveries(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newReplicaOver(t, d, shopSchema+`
CREATE TRIGGER odd BEFORE INSERT ON products WHEN NEW.price_cents % 2 = 1
BEGIN SELECT RAISE(ROLLBACK, 'odd prices are not taken'); END;`)
		b := builder{t, r.codecs}
		rows := make([]magicsync.Declarer, 160)
		for i := range rows {
			rows[i] = product(i, int64(100+i)) // every other price odd
		}
		msg := b.down(1, b.upserts(rows...))
		var got Received
		var err error
		deliveries := 0
		for deliveries < 5 {
			deliveries++
			if got, err = r.Endpoint().Receive(context.Background(), msg); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("after %d deliveries: %v", deliveries, err)
		}
		if deliveries < 2 {
			t.Fatalf("applied at the first delivery; the test wants more undoing rows than one delivery tries")
		}
		if got.Rejected != 80 || len(got.Applied["products"]) != 80 || count(t, r.db, "SELECT count(*) FROM products") != 80 {
			t.Fatalf("Received %d applied, %d left out; want 80 and 80", len(got.Applied["products"]), got.Rejected)
		}
		if n := len(reportedReasons(t, r, up)); n != 80 {
			t.Fatalf("%d rows reported left out; want 80", n)
		}
	})
}
