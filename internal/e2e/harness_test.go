package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The shop is shoptest's. These tests sync its products (grouped by
// shop), notices (to every register), drawers (assigned to one) and
// receipts (the registers' records).

type (
	Product = shoptest.Product
	Notice  = shoptest.Notice
	Drawer  = shoptest.Drawer
	Receipt = shoptest.Receipt
)

// sqliteSchema creates the shop's tables on a register.
const sqliteSchema = shoptest.SQLiteDDL

func shopCodecs(t testing.TB) *magicsync.Codecs {
	t.Helper()
	return shoptest.Codecs(t, Product{}, Notice{}, Drawer{}, Receipt{})
}

// officeOptions are the options of a head office's engine, a headOffice's
// or an office's.
func officeOptions() server.Options {
	opts := server.Options{Replicas: shoptest.Replicas, Logger: quiet(), PassEvery: 50 * time.Millisecond, Schema: engineSchema(), Commands: true}
	if logicalCapture() {
		opts.Capture = server.CaptureLogical
	}
	opts.Linger = linger()
	return opts
}

// lingerVar, set to a duration, has the suite's head offices linger that
// long (server.Options.Linger); TestSuiteUnderLogicalCapture sets it.
const lingerVar = "MAGICSYNC_E2E_LINGER"

// linger is the head offices' Options.Linger in this run: lingerVar's, or
// none.
func linger() time.Duration {
	d, err := time.ParseDuration(os.Getenv(lingerVar))
	if err != nil {
		return 0
	}
	return d
}

// captureVar, set to "logical", runs the suite's head offices with
// server.CaptureLogical, on a server with wal_level=logical;
// TestSuiteUnderLogicalCapture runs the suite again with it set.
const captureVar = "MAGICSYNC_E2E_CAPTURE"

// logicalCapture reports whether the head offices capture by logical
// replication in this run.
func logicalCapture() bool { return os.Getenv(captureVar) == "logical" }

// schemaVar names the schema of the engine's own tables in these tests
// (server.Options.Schema); unset, public. TestSuiteInAnotherSchema runs
// the suite again with it set.
const schemaVar = "MAGICSYNC_E2E_ENGINE_SCHEMA"

// engineSchema is the schema of the engine's own tables in these tests.
func engineSchema() string {
	if s := os.Getenv(schemaVar); s != "" {
		return s
	}
	return "public"
}

// eng writes the tests' own statements on the engine's tables, written
// public.sync_…, in the schema the engine uses.
func eng(query string) string {
	return strings.ReplaceAll(query, "public.sync_", engineSchema()+".sync_")
}

// newOfficeDatabase returns the connection string of a database for this
// test alone holding the shop, migrated, with the triggers of codecs.
func newOfficeDatabase(t testing.TB, codecs *magicsync.Codecs) string {
	t.Helper()
	return newOfficeDatabaseWith(t, codecs, "")
}

// newOfficeDatabaseWith is newOfficeDatabase with the host's statements
// ddl run after the shop's tables and before the triggers.
func newOfficeDatabaseWith(t testing.TB, codecs *magicsync.Codecs, ddl string) string {
	t.Helper()
	newDatabase := shopserver.NewDatabaseIn
	if logicalCapture() {
		newDatabase = shopserver.NewLogicalDatabaseIn
	}
	url := newDatabase(t, engineSchema())
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if ddl != "" {
		mustExec(t, pool, ddl)
	}
	shopserver.InstallTriggers(t, pool, codecs, officeOptions())
	return url
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// headOffice is the server side of a test.
type headOffice struct {
	t    testing.TB
	pool *pgxpool.Pool
	// s is the engine, for the test's own goroutine; the registers'
	// loops take it from engine(), as restoreSnapshot replaces it.
	s      *server.Server
	live   atomic.Pointer[server.Server]
	stop   func() // stops the engine's Run
	opts   server.Options
	codecs *magicsync.Codecs
	// tune, when set, changes the settings of the registers attached
	// after it is.
	tune func(*replica.Settings)
	// sqliteDDL, when set, is run on a fresh register's file after the
	// shop's tables.
	sqliteDDL string
}

func newHeadOffice(t testing.TB) *headOffice {
	t.Helper()
	return newHeadOfficeOf(t, shopCodecs(t))
}

// newHeadOfficeOf is newHeadOffice syncing the tables of codecs.
func newHeadOfficeOf(t testing.TB, codecs *magicsync.Codecs) *headOffice {
	t.Helper()
	return newHeadOfficeWith(t, codecs, "", "")
}

// newHeadOfficeWith is newHeadOfficeOf over tables of the host's beside the
// shop's: pgDDL runs on the head office's database before its triggers,
// sqliteDDL on every fresh register's file.
func newHeadOfficeWith(t testing.TB, codecs *magicsync.Codecs, pgDDL, sqliteDDL string) *headOffice {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), newOfficeDatabaseWith(t, codecs, pgDDL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // before the database is dropped
	opts := officeOptions()
	h := &headOffice{t: t, pool: pool, codecs: codecs, opts: opts, sqliteDDL: sqliteDDL}
	h.startEngine()
	t.Cleanup(func() { h.stop() })
	return h
}

// startEngine starts a new engine over the head office's database, and
// runs it until stop.
//
// The engine has a pool of its own, which stop closes: an engine stopped
// is gone, as with the process that ran it, and a call of a register
// still under way with it reaches the database no more — it must not
// write, after a restore, what it built from what it kept in memory.
func (h *headOffice) startEngine() {
	h.t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, h.pool.Config())
	if err != nil {
		h.t.Fatal(err)
	}
	s, err := server.New(ctx, pool, h.codecs, h.opts)
	if err != nil {
		pool.Close()
		h.t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(runCtx) }()
	var once sync.Once
	h.stop = func() { once.Do(func() { cancel(); <-done; pool.Close() }) }
	h.s = s
	h.live.Store(s)
}

// engine is the engine the registers' loops call.
func (h *headOffice) engine() *server.Server { return h.live.Load() }

// provisionAgain marks a replica to be provisioned again by writing the
// engine's table, as the engine itself does when it must, and announces
// it on the engine's wake channel in the same transaction, as the engine's
// own writes do: the processes serving the database remember what they
// served each replica and trust it until such an announcement.
func (h *headOffice) provisionAgain(id uuid.UUID) {
	h.t.Helper()
	mustExec(h.t, h.pool, eng(`WITH u AS (UPDATE public.sync_replicas SET provision_needed = true, provision_reason = 'test' WHERE id = $1 RETURNING id)
		SELECT pg_notify($2, 'r:' || u.id::text) FROM u`), id, wakeChannelOf(engineSchema()))
}

// wakeChannelOf is the channel the engine announces its writes on, for the
// engine's tables in schema: magicsync_wake for public, else the name
// followed by the FNV-1a hash of the schema's name, as server names it.
func wakeChannelOf(schema string) string {
	if schema == "public" {
		return "magicsync_wake"
	}
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("magicsync_wake_%016x", h.Sum64())
}

func (h *headOffice) exec(query string, args ...any) {
	h.t.Helper()
	mustExec(h.t, h.pool, query, args...)
}

func (h *headOffice) count(query string, args ...any) int {
	h.t.Helper()
	return mustCount(h.t, h.pool, query, args...)
}

// mustExec runs a statement on pool, or ends the test.
func mustExec(t testing.TB, pool *pgxpool.Pool, query string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// mustCount runs a query of one integer on pool, or ends the test.
func mustCount(t testing.TB, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// register is one replica with its in-process transport.
type register struct {
	id     uuid.UUID
	path   string
	stop   func() // stops its loops; the test's cleanup closes db
	db     *sql.DB
	r      *replica.Replica
	h      *headOffice
	online atomic.Bool
	// stalled stops only the way down: what the register sends is filed,
	// but no confirmation comes back while it is set.
	stalled atomic.Bool
	plugged chan struct{} // closed and replaced when plugged back in
	mu      sync.Mutex
	// faults, when set, may drop, duplicate or delay what crosses.
	faults faults
	// fetched counts the messages Next handed out to it.
	fetched atomic.Int64
	// loop is what the receive loop met, for a failure to say: its polls
	// that found nothing, those that failed (and the last error), the
	// messages Receive failed, and those taken for another message than
	// the one applied under their id.
	loop struct {
		empty, failed, refused, reissued atomic.Int64
		lastErr                          atomic.Value // string
	}
	// pos is what the receive loop knows of the last message applied, as
	// a transport tells the server on every poll.
	pos position
	// seen collects every key of every row a message brought, per table.
	seenMu sync.Mutex
	seen   map[string]map[magicsync.Key]bool
}

// saw records what a message brought, decoded as the replica would.
func (g *register) saw(body []byte) {
	m, err := wire.DecodeToReplica(body)
	if err != nil {
		return
	}
	g.seenMu.Lock()
	defer g.seenMu.Unlock()
	if g.seen == nil {
		g.seen = map[string]map[magicsync.Key]bool{}
	}
	for _, t := range m.GetDown().GetTables() {
		if g.seen[t.Table] == nil {
			g.seen[t.Table] = map[magicsync.Key]bool{}
		}
		for _, k := range t.UpsertKeys {
			g.seen[t.Table][magicsync.Key(k)] = true
		}
	}
}

// sawKey reports whether any message brought the row of table with key.
func (g *register) sawKey(table string, key magicsync.Key) bool {
	g.seenMu.Lock()
	defer g.seenMu.Unlock()
	return g.seen[table][key]
}

// faults mess with the transport: each message may be lost or delivered
// twice, and acknowledgements may be lost.
type faults struct {
	mu      sync.Mutex
	rnd     func() float64
	lose    float64
	twice   float64
	loseAck float64
	// replay is the chance that an old message is delivered again, after
	// newer ones: messages out of order.
	replay float64
	old    [][]byte
	// oldUp are uploads kept for replaying, by lane.
	oldUp map[string][][]byte
	// loseReply is the chance that the answer to an upload the server
	// filed is lost: the replica sends it again, a repeat.
	loseReply float64
	// delay is how long a message takes on the way down: a slow link.
	delay time.Duration
}

// setLink sets the faults of a slow, lossy link on top of set's: replies
// to uploads lost after the server filed them, and a delay on the way
// down.
func (f *faults) setLink(loseReply float64, delay time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loseReply, f.delay = loseReply, delay
}

func (f *faults) downDelay() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.delay
}

// set changes the fault rates; zero rates heal the transport.
func (f *faults) set(rnd func() float64, lose, twice, loseAck, replay float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rnd, f.lose, f.twice, f.loseAck, f.replay = rnd, lose, twice, loseAck, replay
}

// keep remembers a message for replaying later, and may pick an old one.
func (f *faults) keep(body []byte) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.replay == 0 || f.rnd == nil {
		return nil
	}
	f.old = append(f.old, body)
	if len(f.old) > 20 {
		f.old = f.old[1:]
	}
	if f.rnd() < f.replay {
		return f.old[int(f.rnd()*float64(len(f.old)))%len(f.old)]
	}
	return nil
}

// keepUp remembers an upload of lane for replaying later, and may pick an
// old one of that lane: uploads out of order.
func (f *faults) keepUp(lane string, body []byte) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.replay == 0 || f.rnd == nil {
		return nil
	}
	if f.oldUp == nil {
		f.oldUp = map[string][][]byte{}
	}
	old := append(f.oldUp[lane], body)
	if len(old) > 20 {
		old = old[1:]
	}
	f.oldUp[lane] = old
	if f.rnd() < f.replay {
		return old[int(f.rnd()*float64(len(old)))%len(old)]
	}
	return nil
}

func (f *faults) roll(which func(*faults) float64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := which(f)
	if p == 0 || f.rnd == nil {
		return false
	}
	return f.rnd() < p
}

func lose(f *faults) float64    { return f.lose }
func twice(f *faults) float64   { return f.twice }
func loseAck(f *faults) float64 { return f.loseAck }

func loseReply(f *faults) float64 { return f.loseReply }

func (h *headOffice) addRegister(shop uuid.UUID, d sqlitetest.Driver) *register {
	h.t.Helper()
	id := uuid.New()
	h.exec("INSERT INTO shop.registers (id, shop_id) VALUES ($1, $2)", id, shop)
	return h.attach(id, d)
}

// attach starts a register over a new SQLite file.
func (h *headOffice) attach(id uuid.UUID, d sqlitetest.Driver) *register {
	h.t.Helper()
	return h.attachAt(id, d, sqlitetest.NewPath(h.t), true)
}

// attachAt starts a register over the SQLite file at path, creating its
// tables when fresh is set.
func (h *headOffice) attachAt(id uuid.UUID, d sqlitetest.Driver, path string, fresh bool) *register {
	t := h.t
	t.Helper()
	db := sqlitetest.OpenPath(t, d, path, sqlitetest.Safe())
	if fresh {
		if _, err := db.Exec(sqliteSchema + h.sqliteDDL); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := replica.Install(ctx, db, h.codecs); err != nil {
		t.Fatal(err)
	}
	reg := &register{id: id, db: db, h: h, path: path, plugged: make(chan struct{})}
	reg.online.Store(true)
	settings := replica.Settings{
		Idle: 20 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		DigestsEvery: -1, ResendAfter: 3 * time.Second, Logger: quiet(),
	}
	if h.tune != nil {
		h.tune(&settings)
	}
	r, err := replica.New(ctx, db, h.codecs, replica.Me(id), replica.UplinkFunc(reg.send), settings)
	if err != nil {
		t.Fatal(err)
	}
	reg.r = r
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(runCtx) })
	wg.Go(func() { reg.receiveLoop(runCtx) })
	var once sync.Once
	reg.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(reg.stop)
	return reg
}

func (g *register) send(ctx context.Context, id uuid.UUID, lane string, msg []byte) error {
	if !g.online.Load() {
		return replica.TransportError(true, errors.New("unplugged"))
	}
	if g.faults.roll(lose) {
		return replica.TransportError(true, errors.New("lost on the way"))
	}
	s := g.h.engine()
	err := s.Endpoint().Receive(ctx, id, lane, msg)
	if err == nil && g.faults.roll(twice) {
		err = s.Endpoint().Receive(ctx, id, lane, msg)
	}
	if old := g.faults.keepUp(lane, msg); err == nil && old != nil {
		// An older upload arrives after this one; what it says must
		// change nothing, and the replica never hears of it.
		_ = s.Endpoint().Receive(ctx, id, lane, old)
	}
	if err != nil {
		return replica.TransportError(!errors.Is(err, server.ErrPermanent), err)
	}
	if g.faults.roll(loseReply) {
		return replica.TransportError(true, errors.New("the reply was lost on the way back"))
	}
	return nil
}

// receiveLoop is the seed's: take the next message, apply it, and only
// then acknowledge it.
func (g *register) receiveLoop(ctx context.Context) {
	for ctx.Err() == nil {
		if !g.online.Load() {
			g.mu.Lock()
			plugged := g.plugged
			g.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-plugged:
			}
			continue
		}
		if g.stalled.Load() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		wait, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		s := g.h.engine()
		msg, ok, err := s.Endpoint().Next(wait, g.id, g.pos.applied())
		cancel()
		switch {
		case err != nil:
			g.loop.failed.Add(1)
			g.loop.lastErr.Store("next: " + err.Error())
			// As a transport backs off: an engine stopped while the
			// head office is put back fails every call at once, and a
			// loop without a pause would take a core from the restore.
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		case !ok:
			g.loop.empty.Add(1)
		}
		if err != nil || !ok || !g.online.Load() || g.h.engine() != s {
			// An answer of an engine stopped meanwhile (the head office
			// restored) dies with its connection.
			continue
		}
		g.fetched.Add(1)
		if d := g.faults.downDelay(); d > 0 {
			// On its way down a slow link.
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		if g.faults.roll(lose) || g.stalled.Load() {
			// Lost, or come down as the way down stalled: nothing comes
			// back while it is.
			continue
		}
		g.saw(msg.Body)
		if old := g.faults.keep(msg.Body); old != nil {
			g.saw(old)
			_, _ = g.r.Endpoint().Receive(ctx, old)
		}
		got, err := g.r.Endpoint().Receive(ctx, msg.Body)
		if err != nil {
			g.loop.refused.Add(1)
			g.loop.lastErr.Store(fmt.Sprintf("receive %d: %v", msg.ID, err))
			continue
		}
		if g.pos.took(msg.ID, msg.Body, got) {
			// Another message than the one applied under its id: the
			// next poll tells the server.
			g.loop.reissued.Add(1)
			continue
		}
		if g.faults.roll(twice) {
			_, _ = g.r.Endpoint().Receive(ctx, msg.Body)
		}
		if g.faults.roll(loseAck) {
			continue
		}
		_ = s.Endpoint().Ack(ctx, g.id, msg.ID)
	}
}

func (g *register) unplug() { g.online.Store(false) }

func (g *register) plug() {
	g.mu.Lock()
	g.online.Store(true)
	close(g.plugged)
	g.plugged = make(chan struct{})
	g.mu.Unlock()
	g.r.Nudge()
}

func (g *register) count(query string, args ...any) int {
	var n int
	if err := g.db.QueryRow(query, args...).Scan(&n); err != nil {
		panic(fmt.Sprintf("%s: %v", query, err))
	}
	return n
}

// holding lists the keys of a replica table, sorted.
func (g *register) holding(table, col string) []string {
	rows, err := g.db.Query(fmt.Sprintf("SELECT %s FROM %s ORDER BY 1", col, table))
	if err != nil {
		panic(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			panic(err)
		}
		out = append(out, s)
	}
	return out
}

// should lists what the head office means a register to hold of a table.
func (h *headOffice) should(query string, args ...any) []string {
	rows, err := h.pool.Query(context.Background(), query, args...)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// eventually polls cond until it holds or 20 s pass; convergence has no
// single signal to wait for.
func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	eventuallyWithin(t, 20*time.Second, what, cond)
}

// eventuallyWithin is eventually with a deadline of its own, for work
// whose length grows with its size.
func eventuallyWithin(t testing.TB, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v: %s", what, limit, detail)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settled reports whether a register holds exactly what it should and has
// nothing left to send.
func (g *register) settled() (bool, string) {
	h := g.h
	checks := []struct {
		table      string
		have, want []string
	}{
		{"products", g.holding("products", "id || ':' || price_cents"), h.should(
			"SELECT p.id::text || ':' || p.price_cents FROM shop.products p JOIN shop.registers r ON r.shop_id = p.shop_id WHERE r.id = $1", g.id)},
		{"notices", g.holding("notices", "id || ':' || text"), h.should("SELECT id::text || ':' || text FROM shop.notices")},
		{"drawers", g.holding("drawers", "id || ':' || float_cents"), h.should("SELECT id::text || ':' || float_cents FROM shop.drawers WHERE register_id = $1", g.id)},
		{"receipts", h.should("SELECT id::text || ':' || total_cents FROM shop.receipts WHERE register_id = $1", g.id), g.holding("receipts", "id || ':' || total_cents")},
	}
	for _, c := range checks {
		if !slices.Equal(c.have, c.want) {
			return false, fmt.Sprintf("register %v %s: %v; want %v", g.id, c.table, c.have, c.want)
		}
	}
	if n := g.count("SELECT count(*) FROM sync_pending"); n != 0 {
		return false, fmt.Sprintf("register %v has %d rows unconfirmed", g.id, n)
	}
	return true, ""
}

func settleAll(t testing.TB, regs ...*register) {
	t.Helper()
	settleAllWithin(t, 20*time.Second, regs...)
}

// settleAllWithin is settleAll with a deadline of its own.
func settleAllWithin(t testing.TB, limit time.Duration, regs ...*register) {
	t.Helper()
	eventuallyWithin(t, limit, "every register settling", func() (bool, string) {
		for _, g := range regs {
			if ok, why := g.settled(); !ok {
				g.r.Nudge()
				return false, why
			}
		}
		return true, ""
	})
}

var at = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func (h *headOffice) addProduct(shop uuid.UUID, name string, price int64) uuid.UUID {
	h.t.Helper()
	id := uuid.New()
	h.exec("INSERT INTO shop.products VALUES ($1, $2, $3, $4, $5)", id, shop, name, price, at)
	return id
}

func (h *headOffice) addShop() uuid.UUID {
	h.t.Helper()
	id := uuid.New()
	h.exec("INSERT INTO shop.shops VALUES ($1)", id)
	return id
}

func (g *register) ring(total int64) uuid.UUID {
	id := uuid.New()
	if _, err := g.db.Exec("INSERT INTO receipts (register_id, id, total_cents, changed_at) VALUES (?, ?, ?, ?)", g.id, id, total, at); err != nil {
		panic(err)
	}
	g.r.Nudge()
	return id
}

// loopSays is what a register's receive loop met, for a failure's log.
func (g *register) loopSays() string {
	last, _ := g.loop.lastErr.Load().(string)
	return fmt.Sprintf("online %v, stalled %v; %d messages fetched, %d polls empty, %d failed, %d messages Receive refused, %d taken for another; last error %q",
		g.online.Load(), g.stalled.Load(), g.fetched.Load(), g.loop.empty.Load(), g.loop.failed.Load(), g.loop.refused.Load(), g.loop.reissued.Load(), last)
}
