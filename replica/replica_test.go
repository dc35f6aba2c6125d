package replica

// Every behaviour seed 002 ("A replica") states, and the test that shows it:
//
//   - install sets up what the database lacks, including the triggers that
//     note every write ............................ TestInstallIsIdempotentAndNotesWrites
//   - install refuses a database that does not fit .. TestInstallRefusesWhatDoesNotFit
//   - the same DDL as text .......................... TestTriggersTextInstallsTheSameSchema
//   - nothing goes up until the id is known; until then no write is refused,
//     catalog writes are not noted, own writes are noted by key; afterwards
//     the server's tables are the server's ......... TestSetupPhaseThenServerTablesAreReadOnly
//   - a placeholder of its own row renamed once it learns its id, with the
//     rows pointing at it: they go up by the key they have by then, and
//     nothing as a delete the server would refuse
//     ............................................... TestPlaceholderRenamedDuringSetupGoesUpUnderItsIdOnly,
//     TestDeletesAfterTheIdIsKnownGoUp, TestProvisioningsDeletesBeforeTheIdIsKnownGoUp
//   - New refuses commits that are not durable, a journal that cannot roll
//     back, and triggers that miss replaced rows .... TestNewRefusesUnsafeConnections
//   - ... and so does every message applied, on whichever connection
//     ............................................... TestReceiveRefusesUnsafeConnection,
//     TestReceiveRefusesAConnectionMadeUnsafeAfterItAppliedMessages
//   - a message is applied in one transaction, committed before Receive
//     returns ........................................ TestReceiveAppliesAndRecordsTheMessage
//   - a message at or below the last applied changes nothing
//     ............................................... TestRedeliveryChangesNothing, TestOlderMessageAfterNewerChangesNothing
//   - a crash before commit leaves the database as it was
//     ............................................... TestFailureBeforeCommitLeavesDatabaseAsBefore
//   - a row that does not decode or that a constraint refuses is left out and
//     reported, and the rest applies ............... TestBadRowsAreLeftOutReportedAndTheRestApplies
//   - parents before children ....................... TestParentsApplyBeforeChildrenAndDeletesChildrenFirst
//   - Received names the keys applied per table ..... TestReceiveAppliesAndRecordsTheMessage
//   - an error for a later protocol, not acknowledged TestNewerProtocolIsRefusedWithATypedError
//   - run sends the rows written since, as they are now (edited twice, sent
//     once) ........................................ TestRowEditedThreeTimesGoesUpOnceWithItsLastValues,
//     TestRowsNotedBeforeATableRebuildGoUpByKey
//   - a deleted row goes up as gone, also when INSERT OR REPLACE deletes it
//     ............................................... TestDeletedAndReplacedRowsGoUpAsDeletes
//   - forgotten only when the server says it filed it; sent again if it
//     never answers, and again when written after the send
//     ............................................... TestNothingIsForgottenWithoutFiled, TestRowChangedAfterSendIsSentAgain,
//     TestFiledOfAnotherLaneWithTheSameSequenceForgetsNothingOfThisLane
//   - the rows it could not take and the last message applied go up
//     ............................................... TestBadRowsAreLeftOutReportedAndTheRestApplies,
//     TestUnconfirmedRejectedRowsAreReportedAgainAfterResendAfter, TestRejectedRowsBeyondOneMessageAreReportedInTheNext
//   - fingerprints go up when due ................... TestDigestsGoUpWhenDue
//   - a failing uplink backs off and retries; nothing is lost; the message
//     not taken goes again as it was, before any later one
//     ............................................... TestFailingLaneBacksOffAloneAndLosesNothing,
//     TestMessageNotTakenInTimeGoesAgainAsItWasBeforeAnyLaterOne,
//     TestMessageTakenAtALaterTryWaitsForItsConfirmationFromThen, TestRowsOfAMessageNotTakenCountAsUnsent
//   - a refusal for good sets the rows aside in the backlog until another
//     build runs ................................... TestPermanentRefusalMovesRowsToBacklogUntilAnotherBuild,
//     TestPermanentRefusalBacksOffAndSetsAsideWhatTheMessageCarried, TestFiledWithRefusedRowsMovesThemToTheBacklog
//   - nudge sends at once ........................... TestNudgeSendsAtOnce
//   - lanes: each on its own stream; a hung send is given up after
//     SendTimeout (30 s unless set) while the others go on
//     ............................................... TestHangingLaneDoesNotDelayMain,
//     TestHungSendIsGivenUpAfterSendTimeoutAndTriedAgain, TestSendTimeoutDefaultsTo30Seconds,
//     TestLaneLeavesAtMostOneCallBehindAndRunDoesNotWaitForIt
//   - run finishes the send in flight when stopped .. TestRunFinishesTheSendInFlightWhenStopped,
//     TestStoppedWhileASendIsRecordedLeavesNothingWaitingAsSent
//   - provisioning overwrites rows of the same key and lets the others go;
//     own rows go up again ......................... TestProvisioningReplacesCatalogsAndResendsOwnRows

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
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

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)

func product(n int, price int64) Product {
	return Product{ID: uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "product %d", n)), Name: fmt.Sprintf("product %d", n), PriceCents: price, UpdatedAt: t0}
}

func TestInstallIsIdempotentAndNotesWrites(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := shopDB(t, d)
		ctx := context.Background()
		for range 2 {
			if err := Install(ctx, db, shopCodecs(t)); err != nil {
				t.Fatalf("installing again: %v", err)
			}
		}
		mustExec(t, db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		if n := count(t, db, "SELECT count(*) FROM sync_pending WHERE tbl = 'receipts'"); n != 1 {
			t.Fatalf("a receipt written is noted once; noted %d", n)
		}
	})
}

func TestInstallRefusesWhatDoesNotFit(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		cases := []struct {
			name, ddl, want string
		}{
			{"missing table", strings.Replace(shopSchema, "CREATE TABLE positions", "CREATE TABLE positionz", 1), `table "positions"`},
			{"missing column", strings.Replace(shopSchema, "lat REAL NOT NULL,", "", 1), `no column "lat"`},
			{"host table named sync_", shopSchema + "CREATE TABLE sync_mine (x);", `"sync_mine"`},
			{"key without unique index", strings.Replace(shopSchema, "CREATE TABLE images (id TEXT PRIMARY KEY,", "CREATE TABLE images (id TEXT,", 1), "no primary key or unique index"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				db := sqlitetest.Open(t, d)
				mustExec(t, db, c.ddl)
				err := Install(context.Background(), db, shopCodecs(t))
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("Install = %v; want an error naming %s", err, c.want)
				}
				if n := count(t, db, "SELECT count(*) FROM sqlite_master WHERE name = 'sync_replica'"); n != 0 {
					t.Fatal("a refused Install changed the database")
				}
			})
		}
	})
}

func TestTriggersTextInstallsTheSameSchema(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := sqlitetest.Open(t, d)
		mustExec(t, db, shopSchema)
		mustExec(t, db, Triggers(shopCodecs(t)))
		if _, err := New(context.Background(), db, shopCodecs(t), Me(register), newRecorder(), quietSettings()); err != nil {
			t.Fatalf("a database set up from Triggers' text is refused: %v", err)
		}
	})
}

// identity is an Identity the test sets.
type identity struct{ id atomic.Pointer[uuid.UUID] }

func (i *identity) ID(context.Context) (uuid.UUID, bool, error) {
	if p := i.id.Load(); p != nil {
		return *p, true, nil
	}
	return uuid.Nil, false, nil
}

func TestSetupPhaseThenServerTablesAreReadOnly(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := shopDB(t, d)
		ctx := context.Background()
		who := &identity{}
		up := newRecorder()
		r, err := New(ctx, db, shopCodecs(t), who, up, quietSettings())
		if err != nil {
			t.Fatal(err)
		}
		// Setting up: the host writes the server's tables and its own.
		p := product(1, 100)
		mustExec(t, db, "INSERT INTO products VALUES (?, ?, ?, ?)", p.ID, p.Name, p.PriceCents, p.UpdatedAt)
		mustExec(t, db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		if n := count(t, db, "SELECT count(*) FROM sync_pending WHERE tbl = 'products'"); n != 0 {
			t.Fatalf("a catalog write during setup was noted (%d)", n)
		}
		if n := count(t, db, "SELECT count(*) FROM sync_pending WHERE tbl = 'receipts'"); n != 1 {
			t.Fatalf("an own write during setup is noted by key; noted %d", n)
		}
		l := r.lane("main")
		if more, err := r.sendOnce(ctx, l); err != nil || more {
			t.Fatalf("sendOnce before the id is known = %v, %v", more, err)
		}
		if len(up.sent) != 0 {
			t.Fatal("something went up before the replica knew its id")
		}
		who.id.Store(&register)
		if _, err := r.sendOnce(ctx, l); err != nil {
			t.Fatal(err)
		}
		if got := up.next(t); tableOf(got.msg.Up, "receipts") == nil {
			t.Fatal("the receipt written during setup did not go up once the id was known")
		}
		_, err = db.Exec("UPDATE products SET price_cents = 1")
		if err == nil || !strings.Contains(err.Error(), "products is the server's table") {
			t.Fatalf("a host write to a catalog after setup = %v; want a refusal naming the table", err)
		}
		for _, q := range []string{"DELETE FROM products", "INSERT INTO products VALUES ('x', 'x', 1, '2026-01-01')"} {
			if _, err := db.Exec(q); err == nil {
				t.Fatalf("%s was not refused", q)
			}
		}
		// The engine's own applying passes.
		b := builder{t, shopCodecs(t)}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(product(1, 250)))); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, "SELECT price_cents FROM products"); n != 250 {
			t.Fatalf("the engine's write was refused: price %d", n)
		}
	})
}

func TestNewRefusesUnsafeConnections(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(*sqlitetest.Pragmas)
		want   string
	}{
		{"synchronous NORMAL", func(p *sqlitetest.Pragmas) { p.Synchronous = "NORMAL" }, "synchronous"},
		{"journal OFF", func(p *sqlitetest.Pragmas) { p.JournalMode = "OFF" }, "journal_mode"},
		{"journal MEMORY", func(p *sqlitetest.Pragmas) { p.JournalMode = "MEMORY" }, "journal_mode"},
		{"recursive triggers off", func(p *sqlitetest.Pragmas) { p.RecursiveTriggers = false }, "recursive_triggers"},
	}
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				path := sqlitetest.NewPath(t)
				shopDBAt(t, d, path).Close()
				p := sqlitetest.Safe()
				c.change(&p)
				db := sqlitetest.OpenPath(t, d, path, p)
				_, err := New(context.Background(), db, shopCodecs(t), Me(register), newRecorder(), quietSettings())
				if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("New = %v; want ErrUnsafe naming %s", err, c.want)
				}
				if !strings.Contains(err.Error(), "_pragma=") || !strings.Contains(err.Error(), "mattn/go-sqlite3: _") {
					t.Fatalf("the error does not say how to set it for both drivers: %v", err)
				}
			})
		}
	})
}

// shopDBAt prepares the shop's database at path with the given settings.
func shopDBAt(t testing.TB, d sqlitetest.Driver, path string, p ...sqlitetest.Pragmas) *sql.DB {
	t.Helper()
	if len(p) == 0 {
		p = append(p, sqlitetest.Safe())
	}
	db := sqlitetest.OpenPath(t, d, path, p[0])
	mustExec(t, db, shopSchema)
	if err := Install(context.Background(), db, shopCodecs(t)); err != nil {
		t.Fatal(err)
	}
	return db
}

// unsafePragmas each make a connection unsafe, and the word a refusal
// names.
var unsafePragmas = []struct{ set, want string }{
	{"PRAGMA synchronous = NORMAL", "synchronous"},
	{"PRAGMA journal_mode = MEMORY", "journal_mode"},
	{"PRAGMA recursive_triggers = OFF", "recursive_triggers"},
}

func TestReceiveRefusesUnsafeConnection(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		for _, p := range unsafePragmas {
			t.Run(p.want, func(t *testing.T) {
				// journal_mode is one connection's own only outside WAL.
				safe := sqlitetest.Safe()
				safe.JournalMode = "DELETE"
				db := shopDBAt(t, d, sqlitetest.NewPath(t), safe)
				ctx := context.Background()
				r, err := New(ctx, db, shopCodecs(t), Me(register), newRecorder(), quietSettings())
				if err != nil {
					t.Fatal(err)
				}
				// Hold the connection New checked, so that the message goes to
				// another one, made unsafe.
				held, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer held.Close()
				other, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := other.ExecContext(ctx, p.set); err != nil {
					t.Fatal(err)
				}
				other.Close()
				db.SetMaxIdleConns(1)
				b := builder{t, shopCodecs(t)}
				_, err = r.Endpoint().Receive(ctx, b.down(1, b.upserts(product(1, 100))))
				if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), p.want) {
					t.Fatalf("Receive = %v; want ErrUnsafe naming %s", err, p.want)
				}
				held.Close()
				if n := count(t, db, "SELECT count(*) FROM products"); n != 0 {
					t.Fatal("a refused message was applied")
				}
			})
		}
	})
}

// The statements of a message are prepared once per connection: a
// connection that applied messages and was then made unsafe must be
// refused all the same. One connection in the pool, so that every message
// goes to it.
func TestReceiveRefusesAConnectionMadeUnsafeAfterItAppliedMessages(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		for _, p := range unsafePragmas {
			t.Run(p.want, func(t *testing.T) {
				safe := sqlitetest.Safe()
				safe.JournalMode = "DELETE" // journal_mode is one connection's own only outside WAL
				db := shopDBAt(t, d, sqlitetest.NewPath(t), safe)
				db.SetMaxOpenConns(1)
				ctx := context.Background()
				r, err := New(ctx, db, shopCodecs(t), Me(register), newRecorder(), quietSettings())
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				b := builder{t, shopCodecs(t)}
				for id := range uint64(2) {
					if _, err := r.Endpoint().Receive(ctx, b.down(id+1, b.upserts(product(int(id), 100)))); err != nil {
						t.Fatalf("message %d on a safe connection: %v", id+1, err)
					}
				}
				mustExec(t, db, p.set)
				_, err = r.Endpoint().Receive(ctx, b.down(3, b.upserts(product(3, 100))))
				if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), p.want) {
					t.Fatalf("Receive = %v; want ErrUnsafe naming %s", err, p.want)
				}
				if n := count(t, db, "SELECT count(*) FROM products"); n != 2 {
					t.Fatalf("%d products; want the 2 of the messages before, not the refused one", n)
				}
				if n := count(t, db, "SELECT last_applied FROM sync_replica"); n != 2 {
					t.Fatalf("last applied is %d; want 2", n)
				}
			})
		}
	})
}

func TestReceiveAfterCloseFails(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, _ := newShopReplica(t, d, quietSettings())
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(context.Background(), b.down(1, b.upserts(product(1, 100)))); !errors.Is(err, ErrClosed) {
			t.Fatalf("Receive after Close = %v; want ErrClosed", err)
		}
		if n := count(t, r.db, "SELECT count(*) FROM products"); n != 0 {
			t.Fatalf("%d products after a Receive that failed", n)
		}
	})
}

func newShopReplica(t testing.TB, d sqlitetest.Driver, s Settings) (*Replica, *recorder) {
	t.Helper()
	db := shopDB(t, d)
	up := newRecorder()
	r, err := New(context.Background(), db, shopCodecs(t), Me(register), up, s)
	if err != nil {
		t.Fatal(err)
	}
	return r, up
}

func TestReceiveAppliesAndRecordsTheMessage(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, _ := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		b := builder{t, r.codecs}
		p1, p2 := product(1, 100), product(2, 200)
		got, err := r.Endpoint().Receive(ctx, b.down(7, b.upserts(p1, p2)))
		if err != nil {
			t.Fatal(err)
		}
		keys := got.Applied["products"]
		if len(keys) != 2 || keys[0] != keyOf(t, r.codecs, p1) || keys[1] != keyOf(t, r.codecs, p2) {
			t.Fatalf("Applied = %v; want the keys of both products", got.Applied)
		}
		if n := count(t, r.db, "SELECT last_applied FROM sync_replica"); n != 7 {
			t.Fatalf("last applied = %d; want 7", n)
		}
		rows, err := r.db.Query("SELECT id, name, price_cents, updated_at FROM products ORDER BY price_cents")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var read []Product
		for rows.Next() {
			p, err := magicsync.Scan[Product](r.codecs, rows)
			if err != nil {
				t.Fatal(err)
			}
			read = append(read, p)
		}
		if len(read) != 2 || read[0] != p1 || read[1] != p2 {
			t.Fatalf("the host reads back %+v; want %+v and %+v", read, p1, p2)
		}
	})
}

func TestRedeliveryChangesNothing(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, _ := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		b := builder{t, r.codecs}
		msg := b.down(1, b.upserts(product(1, 100)))
		if _, err := r.Endpoint().Receive(ctx, msg); err != nil {
			t.Fatal(err)
		}
		// The row changes locally in between (as a later message would).
		if _, err := r.Endpoint().Receive(ctx, b.down(2, b.upserts(product(1, 300)))); err != nil {
			t.Fatal(err)
		}
		got, err := r.Endpoint().Receive(ctx, msg)
		if err != nil || !got.Redelivered || len(got.Applied) != 0 {
			t.Fatalf("redelivery = %+v, %v; want Redelivered and nothing applied", got, err)
		}
		if n := count(t, r.db, "SELECT price_cents FROM products"); n != 300 {
			t.Fatalf("a redelivery changed the row: price %d", n)
		}
		// The last message applied, again: its id alone decides.
		got, err = r.Endpoint().Receive(ctx, b.down(2, b.upserts(product(1, 900))))
		if err != nil || !got.Redelivered || len(got.Applied) != 0 {
			t.Fatalf("the last message again = %+v, %v; want Redelivered and nothing applied", got, err)
		}
		if n := count(t, r.db, "SELECT price_cents FROM products"); n != 300 {
			t.Fatalf("the last message again changed the row: price %d", n)
		}
	})
}

func TestOlderMessageAfterNewerChangesNothing(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, _ := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(ctx, b.down(5, b.upserts(product(1, 500)))); err != nil {
			t.Fatal(err)
		}
		got, err := r.Endpoint().Receive(ctx, b.down(4, b.upserts(product(1, 400), product(2, 400))))
		if err != nil || !got.Redelivered {
			t.Fatalf("an older message = %+v, %v; want Redelivered", got, err)
		}
		if n := count(t, r.db, "SELECT count(*) FROM products"); n != 1 {
			t.Fatalf("an older message added rows: %d products", n)
		}
		if n := count(t, r.db, "SELECT last_applied FROM sync_replica"); n != 5 {
			t.Fatalf("last applied moved back to %d", n)
		}
	})
}

func TestFailureBeforeCommitLeavesDatabaseAsBefore(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, _ := newShopReplica(t, d, quietSettings())
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(context.Background(), b.down(1, b.upserts(product(1, 100)))); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r.beforeCommit = func(context.Context) error {
			cancel() // the process dies here, as far as this transaction knows
			return context.Canceled
		}
		if _, err := r.Endpoint().Receive(ctx, b.down(2, b.upserts(product(1, 999), product(2, 200)))); err == nil {
			t.Fatal("Receive returned nil though the commit never happened")
		}
		r.beforeCommit = nil
		if n := count(t, r.db, "SELECT count(*) FROM products"); n != 1 {
			t.Fatalf("an uncommitted message left %d products; want 1", n)
		}
		if n := count(t, r.db, "SELECT price_cents FROM products"); n != 100 {
			t.Fatalf("an uncommitted message changed the price to %d", n)
		}
		if n := count(t, r.db, "SELECT last_applied FROM sync_replica"); n != 1 {
			t.Fatalf("last applied = %d after a failed message; want 1", n)
		}
		// Redelivered, it applies.
		if _, err := r.Endpoint().Receive(context.Background(), b.down(2, b.upserts(product(1, 999), product(2, 200)))); err != nil {
			t.Fatal(err)
		}
		if n := count(t, r.db, "SELECT count(*) FROM products"); n != 2 {
			t.Fatalf("the redelivered message left %d products; want 2", n)
		}
	})
}

func TestBadRowsAreLeftOutReportedAndTheRestApplies(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		b := builder{t, r.codecs}
		good, refused, garbled := product(1, 100), product(2, -5), product(3, 300)
		ch := b.upserts(good, refused, garbled)
		ch.Upserts[2] = []byte{0x04, 0x05, 0xff} // does not decode
		got, err := r.Endpoint().Receive(ctx, b.down(1, ch))
		if err != nil {
			t.Fatal(err)
		}
		if got.Rejected != 2 || len(got.Applied["products"]) != 1 {
			t.Fatalf("Received = %+v; want one applied, two rejected", got)
		}
		if n := count(t, r.db, "SELECT count(*) FROM products WHERE id = ?", good.ID); n != 1 {
			t.Fatal("the good row was not applied")
		}
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		msg := up.next(t).msg
		if msg.Up.LastApplied != 1 {
			t.Fatalf("the upward message reports last applied %d; want 1", msg.Up.LastApplied)
		}
		reasons := map[magicsync.Key]string{}
		for _, rj := range msg.Up.Rejected {
			reasons[magicsync.Key(rj.Key)] = rj.Reason
		}
		if why := reasons[keyOf(t, r.codecs, refused)]; !strings.Contains(why, "CHECK") {
			t.Errorf("the refused row's reason = %q; want the CHECK constraint", why)
		}
		if why := reasons[keyOf(t, r.codecs, garbled)]; !strings.Contains(why, "does not decode") {
			t.Errorf("the garbled row's reason = %q; want 'does not decode'", why)
		}
	})
}

func TestParentsApplyBeforeChildrenAndDeletesChildrenFirst(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, _ := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		b := builder{t, r.codecs}
		p := product(1, 100)
		img := Image{ID: uuid.New(), ProductID: p.ID, URL: "https://example.org/1.png"}
		// The child comes first in the message.
		got, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(img), b.upserts(p)))
		if err != nil || got.Rejected != 0 {
			t.Fatalf("Receive = %+v, %v; want both rows applied", got, err)
		}
		del := func(row magicsync.Declarer) *syncpb.TableChanges {
			tc, _ := r.codecs.Of(row)
			return &syncpb.TableChanges{Table: tc.Name, Deletes: [][]byte{[]byte(keyOf(t, r.codecs, row))}}
		}
		got, err = r.Endpoint().Receive(ctx, b.down(2, del(p), del(img)))
		if err != nil || got.Rejected != 0 {
			t.Fatalf("Receive = %+v, %v; want both deletes applied", got, err)
		}
		if n := count(t, r.db, "SELECT count(*) FROM products") + count(t, r.db, "SELECT count(*) FROM images"); n != 0 {
			t.Fatalf("%d rows remain after deleting parent and child", n)
		}
	})
}

func TestNewerProtocolIsRefusedWithATypedError(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, _ := newShopReplica(t, d, quietSettings())
		b := builder{t, r.codecs}
		msg, err := wire.EncodeToReplica(&syncpb.ToReplica{Protocol: wire.Protocol + 1, Id: 1,
			Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Tables: []*syncpb.TableChanges{b.upserts(product(1, 100))}}}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Endpoint().Receive(context.Background(), msg)
		var pe *magicsync.ProtocolError
		if !errors.As(err, &pe) || pe.Got != wire.Protocol+1 {
			t.Fatalf("Receive = %v; want a *magicsync.ProtocolError", err)
		}
		if n := count(t, r.db, "SELECT count(*) FROM products"); n != 0 {
			t.Fatal("a message of a newer protocol was applied")
		}
		if _, err := r.Endpoint().Receive(context.Background(), []byte("garbage")); !errors.Is(err, ErrMalformed) {
			t.Fatalf("Receive(garbage) = %v; want ErrMalformed", err)
		}
	})
}

// price is a decimal: a driver.Valuer and sql.Scanner travelling as text.
type price struct{ s string }

func (p price) Value() (driver.Value, error) { return p.s, nil }

func (p *price) Scan(src any) error {
	switch v := src.(type) {
	case string:
		p.s = v
	case []byte:
		p.s = string(v)
	default:
		return fmt.Errorf("price from %T", src)
	}
	return nil
}

type Tariff struct {
	ID    int64 `db:"id" sync:"key"`
	Price price `db:"price"`
}

func (Tariff) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "tariffs", Mirror: magicsync.Catalog}
}

func TestInstallRefusesDecimalsInNumericColumns(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		codecs, err := magicsync.NewCodecs(Tariff{})
		if err != nil {
			t.Fatal(err)
		}
		db := sqlitetest.Open(t, d)
		mustExec(t, db, "CREATE TABLE tariffs (id INTEGER PRIMARY KEY, price NUMERIC NOT NULL)")
		err = Install(context.Background(), db, codecs)
		if err == nil || !strings.Contains(err.Error(), `declare it TEXT`) {
			t.Fatalf("Install = %v; want a refusal saying to declare the decimal column TEXT", err)
		}
		text := sqlitetest.Open(t, d)
		mustExec(t, text, "CREATE TABLE tariffs (id INTEGER PRIMARY KEY, price TEXT NOT NULL)")
		if err := Install(context.Background(), text, codecs); err != nil {
			t.Fatalf("a TEXT decimal column is refused: %v", err)
		}
	})
}

// fileLikeTheServer answers an upward message as the server does: a row —
// upsert or delete — whose origin (the first key column, here) is not the
// sending replica is refused, and the rest filed.
func fileLikeTheServer(t testing.TB, c *magicsync.Codecs, id uuid.UUID, m *syncpb.ToServer) []*syncpb.Rejected {
	t.Helper()
	var refused []*syncpb.Rejected
	for _, ch := range m.Up.Tables {
		for _, k := range append(slices.Clone(ch.UpsertKeys), ch.Deletes...) {
			vals, err := codec.DecodeTuple(k, nil)
			if err != nil {
				t.Fatal(err)
			}
			if vals[0].U != id {
				refused = append(refused, &syncpb.Rejected{Table: ch.Table, Key: k, Reason: "the row is another replica's"})
			}
		}
	}
	return refused
}

// The seed's setup: a placeholder of the replica's own row, renamed once it
// learns its id, with the rows of its own that point at it.
func TestPlaceholderRenamedDuringSetupGoesUpUnderItsIdOnly(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := shopDB(t, d)
		ctx := context.Background()
		who := &identity{}
		up := newRecorder()
		r, err := New(ctx, db, shopCodecs(t), who, up, quietSettings())
		if err != nil {
			t.Fatal(err)
		}
		placeholder := uuid.MustParse("00000000-0000-4000-8000-00000000beef")
		sale, voided := uuid.New(), uuid.New()
		mustExec(t, db, "INSERT INTO settings VALUES (?, 'footer', 'welcome', ?)", placeholder, t0)
		mustExec(t, db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", placeholder, sale, t0)
		mustExec(t, db, "INSERT INTO receipts VALUES (?, ?, 200, NULL, ?)", placeholder, voided, t0)
		mustExec(t, db, "DELETE FROM receipts WHERE id = ?", voided)
		// It learns its id: the placeholder and what points at it take it.
		mustExec(t, db, "UPDATE settings SET register_id = ? WHERE register_id = ?", register, placeholder)
		mustExec(t, db, "UPDATE receipts SET register_id = ? WHERE register_id = ?", register, placeholder)
		who.id.Store(&register)
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		m := up.took(t).msg
		for _, table := range []string{"settings", "receipts"} {
			if gone := deletes(m.Up, table); len(gone) != 0 {
				t.Errorf("%s: deletes %v went up for rows the server never had", table, gone)
			}
		}
		if rs := upRows[Receipt](t, r.codecs, m.Up); len(rs) != 1 || rs[0].ID != sale || rs[0].RegisterID != register {
			t.Errorf("receipts sent = %+v; want the sale under the replica's id", rs)
		}
		if ss := upRows[Setting](t, r.codecs, m.Up); len(ss) != 1 || ss[0].RegisterID != register {
			t.Errorf("settings sent = %+v; want the footer under the replica's id", ss)
		}
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(ctx, b.filed(1, "main", m.Sequence, fileLikeTheServer(t, r.codecs, register, m)...)); err != nil {
			t.Fatal(err)
		}
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Backlog != 0 || st.Lanes[0].Unsent != 0 || st.Lanes[0].Unconfirmed != 0 {
			t.Fatalf("status after the server filed the setup = %+v; want nothing waiting and an empty backlog", st)
		}
	})
}

// Once the database knows its id, a delete is a delete: a row the server
// may hold.
func TestDeletesAfterTheIdIsKnownGoUp(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := shopDB(t, d)
		ctx := context.Background()
		id := uuid.New()
		mustExec(t, db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, id, t0)
		// The first New learns the id, with nothing to drop.
		up := newRecorder()
		if _, err := New(ctx, db, shopCodecs(t), Me(register), up, quietSettings()); err != nil {
			t.Fatal(err)
		}
		mustExec(t, db, "DELETE FROM receipts WHERE id = ?", id)
		// A restart asks the Identity again.
		r, err := New(ctx, db, shopCodecs(t), Me(register), up, quietSettings())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		if gone := deletes(up.took(t).msg.Up, "receipts"); len(gone) != 1 {
			t.Fatalf("deletes sent = %v; want the receipt deleted after the id was known", gone)
		}
	})
}

// A provisioning applied before the replica knows its id may ask it to
// delete rows the server records it holding: those deletes go up.
func TestProvisioningsDeletesBeforeTheIdIsKnownGoUp(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := shopDB(t, d)
		ctx := context.Background()
		who := &identity{}
		up := newRecorder()
		r, err := New(ctx, db, shopCodecs(t), who, up, quietSettings())
		if err != nil {
			t.Fatal(err)
		}
		lost := Setting{RegisterID: register, Name: "brightness"}
		end, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{
			Snapshot: 9, Tables: []string{"products", "images"},
			Own: []*syncpb.TableKeys{{Table: "settings", Keys: [][]byte{[]byte(keyOf(t, r.codecs, lost))}}},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := r.Endpoint().Receive(ctx, end); err != nil || !got.Provisioned {
			t.Fatalf("EndSnapshot = %+v, %v", got, err)
		}
		who.id.Store(&register)
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		m := up.took(t).msg
		if gone := deletes(m.Up, "settings"); !m.Up.Resent || len(gone) != 1 || gone[0] != keyOf(t, r.codecs, lost) {
			t.Fatalf("sent %v; want the setting the server records deleted, as sent again", m.Up)
		}
	})
}
