package replica

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// The shop the tests sync: products (a catalog) and their images (a
// catalog pointing at products), receipts (a record), positions (a record
// sent in its own lane) and settings. It is not internal/shoptest's on
// purpose: the replica's tests need what the server's shop lacks — a
// foreign key between catalogs, a record in a lane of its own, a CHECK
// the host's database enforces on a catalog — and no shop_id grouping.

type Product struct {
	ID         uuid.UUID `db:"id" sync:"key"`
	Name       string    `db:"name"`
	PriceCents int64     `db:"price_cents"`
	UpdatedAt  time.Time `db:"updated_at" sync:"version"`
}

func (Product) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "products", Mirror: magicsync.Catalog}
}

type Image struct {
	ID        uuid.UUID `db:"id" sync:"key"`
	ProductID uuid.UUID `db:"product_id"`
	URL       string    `db:"url"`
}

func (Image) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "images", Mirror: magicsync.Catalog}
}

type Receipt struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	TotalCents int64     `db:"total_cents"`
	Note       *string   `db:"note"`
	At         time.Time `db:"at" sync:"version"`
}

func (Receipt) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "receipts", Mirror: magicsync.Record, Origin: "register_id"}
}

type Position struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         int64     `db:"id" sync:"key"`
	Lat        float64   `db:"lat"`
	At         time.Time `db:"at" sync:"version"`
}

func (Position) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "positions", Mirror: magicsync.Record, Origin: "register_id"}
}

type Setting struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Name       string    `db:"name" sync:"key"`
	Value      string    `db:"value" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

func (Setting) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "settings", Mirror: magicsync.Setting, Origin: "register_id"}
}

// productsSchema creates the products table, with the CHECK on its price
// that the host's database enforces (shoptest's has none).
const productsSchema = `
CREATE TABLE products (id TEXT PRIMARY KEY, name TEXT NOT NULL, price_cents INTEGER NOT NULL CHECK (price_cents >= 0), updated_at TIMESTAMP NOT NULL);`

// shopSchema creates every table of the shop above.
const shopSchema = productsSchema + `
CREATE TABLE images (id TEXT PRIMARY KEY, product_id TEXT NOT NULL REFERENCES products (id), url TEXT NOT NULL);
CREATE TABLE receipts (register_id TEXT NOT NULL, id TEXT NOT NULL, total_cents INTEGER NOT NULL, note TEXT, at TIMESTAMP NOT NULL, PRIMARY KEY (register_id, id));
CREATE TABLE positions (register_id TEXT NOT NULL, id INTEGER NOT NULL, lat REAL NOT NULL, at TIMESTAMP NOT NULL, PRIMARY KEY (register_id, id));
CREATE TABLE settings (register_id TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, changed_at TIMESTAMP NOT NULL, PRIMARY KEY (register_id, name));
`

func shopCodecs(t testing.TB) *magicsync.Codecs {
	t.Helper()
	c, err := magicsync.NewCodecs(Product{}, Image{}, Receipt{}, Position{}, Setting{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// shopDB opens a database of the shop's tables with the engine installed.
func shopDB(t testing.TB, d sqlitetest.Driver) *sql.DB {
	t.Helper()
	db := sqlitetest.Open(t, d)
	mustExec(t, db, shopSchema)
	if err := Install(context.Background(), db, shopCodecs(t)); err != nil {
		t.Fatal(err)
	}
	return db
}

func mustExec(t testing.TB, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// asEngine runs query as the engine writes its own tables: in a
// transaction marked as the engine's, which the guards of its tables let
// through.
func asEngine(t testing.TB, db *sql.DB, query string, args ...any) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	for _, q := range []struct {
		sql  string
		args []any
	}{{markWriting, nil}, {query, args}, {unmarkWriting, nil}} {
		if _, err := tx.Exec(q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func count(t testing.TB, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// sent is one message an uplink was given.
type sent struct {
	lane string
	msg  *syncpb.ToServer
}

// recorder is an Uplink that records what it is given. fail, when set,
// decides the outcome of each send.
type recorder struct {
	mu   sync.Mutex
	sent []sent
	got  chan sent
	fail func(ctx context.Context, lane string) error
}

func newRecorder() *recorder { return &recorder{got: make(chan sent, 1000)} }

func (r *recorder) Send(ctx context.Context, id uuid.UUID, lane string, body []byte) error {
	if r.fail != nil {
		if err := r.fail(ctx, lane); err != nil {
			return err
		}
	}
	m, err := wire.DecodeToServer(body)
	if err != nil {
		return TransportError(false, err)
	}
	if uuid.UUID(m.Replica) != id || m.Lane != lane {
		return TransportError(false, errors.New("replica or lane differ from the envelope"))
	}
	s := sent{lane: lane, msg: m}
	r.mu.Lock()
	r.sent = append(r.sent, s)
	r.mu.Unlock()
	r.got <- s
	return nil
}

// next waits for the next message sent, failing the test after 10 s.
func (r *recorder) next(t testing.TB) sent {
	t.Helper()
	select {
	case s := <-r.got:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no message was sent within 10 s")
		return sent{}
	}
}

// took returns the message a sendOnce just sent, failing the test at once
// when it sent none: sendOnce returns after the uplink did.
func (r *recorder) took(t testing.TB) sent {
	t.Helper()
	select {
	case s := <-r.got:
		return s
	default:
		t.Fatal("nothing was sent")
		return sent{}
	}
}

// nextWith waits for a message in lane carrying rows of table.
func (r *recorder) nextWith(t testing.TB, lane, table string) sent {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s := <-r.got:
			if s.lane == lane && tableOf(s.msg.Up, table) != nil {
				return s
			}
		case <-deadline:
			t.Fatalf("no message with rows of %s was sent in lane %s within 10 s", table, lane)
		}
	}
}

func tableOf(up *syncpb.Up, table string) *syncpb.TableChanges {
	for _, t := range up.GetTables() {
		if t.Table == table {
			return t
		}
	}
	return nil
}

// builder makes messages as the server does.
type builder struct {
	t      testing.TB
	codecs *magicsync.Codecs
}

// rows encodes catalog rows of one type as a table's changes.
func (b builder) upserts(rows ...magicsync.Declarer) *syncpb.TableChanges {
	b.t.Helper()
	tc, err := b.codecs.Of(rows[0])
	if err != nil {
		b.t.Fatal(err)
	}
	cols := downColumns(tc)
	ch := &syncpb.TableChanges{Table: tc.Name, Columns: tc.ColumnNames(cols)}
	for _, row := range rows {
		vals, err := tc.Values(row, nil)
		if err != nil {
			b.t.Fatal(err)
		}
		down := make([]codec.Value, len(cols))
		for i, c := range cols {
			down[i] = vals[c]
		}
		ch.Upserts = append(ch.Upserts, wire.AppendTuple(nil, down))
		ch.UpsertKeys = append(ch.UpsertKeys, []byte(tc.KeyOfRow(vals)))
	}
	return ch
}

func (b builder) down(id uint64, tables ...*syncpb.TableChanges) []byte {
	b.t.Helper()
	msg, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: id, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Tables: tables}}})
	if err != nil {
		b.t.Fatal(err)
	}
	return msg
}

func (b builder) filed(id uint64, lane string, seq uint64, refused ...*syncpb.Rejected) []byte {
	b.t.Helper()
	msg, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: id, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Lane: lane, Sequence: seq, Refused: refused}}})
	if err != nil {
		b.t.Fatal(err)
	}
	return msg
}

func keyOf(t testing.TB, c *magicsync.Codecs, row magicsync.Declarer) magicsync.Key {
	t.Helper()
	tc, err := c.Of(row)
	if err != nil {
		t.Fatal(err)
	}
	k, err := tc.KeyOf(row)
	if err != nil {
		t.Fatal(err)
	}
	return magicsync.Key(k)
}

// fakeClock hands out timers the test fires by hand, and records what each
// wait asked for.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	waits  chan time.Duration
	timers []chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), waits: make(chan time.Duration, 1000)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	c.timers = append(c.timers, ch)
	c.mu.Unlock()
	c.waits <- d
	return ch
}

// fireAll fires every timer handed out so far.
func (c *fakeClock) fireAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.timers {
		select {
		case ch <- c.now:
		default:
		}
	}
	c.timers = nil
}

var register = uuid.MustParse("00000000-0000-4000-8000-000000000001")

func quietSettings() Settings {
	return Settings{Idle: 20 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond, DigestsEvery: -1, Logger: discard(),
		Wishes: Wishes{Handle(Direct[Setting]{})}}
}

// runReplica runs r.Run until the test ends, and checks it returned.
func runReplica(t testing.TB, r *Replica) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10 s of its context ending")
		}
	})
}
