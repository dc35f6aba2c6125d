package server_test

// shop_test.go holds the shop the server's tests open, and the fake replica
// they play it with.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The shop is shoptest's. These tests sync its products (grouped by
// shop), currencies (broadcast), tasks (assigned to a register) and
// receipts (filed from registers).

type (
	Product  = shoptest.Product
	Currency = shoptest.Currency
	Task     = shoptest.Task
	Receipt  = shoptest.Receipt
)

// shopSchema creates the shop's tables, for the tests that start from an
// empty database.
const shopSchema = shoptest.PostgresDDL

var shopOptions = withCapture(server.Options{Replicas: shoptest.Replicas})

// captureVar, set to "logical", opens the tests' shops with capture by
// logical replication (server.CaptureLogical) on a server with
// wal_level=logical: TestWhatTheCaptureDecidesHoldsUnderLogicalCapture
// runs the tests of what the capture decides again so.
const captureVar = "MAGICSYNC_SERVER_TEST_CAPTURE"

// logicalCapture reports whether this run captures by logical replication.
func logicalCapture() bool { return os.Getenv(captureVar) == "logical" }

// withCapture returns opts capturing as the run asks.
func withCapture(opts server.Options) server.Options {
	if logicalCapture() {
		opts.Capture = server.CaptureLogical
	}
	return opts
}

// newCapturePool is a pool on a database of the shop's tables, migrated,
// on a server fit for the run's capture.
func newCapturePool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	if logicalCapture() {
		return shopserver.NewLogicalPool(t)
	}
	return shopserver.NewPool(t)
}

func shopCodecs(t testing.TB) *magicsync.Codecs {
	t.Helper()
	return shoptest.Codecs(t, Product{}, Currency{}, Task{}, Receipt{})
}

// shop is a test's database and server.
type shop struct {
	t      testing.TB
	ctx    context.Context
	pool   *pgxpool.Pool
	s      *server.Server
	codecs *magicsync.Codecs
	shopA  uuid.UUID
	shopB  uuid.UUID
	// stop stops the server's Run, when the test runs it (runServer).
	stop func()
}

// setupShop takes a database holding the shop's tables, migrated, and
// installs the triggers.
func setupShop(t testing.TB) (*pgxpool.Pool, *magicsync.Codecs) {
	t.Helper()
	pool := newCapturePool(t)
	codecs := shopCodecs(t)
	shopserver.InstallTriggers(t, pool, codecs, shopOptions)
	return pool, codecs
}

func newShop(t testing.TB, opts server.Options) *shop {
	t.Helper()
	pool, codecs := setupShop(t)
	ctx := context.Background()
	if opts.Replicas == "" {
		opts.Replicas = shopOptions.Replicas
	}
	s, err := server.New(ctx, pool, codecs, withCapture(opts))
	if err != nil {
		t.Fatal(err)
	}
	sh := &shop{t: t, ctx: ctx, pool: pool, s: s, codecs: codecs, shopA: uuid.New(), shopB: uuid.New()}
	sh.exec(`INSERT INTO shop.shops VALUES ($1, 'A'), ($2, 'B')`, sh.shopA, sh.shopB)
	return sh
}

// openShop installs the engine on pool, whose host schema is in place,
// for codecs, and opens the server of a shop with shops A and B.
func openShop(t testing.TB, pool *pgxpool.Pool, codecs *magicsync.Codecs) *shop {
	t.Helper()
	ctx := context.Background()
	if err := server.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	shopserver.InstallTriggers(t, pool, codecs, shopOptions)
	s, err := server.New(ctx, pool, codecs, shopOptions)
	if err != nil {
		t.Fatal(err)
	}
	sh := &shop{t: t, ctx: ctx, pool: pool, s: s, codecs: codecs, shopA: uuid.New(), shopB: uuid.New()}
	sh.exec(`INSERT INTO shop.shops VALUES ($1, 'A'), ($2, 'B')`, sh.shopA, sh.shopB)
	return sh
}

func (sh *shop) exec(sql string, args ...any) {
	sh.t.Helper()
	if _, err := sh.pool.Exec(sh.ctx, sql, args...); err != nil {
		sh.t.Fatalf("%s: %v", sql, err)
	}
}

func (sh *shop) pass() {
	sh.t.Helper()
	if err := sh.s.Pass(sh.ctx); err != nil {
		sh.t.Fatal(err)
	}
}

func (sh *shop) register(shopID uuid.UUID) *fake {
	sh.t.Helper()
	id := uuid.New()
	sh.exec(`INSERT INTO shop.registers VALUES ($1, $2)`, id, shopID)
	return newFake(sh, id)
}

func (sh *shop) product(shopID uuid.UUID, name string, price int64) uuid.UUID {
	sh.t.Helper()
	id := uuid.New()
	sh.exec(`INSERT INTO shop.products (id, shop_id, name, price_cents) VALUES ($1, $2, $3, $4)`, id, shopID, name, price)
	return id
}

// fake is a replica as the tests play it: it applies what the server sends
// the way the replica engine does (staging snapshots), and keeps each
// table's rows by key.
type fake struct {
	sh       *shop
	id       uuid.UUID
	held     map[string]map[magicsync.Key][]byte
	staged   map[string]map[magicsync.Key][]byte
	snapshot uint64
	applied  uint64
	msgs     []*syncpb.ToReplica
	filed    []*syncpb.Filed
	seq      uint64
}

func newFake(sh *shop, id uuid.UUID) *fake {
	return &fake{sh: sh, id: id, held: map[string]map[magicsync.Key][]byte{}}
}

func (f *fake) apply(m *syncpb.ToReplica) {
	t := f.sh.t
	t.Helper()
	if m.Id <= f.applied {
		t.Fatalf("replica %s: message %d after %d: ids must increase", f.id, m.Id, f.applied)
	}
	f.msgs = append(f.msgs, m)
	switch b := m.Body.(type) {
	case *syncpb.ToReplica_Down:
		target := f.held
		if b.Down.Snapshot != 0 {
			if b.Down.Snapshot != f.snapshot {
				f.snapshot, f.staged = b.Down.Snapshot, map[string]map[magicsync.Key][]byte{}
			}
			target = f.staged
		}
		for _, tc := range b.Down.Tables {
			rows := target[tc.Table]
			if rows == nil {
				rows = map[magicsync.Key][]byte{}
				target[tc.Table] = rows
			}
			for i, u := range tc.Upserts {
				rows[magicsync.Key(tc.UpsertKeys[i])] = u
			}
			for _, d := range tc.Deletes {
				delete(rows, magicsync.Key(d))
			}
		}
	case *syncpb.ToReplica_EndSnapshot:
		if b.EndSnapshot.Snapshot != f.snapshot && f.staged == nil {
			f.staged = map[string]map[magicsync.Key][]byte{}
		}
		for _, tbl := range b.EndSnapshot.Tables {
			f.held[tbl] = f.staged[tbl]
			if f.held[tbl] == nil {
				f.held[tbl] = map[magicsync.Key][]byte{}
			}
		}
		f.staged, f.snapshot = nil, 0
	case *syncpb.ToReplica_Filed:
		f.filed = append(f.filed, b.Filed)
	}
	f.applied = m.Id
}

// next takes one message, waiting up to d.
func (f *fake) next(d time.Duration) (*syncpb.ToReplica, bool) {
	t := f.sh.t
	t.Helper()
	ctx, cancel := context.WithTimeout(f.sh.ctx, d)
	defer cancel()
	msg, ok, err := f.sh.s.Endpoint().Next(ctx, f.id, server.Applied{})
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return nil, false
	}
	m, err := wire.DecodeToReplica(msg.Body)
	if err != nil {
		t.Fatal(err)
	}
	if m.Id != msg.ID {
		t.Fatalf("message id %d, body says %d", msg.ID, m.Id)
	}
	return m, true
}

// sync takes, applies and acknowledges messages until the server has none
// queued for the replica. A Next that comes back empty is not enough: on
// a loaded machine it may have run out of time while a message was built.
func (f *fake) sync() int {
	t := f.sh.t
	t.Helper()
	n, empty := 0, 0
	for {
		m, ok := f.next(150 * time.Millisecond)
		if !ok {
			if st := statusOf(t, f.sh, f.id); !st.Provisioning && st.Queued == 0 {
				return n
			}
			if empty++; empty > 100 {
				t.Fatalf("replica %s does not settle", f.id)
			}
			continue
		}
		f.apply(m)
		if err := f.sh.s.Endpoint().Ack(f.sh.ctx, f.id, m.Id); err != nil {
			t.Fatal(err)
		}
		n++
		if n > 10000 {
			t.Fatal("no end of messages")
		}
	}
}

// names lists the names of the products (or the keys of another table)
// the replica holds, sorted.
func (f *fake) names(table string) []string {
	var out []string
	for k, tuple := range f.held[table] {
		vals, err := wire.DecodeTuple(tuple, nil)
		if err != nil {
			f.sh.t.Fatal(err)
		}
		switch table {
		case "products":
			out = append(out, vals[2].S)
		case "currencies":
			out = append(out, vals[0].S)
		case "tasks":
			out = append(out, vals[2].S)
		default:
			out = append(out, k.String())
		}
	}
	sort.Strings(out)
	return out
}

// digest is the fingerprint of what the replica holds of a table.
func (f *fake) digest(table string) *syncpb.Digest {
	var s digest.Sum
	for _, tuple := range f.held[table] {
		s.Add(tuple)
	}
	return &syncpb.Digest{Table: table, Sum: s.Bytes(), Rows: s.Rows(), AsOf: f.applied}
}

// send files an upward message from this replica.
func (f *fake) send(up *syncpb.Up) error {
	f.seq++
	return f.sendSeq(f.seq, up)
}

func (f *fake) sendSeq(seq uint64, up *syncpb.Up) error {
	return f.sh.s.Endpoint().Receive(f.sh.ctx, f.id, "main", shoptest.Upload(f.sh.t, f.id, "main", seq, up))
}

func equal(a, b []string) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func (f *fake) expect(table string, want ...string) {
	f.sh.t.Helper()
	if want == nil {
		want = []string{}
	}
	got := f.names(table)
	if got == nil {
		got = []string{}
	}
	if !equal(got, want) {
		f.sh.t.Errorf("replica %s holds %s %v, want %v", f.id, table, got, want)
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func newPool(t testing.TB) *pgxpool.Pool { return pgtest.NewPool(t) }
