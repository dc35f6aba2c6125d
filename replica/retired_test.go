package replica

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Ware is a catalog row the server retires rather than deletes while a
// register's receipt lines still point at it.
type Ware struct {
	ID      string `db:"id" sync:"key"`
	Name    string `db:"name"`
	Retired bool   `db:"retired"`
}

func (Ware) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "wares", Mirror: magicsync.Catalog, Retired: "retired"}
}

// ReceiptLine is a register's own row pointing at a ware.
type ReceiptLine struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         int64     `db:"id" sync:"key"`
	WareID     string    `db:"ware_id"`
	At         time.Time `db:"at" sync:"version"`
}

func (ReceiptLine) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "receipt_lines", Mirror: magicsync.Record, Origin: "register_id"}
}

const retiredSchema = `
CREATE TABLE wares (id TEXT PRIMARY KEY, name TEXT NOT NULL, retired INTEGER NOT NULL DEFAULT 0);
CREATE TABLE receipt_lines (register_id TEXT NOT NULL, id INTEGER NOT NULL, ware_id TEXT NOT NULL REFERENCES wares, at TIMESTAMP NOT NULL, PRIMARY KEY (register_id, id));
`

// retiredShop is a replica of wares and receipt lines, and a builder of
// the server's messages to it.
type retiredShop struct {
	r  *Replica
	db *sql.DB
	b  builder
	up *recorder
}

func newRetiredShop(t *testing.T, d sqlitetest.Driver) *retiredShop {
	t.Helper()
	db, codecs := retiredFile(t, d)
	up := newRecorder()
	r, err := New(context.Background(), db, codecs, Me(register), up, retiredSettings())
	if err != nil {
		t.Fatal(err)
	}
	return &retiredShop{r: r, db: db, b: builder{t, codecs}, up: up}
}

// retiredFile is a file of the wares and the lines, the engine installed.
func retiredFile(t *testing.T, d sqlitetest.Driver) (*sql.DB, *magicsync.Codecs) {
	t.Helper()
	codecs, err := magicsync.NewCodecs(Ware{}, ReceiptLine{})
	if err != nil {
		t.Fatal(err)
	}
	db := sqlitetest.Open(t, d)
	mustExec(t, db, retiredSchema)
	if err := Install(context.Background(), db, codecs); err != nil {
		t.Fatal(err)
	}
	return db, codecs
}

// retiredSettings are the replica's settings over such a file: no
// setting here.
func retiredSettings() Settings {
	settings := quietSettings()
	settings.Wishes = nil
	return settings
}

// receive applies a message, failing the test when it does not apply.
func (s *retiredShop) receive(t *testing.T, msg []byte) Received {
	t.Helper()
	got, err := s.r.Endpoint().Receive(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (s *retiredShop) deleteWares(ids ...string) *syncpb.TableChanges {
	ch := &syncpb.TableChanges{Table: "wares"}
	for _, id := range ids {
		ch.Deletes = append(ch.Deletes, []byte(codec.KeyOfValues(wire.TextValue(id))))
	}
	return ch
}

// ware reads a ware: whether the replica holds it, and whether marked
// retired.
func (s *retiredShop) ware(t *testing.T, id string) (held, retired bool) {
	t.Helper()
	err := s.db.QueryRow("SELECT retired FROM wares WHERE id = ?", id).Scan(&retired)
	if err == sql.ErrNoRows {
		return false, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true, retired
}

// retained lists the keys sync_retained holds of wares.
func (s *retiredShop) retained(t *testing.T) int {
	t.Helper()
	return count(t, s.db, "SELECT count(*) FROM sync_retained WHERE tbl = 'wares'")
}

// waresDigest is the digest of wares the replica would send.
func (s *retiredShop) waresDigest(t *testing.T) *syncpb.Digest {
	t.Helper()
	ctx := context.Background()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ds, err := s.r.digests(ctx, conn, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Table == "wares" {
			return d
		}
	}
	t.Fatal("no digest of wares")
	return nil
}

// sumOf is the digest sum of wares as the server counts them: the rows it
// sends, none retired.
func (s *retiredShop) sumOf(rows ...magicsync.Declarer) []byte {
	var sum digest.Sum
	for _, row := range s.b.upserts(rows...).Upserts {
		sum.Add(row)
	}
	return sum.Bytes()
}

// The server's delete of a ware a receipt line points at keeps the ware,
// marked retired: nothing is rejected, the line still reads its ware, and
// the digest leaves the retired ware out, as the server's does. Once the
// host deletes the line, its next send lets the ware go, without waiting
// for the server.
func TestRetiredRowAReceiptLinePointsAtIsKeptUntilTheLineGoes(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		ctx := context.Background()
		s := newRetiredShop(t, d)
		soap, salt := Ware{ID: "soap", Name: "Soap"}, Ware{ID: "salt", Name: "Salt"}
		s.receive(t, s.b.down(1, s.b.upserts(soap, salt)))
		mustExec(t, s.db, "INSERT INTO receipt_lines (register_id, id, ware_id, at) VALUES (?, 1, 'soap', ?)", register.String(), time.Now())

		got := s.receive(t, s.b.down(2, s.deleteWares("soap")))
		if got.Rejected != 0 || len(got.Applied["wares"]) != 0 {
			t.Fatalf("Received %+v; want the delete neither rejected nor listed as applied", got)
		}
		if held, retired := s.ware(t, "soap"); !held || !retired {
			t.Fatalf("after the delete the replica holds soap: %v, retired: %v; want it kept, marked retired", held, retired)
		}
		if n := s.retained(t); n != 1 {
			t.Fatalf("sync_retained holds %d wares; want soap", n)
		}
		if n := count(t, s.db, "SELECT count(*) FROM sync_rejected"); n != 0 {
			t.Fatalf("%d rows recorded as rejected; want none", n)
		}
		if dg := s.waresDigest(t); dg.Rows != 1 || string(dg.Sum) != string(s.sumOf(salt)) {
			t.Fatalf("the digest counts %d wares, sum %x; want salt alone, %x", dg.Rows, dg.Sum, s.sumOf(salt))
		}
		st, err := s.r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Retained["wares"] != 1 {
			t.Fatalf("Status.Retained = %v; want one ware", st.Retained)
		}
		// A message that changes nothing about soap keeps it.
		s.receive(t, s.b.down(3, s.b.upserts(Ware{ID: "salt", Name: "Sea salt"})))
		if held, _ := s.ware(t, "soap"); !held {
			t.Fatal("a later message let soap go while a line points at it")
		}

		// The host deletes its line, through its own tables; the send
		// that carries the delete up lets soap go.
		mustExec(t, s.db, "DELETE FROM receipt_lines WHERE id = 1")
		if _, err := s.r.sendOnce(ctx, s.r.lane("main")); err != nil {
			t.Fatal(err)
		}
		if lines := tableOf(s.up.took(t).msg.Up, "receipt_lines"); lines == nil || len(lines.Deletes) != 1 {
			t.Fatalf("the send carried %v; want the line's delete", lines)
		}
		if held, _ := s.ware(t, "soap"); held {
			t.Fatal("soap is still held after the last line pointing at it went")
		}
		if n := s.retained(t); n != 0 {
			t.Fatalf("sync_retained holds %d wares; want none", n)
		}
		if held, _ := s.ware(t, "salt"); !held {
			t.Fatal("the sweep let salt go, which was never retired")
		}
	})
}

// A delete of a ware nothing points at deletes it, as it would in a table
// without Retired.
func TestRetiredRowNothingPointsAtIsDeleted(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		s := newRetiredShop(t, d)
		s.receive(t, s.b.down(1, s.b.upserts(Ware{ID: "soap", Name: "Soap"}, Ware{ID: "salt", Name: "Salt"})))
		mustExec(t, s.db, "INSERT INTO receipt_lines (register_id, id, ware_id, at) VALUES (?, 1, 'salt', ?)", register.String(), time.Now())
		got := s.receive(t, s.b.down(2, s.deleteWares("soap")))
		if got.Rejected != 0 || len(got.Applied["wares"]) != 1 {
			t.Fatalf("Received %+v; want the delete applied", got)
		}
		if held, _ := s.ware(t, "soap"); held {
			t.Fatal("a ware nothing points at was kept")
		}
		if n := s.retained(t); n != 0 {
			t.Fatalf("sync_retained holds %d wares; want none", n)
		}
	})
}

// A provisioning that does not stage a ware a line points at keeps it,
// marked retired; a ware nothing points at goes.
func TestRetiredRowAProvisioningLeavesOutIsKeptWhileALinePointsAtIt(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		s := newRetiredShop(t, d)
		soap, salt, sugar := Ware{ID: "soap", Name: "Soap"}, Ware{ID: "salt", Name: "Salt"}, Ware{ID: "sugar", Name: "Sugar"}
		s.receive(t, s.b.down(1, s.b.upserts(soap, salt, sugar)))
		mustExec(t, s.db, "INSERT INTO receipt_lines (register_id, id, ware_id, at) VALUES (?, 1, 'soap', ?)", register.String(), time.Now())
		stage, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: 2, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Snapshot: 7, Tables: []*syncpb.TableChanges{s.b.upserts(salt)}}}})
		if err != nil {
			t.Fatal(err)
		}
		s.receive(t, stage)
		end, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: 3, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{Snapshot: 7, Tables: []string{"wares"}}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.receive(t, end); !got.Provisioned || got.Rejected != 0 {
			t.Fatalf("EndSnapshot = %+v; want it provisioned, nothing rejected", got)
		}
		if held, retired := s.ware(t, "soap"); !held || !retired {
			t.Fatalf("after the provisioning the replica holds soap: %v, retired: %v; want it kept, marked retired", held, retired)
		}
		if held, _ := s.ware(t, "sugar"); held {
			t.Fatal("the provisioning kept sugar, which nothing points at")
		}
		if n := s.retained(t); n != 1 {
			t.Fatalf("sync_retained holds %d wares; want soap", n)
		}
		if dg := s.waresDigest(t); string(dg.Sum) != string(s.sumOf(salt)) {
			t.Fatalf("the digest sum %x; want salt's alone, %x", dg.Sum, s.sumOf(salt))
		}
	})
}

// The server sending a retained ware again, no longer retired, has the
// replica hold it as any other: it leaves sync_retained, a later sweep
// keeps it when the line goes, and the digest counts it again.
func TestRetainedRowTheServerSendsAgainIsHeldAgain(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		ctx := context.Background()
		s := newRetiredShop(t, d)
		soap := Ware{ID: "soap", Name: "Soap"}
		s.receive(t, s.b.down(1, s.b.upserts(soap)))
		mustExec(t, s.db, "INSERT INTO receipt_lines (register_id, id, ware_id, at) VALUES (?, 1, 'soap', ?)", register.String(), time.Now())
		s.receive(t, s.b.down(2, s.deleteWares("soap")))
		if n := s.retained(t); n != 1 {
			t.Fatalf("sync_retained holds %d wares; want soap", n)
		}

		back := Ware{ID: "soap", Name: "Soap, back"}
		got := s.receive(t, s.b.down(3, s.b.upserts(back)))
		if got.Rejected != 0 || len(got.Applied["wares"]) != 1 {
			t.Fatalf("Received %+v; want the upsert applied", got)
		}
		if held, retired := s.ware(t, "soap"); !held || retired {
			t.Fatalf("the replica holds soap: %v, retired: %v; want it held, not retired", held, retired)
		}
		if n := s.retained(t); n != 0 {
			t.Fatalf("sync_retained holds %d wares; want none once the server sent soap again", n)
		}
		if dg := s.waresDigest(t); dg.Rows != 1 || string(dg.Sum) != string(s.sumOf(back)) {
			t.Fatalf("the digest counts %d wares, sum %x; want soap again, %x", dg.Rows, dg.Sum, s.sumOf(back))
		}
		mustExec(t, s.db, "DELETE FROM receipt_lines WHERE id = 1")
		if _, err := s.r.sendOnce(ctx, s.r.lane("main")); err != nil {
			t.Fatal(err)
		}
		if held, _ := s.ware(t, "soap"); !held {
			t.Fatal("a sweep let soap go, which the server holds the replica to have")
		}
	})
}

// Every sweep asks, of each row kept retired, whether a row points at it:
// a foreign key whose columns no index leads with has that read the whole
// child table, after every write of the host's. New warns of it, naming
// the index to add, and says nothing once it is there.
func TestNewWarnsOfAnUnindexedForeignKeyToARetiringCatalog(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		ctx := context.Background()
		db, codecs := retiredFile(t, d)
		open := func() string {
			t.Helper()
			var logs bytes.Buffer
			settings := retiredSettings()
			settings.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			if _, err := New(ctx, db, codecs, Me(register), newRecorder(), settings); err != nil {
				t.Fatal(err)
			}
			return logs.String()
		}
		logged := open()
		const want = `CREATE INDEX IF NOT EXISTS \"receipt_lines_ware_id\" ON \"receipt_lines\" (\"ware_id\")`
		if !strings.Contains(logged, "has no index") || !strings.Contains(logged, want) {
			t.Fatalf("New logged %q; want a warning naming %s", logged, want)
		}
		mustExec(t, db, `CREATE INDEX IF NOT EXISTS "receipt_lines_ware_id" ON "receipt_lines" ("ware_id")`)
		if logged := open(); strings.Contains(logged, "has no index") {
			t.Fatalf("with the index, New logged %q", logged)
		}
	})
}
