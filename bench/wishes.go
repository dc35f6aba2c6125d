package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// Knob is benchmark 12's setting: a replica's row, whose value the server
// may wish another (Always: every wish is carried out).
type Knob struct {
	ReplicaID uuid.UUID `db:"replica_id" sync:"key"`
	Name      string    `db:"name" sync:"key"`
	Value     int64     `db:"value" sync:"desired"`
	ChangedAt time.Time `db:"changed_at" sync:"version"`
}

// SyncTable declares the knobs.
func (Knob) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "bench", Name: "knobs", Mirror: magicsync.Setting, Origin: "replica_id"}
}

// Part is benchmark 12's baseline: a catalog row assigned to one replica.
type Part struct {
	ID        uuid.UUID `db:"id" sync:"key"`
	ReplicaID uuid.UUID `db:"replica_id"`
	Value     int64     `db:"value"`
	UpdatedAt time.Time `db:"updated_at" sync:"version"`
}

// SyncTable declares the parts.
func (Part) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "bench", Name: "parts", Mirror: magicsync.Catalog, Sync: magicsync.Assigned("replica_id")}
}

// wishesPgSchema is the host's schema of benchmark 12.
const wishesPgSchema = `
CREATE SCHEMA bench;
CREATE TABLE bench.replicas (id uuid PRIMARY KEY);
CREATE TABLE bench.knobs (replica_id uuid NOT NULL, name text NOT NULL, value bigint NOT NULL, changed_at timestamptz NOT NULL,
	PRIMARY KEY (replica_id, name));
CREATE TABLE bench.parts (id uuid PRIMARY KEY, replica_id uuid NOT NULL, value bigint NOT NULL, updated_at timestamptz NOT NULL);
`

// wishesSQLiteSchema is a replica's tables in benchmark 12.
const wishesSQLiteSchema = `
CREATE TABLE knobs (replica_id TEXT NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL, changed_at TIMESTAMP NOT NULL,
	PRIMARY KEY (replica_id, name));
CREATE TABLE parts (id TEXT PRIMARY KEY, replica_id TEXT NOT NULL, value INTEGER NOT NULL, updated_at TIMESTAMP NOT NULL);
`

// wishPoolConns bounds each replica's pool of SQLite connections, as a host
// would: a writer and a few readers, rather than one connection for every
// wish offered at once.
const wishPoolConns = 4

// wishesEvery is the replicas' WishesEvery: a wish that waits is offered
// again after it, rather than after the default minute.
const wishesEvery = time.Second

// wishPoll is how often the benchmark reads the server's count of wishes
// answered.
const wishPoll = 20 * time.Millisecond

// newWishesEnv creates a database with benchmark 12's schema, prepared for
// the engine, and the engine over it (not running), with n replicas added
// to its replicas table: Run adopts them.
func newWishesEnv(ctx context.Context, c config, maxConns int32, n int) (*serverEnv, []uuid.UUID, error) {
	codecs, err := magicsync.NewCodecs(Knob{}, Part{})
	if err != nil {
		return nil, nil, err
	}
	opts := serverOptions(c)
	opts.Commands = true
	e, err := newServerEnvOf(ctx, c, maxConns, opts, wishesPgSchema, codecs)
	if err != nil {
		return nil, nil, err
	}
	return e.orClose(e.addReplicas(ctx, n))
}

// wishFleet is benchmark 12's replicas: engines over SQLite files of their
// own, in this process, each with Run running and a receive loop, talking
// to the server through its Go API — Receive up; Next, Receive, Ack down —
// with no network between.
type wishFleet struct {
	s       *server.Server
	members []*wishMember
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	// parts counts the rows of parts the replicas applied, once the
	// server took the acknowledgement of the message that brought them.
	parts tally
	// filings are the uploads that carried an answer applied, each when
	// it began and when the server's Receive of it returned (the answers
	// filed); uploading counts the uploads in flight.
	filingsMu sync.Mutex
	filings   []filing
	uploading atomic.Int64
	// retried counts the messages a replica's Receive failed to apply
	// and took again, as a transport's receive loop does.
	retried atomic.Int64

	mu      sync.Mutex
	err     error
	failed  chan struct{} // closed with the first error
	stopped bool
}

// filing is one upload that carried an answer applied.
type filing struct{ began, filed time.Time }

// answersFiled is when the last upload carrying an answer applied, begun
// before cutoff, was filed: the server's record of the answers. It waits
// for the uploads in flight to return first.
func (f *wishFleet) answersFiled(ctx context.Context, cutoff time.Time) (time.Time, error) {
	for deadline := time.Now().Add(time.Minute); f.uploading.Load() > 0; {
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("uploads still in flight a minute after the wishes were answered: %w", errTimeout)
		}
		if !sleepCtx(ctx, time.Millisecond) {
			return time.Time{}, ctx.Err()
		}
	}
	f.filingsMu.Lock()
	defer f.filingsMu.Unlock()
	var last time.Time
	for _, fl := range f.filings {
		if fl.began.Before(cutoff) && fl.filed.After(last) {
			last = fl.filed
		}
	}
	if last.IsZero() {
		return time.Time{}, errors.New("no upload carried an answer applied")
	}
	return last, nil
}

// appliedAnswers counts the answers applied an upload carries.
func appliedAnswers(msg []byte) (int, error) {
	m, err := wire.DecodeToServer(msg)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range m.GetUp().GetAnswers() {
		if a.GetState() == syncpb.WishState_WISH_STATE_APPLIED {
			n++
		}
	}
	return n, nil
}

// wishMember is one replica of the fleet.
type wishMember struct {
	id uuid.UUID
	db *sql.DB
	r  *replica.Replica
}

// tally counts rows applied, and tells when, and at what time, a wanted
// count was reached.
type tally struct {
	mu        sync.Mutex
	n         int
	want      int
	first, at time.Time
	done      chan struct{}
}

// expect starts counting towards want from zero.
func (t *tally) expect(want int) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n, t.want, t.first, t.at, t.done = 0, want, time.Time{}, time.Time{}, make(chan struct{})
	return t.done
}

// add counts k rows applied.
func (t *tally) add(k int) {
	if k == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	before := t.n
	t.n += k
	if before == 0 {
		t.first = time.Now()
	}
	if t.done != nil && before < t.want && t.n >= t.want {
		t.at = time.Now()
		close(t.done)
	}
}

// reached returns when the first rows were counted, when the wanted
// count was reached, and the count.
func (t *tally) reached() (first, at time.Time, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.first, t.at, t.n
}

// fail records the fleet's first error.
func (f *wishFleet) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
		close(f.failed)
	}
}

// firstError is the fleet's first error, or nil.
func (f *wishFleet) firstError() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// startWishFleet opens, installs and starts n replicas, whose ids are ids.
func startWishFleet(ctx context.Context, c config, e *serverEnv, ids []uuid.UUID) (*wishFleet, error) {
	rctx, cancel := context.WithCancel(ctx)
	f := &wishFleet{s: e.s, cancel: cancel, failed: make(chan struct{})}
	up := replica.UplinkFunc(func(ctx context.Context, id uuid.UUID, lane string, msg []byte) error {
		f.uploading.Add(1)
		defer f.uploading.Add(-1)
		began := time.Now()
		if err := e.s.Endpoint().Receive(ctx, id, lane, msg); err != nil {
			return replica.TransportError(!errors.Is(err, server.ErrPermanent), err)
		}
		filed := time.Now()
		// Not timed: what the upload carried, read after its filing.
		if n, err := appliedAnswers(msg); err != nil {
			f.fail(fmt.Errorf("replica %s: decoding its upload: %w", id, err))
		} else if n > 0 {
			f.filingsMu.Lock()
			f.filings = append(f.filings, filing{began: began, filed: filed})
			f.filingsMu.Unlock()
		}
		return nil
	})
	settings := replica.Settings{Logger: c.log, DigestsEvery: -1, WishesEvery: wishesEvery,
		Wishes:   replica.Wishes{replica.Handle[Knob](replica.Direct[Knob]{})},
		Commands: replica.Commands{benchCommand: func(context.Context, replica.Command) ([]byte, error) { return nil, nil }}}
	d := sqlitetest.Modernc()
	for i, id := range ids {
		db, err := sql.Open(d.Name, d.DSN(filepath.Join(c.dir, fmt.Sprintf("wishes-%d.db", i)), sqlitetest.Safe()))
		if err != nil {
			f.stop()
			return nil, err
		}
		db.SetMaxOpenConns(wishPoolConns)
		db.SetMaxIdleConns(wishPoolConns)
		m := &wishMember{id: id, db: db}
		f.members = append(f.members, m)
		if _, err := db.ExecContext(ctx, wishesSQLiteSchema); err != nil {
			f.stop()
			return nil, err
		}
		if err := replica.Install(ctx, db, e.codecs); err != nil {
			f.stop()
			return nil, err
		}
		if m.r, err = replica.New(ctx, db, e.codecs, replica.Me(id), up, settings); err != nil {
			f.stop()
			return nil, err
		}
		f.wg.Go(func() {
			if err := m.r.Run(rctx); err != nil && rctx.Err() == nil {
				f.fail(fmt.Errorf("replica %s: run: %w", id, err))
			}
		})
		f.wg.Go(func() { f.receive(rctx, m) })
	}
	return f, nil
}

// receive is a replica's receive loop: take the next message, apply it,
// acknowledge it, and count the parts it applied once the server took the
// acknowledgement: the server's record that the replica holds them.
func (f *wishFleet) receive(ctx context.Context, m *wishMember) {
	failures := 0
	for ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, 25*time.Second)
		msg, ok, err := f.s.Endpoint().Next(wctx, m.id, server.Applied{})
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			f.fail(fmt.Errorf("replica %s: next: %w", m.id, err))
			return
		}
		if !ok {
			continue
		}
		got, err := m.r.Endpoint().Receive(ctx, msg.Body)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// As a transport's loop: the message, not acknowledged, comes
			// again. A hundred engines in one process on two cores may
			// keep one's file busy past its busy timeout.
			if failures++; failures > maxReceiveFailures {
				f.fail(fmt.Errorf("replica %s: receive failed %d times in a row: %w", m.id, failures, err))
				return
			}
			f.retried.Add(1)
			if !sleepCtx(ctx, receiveRetryAfter) {
				return
			}
			continue
		}
		failures = 0
		if err := f.s.Endpoint().Ack(ctx, m.id, msg.ID); err != nil {
			if ctx.Err() == nil {
				f.fail(fmt.Errorf("replica %s: ack: %w", m.id, err))
			}
			return
		}
		f.parts.add(len(got.Applied["parts"]))
	}
}

// A replica of the fleet whose Receive fails takes the message again
// after receiveRetryAfter, up to maxReceiveFailures times in a row.
const (
	receiveRetryAfter  = 50 * time.Millisecond
	maxReceiveFailures = 20
)

// stop ends every loop and closes the databases.
func (f *wishFleet) stop() {
	f.mu.Lock()
	stopped := f.stopped
	f.stopped = true
	f.mu.Unlock()
	if stopped {
		return
	}
	f.cancel()
	f.wg.Wait()
	for _, m := range f.members {
		if m.r != nil {
			_ = m.r.Close()
		}
		_ = m.db.Close()
	}
}

// writeKnobs has every replica write its settings, as its user would, and
// asks it to send them.
func (f *wishFleet) writeKnobs(ctx context.Context, knobs [][]Knob) error {
	for i, m := range f.members {
		tx, err := m.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for _, k := range knobs[i] {
			if _, err := tx.ExecContext(ctx, `INSERT INTO knobs (replica_id, name, value, changed_at) VALUES (?, ?, ?, ?)`,
				k.ReplicaID, k.Name, k.Value, k.ChangedAt); err != nil {
				_ = tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		m.r.Nudge()
	}
	return nil
}

// count sums a count over every replica's database.
func (f *wishFleet) count(ctx context.Context, query string, args ...any) (int, error) {
	total := 0
	for _, m := range f.members {
		var n int
		if err := m.db.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// pollUntil reads a count from the server every wishPoll until done says
// it is reached, the fleet fails, or timeout passes; it returns when the
// read that saw it returned.
func (f *wishFleet) pollUntil(ctx context.Context, c config, e *serverEnv, timeout time.Duration, what, query string, done func(row []int) (bool, error)) (time.Time, error) {
	began := time.Now()
	deadline, progress := began.Add(timeout), began.Add(10*time.Second)
	var last []int
	for {
		rows, err := e.pool.Query(ctx, query)
		if err != nil {
			return time.Time{}, err
		}
		row, err := pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) ([]int, error) {
			vals := make([]int, len(r.FieldDescriptions()))
			ptrs := make([]any, len(vals))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			return vals, r.Scan(ptrs...)
		})
		if err != nil {
			return time.Time{}, err
		}
		at := time.Now()
		ok, err := done(row)
		if err != nil {
			return time.Time{}, err
		}
		if ok {
			return at, nil
		}
		last = row
		if now := time.Now(); now.After(progress) {
			c.note("%s: %v after %v", what, row, now.Sub(began).Round(time.Second))
			progress = now.Add(10 * time.Second)
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s: %v after %v: %w", what, last, timeout, errTimeout)
		}
		t := time.NewTimer(wishPoll)
		select {
		case <-t.C:
		case <-f.failed:
			t.Stop()
			return time.Time{}, f.firstError()
		case <-ctx.Done():
			t.Stop()
			return time.Time{}, ctx.Err()
		}
	}
}

// benchWishes: 100 replicas (replica engines over SQLite files of their
// own, in this process, Run running, a Direct handler for their setting)
// each hold 100 setting rows, filed at the server first. Then one host
// transaction wishes every one of the 10,000 rows another value
// (server.Desire) and commits: measured from the commit until the server
// recorded every wish answered applied — the server's Receive of the last
// upload carrying an answer applied returned, once a read of its tables
// (every 20 ms) shows them all. The baseline, in the same run and on the
// same fleet, is the row fan-out of the same size, timed to the same end,
// the server's record: 10,000 rows of a catalog assigned 100 to each
// replica, committed in one transaction, until the server took every
// replica's acknowledgement of the messages that brought them.
func benchWishes(ctx context.Context, c config) ([]result, error) {
	replicas := c.scale(100, 10)
	raiseFileLimit()
	e, ids, err := newWishesEnv(ctx, c, 16, replicas)
	if err != nil {
		return nil, err
	}
	defer e.close()
	run := runEngine(ctx, e.s)
	defer run.stop()
	f, err := startWishFleet(ctx, c, e, ids)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	w := &wishesRun{c: c, e: e, f: f, ids: ids, n: replicas * settingsPerReplica, at: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	if err := w.fileSettings(ctx); err != nil {
		return nil, err
	}
	rowsTook, err := w.fanOutParts(ctx)
	if err != nil {
		return nil, err
	}
	wished, err := w.wishEverySetting(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.checkWished(ctx); err != nil {
		return nil, err
	}
	commanded, err := w.commandEveryReplica(ctx)
	if err != nil {
		return nil, err
	}
	return append(w.results(rowsTook, wished), w.commandResults(wished, commanded)...), nil
}

// settingsPerReplica is the setting rows each replica of benchmark 12
// holds.
const settingsPerReplica = 100

// wishShift is what benchmark 12's wishes add to every setting's value.
const wishShift = 1_000_000

// wishesRun is one run of benchmark 12: the server, the fleet, and the n
// settings the replicas hold, written at at.
type wishesRun struct {
	c     config
	e     *serverEnv
	f     *wishFleet
	ids   []uuid.UUID
	n     int
	at    time.Time
	knobs [][]Knob // by replica
}

// wishFigures is what benchmark 12 measured of the wishes.
type wishFigures struct {
	// desired is how long the Desire calls took, before the commit; took
	// is from the commit until the server filed the last answer applied,
	// and seen until a read of its tables showed them all.
	desired, took, seen time.Duration
	// waited says how many wishes were seen waiting at once, and why.
	waited string
}

// fileSettings has the replicas write their settings and waits until the
// server filed them all and owes the replicas nothing.
func (w *wishesRun) fileSettings(ctx context.Context) error {
	replicas := len(w.ids)
	w.knobs = make([][]Knob, replicas)
	for i, id := range w.ids {
		for j := range settingsPerReplica {
			w.knobs[i] = append(w.knobs[i], Knob{ReplicaID: id, Name: fmt.Sprintf("knob %03d", j), Value: int64(j), ChangedAt: w.at})
		}
	}
	start := time.Now()
	if err := w.f.writeKnobs(ctx, w.knobs); err != nil {
		return err
	}
	if _, err := w.f.pollUntil(ctx, w.c, w.e, 5*time.Minute, "settings filed", `SELECT count(*) FROM bench.knobs`, func(row []int) (bool, error) {
		return row[0] == w.n, nil
	}); err != nil {
		return err
	}
	if err := waitQuiet(ctx, w.e, 5*time.Minute); err != nil {
		return err
	}
	w.c.note("%d replicas started, provisioned and their %d settings filed in %v", replicas, w.n, time.Since(start).Round(time.Millisecond))
	return nil
}

// fanOutParts is the baseline: the same number of catalog rows as of
// settings, assigned to each replica as many as it holds settings,
// committed in one transaction. It returns the time from the commit until
// the server took the last acknowledgement of them.
func (w *wishesRun) fanOutParts(ctx context.Context) (time.Duration, error) {
	n, replicas, f := w.n, len(w.ids), w.f
	parts := make([][]any, n)
	for i := range parts {
		parts[i] = []any{uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "part %d", i)), w.ids[i%replicas], int64(i), w.at}
	}
	done := f.parts.expect(n)
	tx, err := w.e.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"bench", "parts"}, []string{"id", "replica_id", "value", "updated_at"}, pgx.CopyFromRows(parts)); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	select {
	case <-done:
	case <-f.failed:
		return 0, f.firstError()
	case <-time.After(5 * time.Minute):
		_, _, got := f.parts.reached()
		return 0, fmt.Errorf("the fleet applied %d of %d rows: %w", got, n, errTimeout)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	firstRows, reached, _ := f.parts.reached()
	rowsTook := reached.Sub(start)
	held, err := f.count(ctx, `SELECT count(*) FROM parts`)
	if err != nil {
		return 0, err
	}
	if held != n {
		return 0, fmt.Errorf("the replicas hold %d of the %d rows", held, n)
	}
	if err := waitQuiet(ctx, w.e, 5*time.Minute); err != nil {
		return 0, err
	}
	w.c.note("baseline: %d rows applied and acknowledged by %d replicas in %v, the first after %v", n, replicas, rowsTook.Round(time.Millisecond),
		firstRows.Sub(start).Round(time.Millisecond))
	return rowsTook, nil
}

// wishEverySetting wishes every setting another value, in one transaction,
// commits it, and waits until the server recorded every wish answered
// applied.
func (w *wishesRun) wishEverySetting(ctx context.Context) (wishFigures, error) {
	wtx, err := w.e.s.Begin(ctx)
	if err != nil {
		return wishFigures{}, err
	}
	defer wtx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	start := time.Now()
	for _, ks := range w.knobs {
		for _, k := range ks {
			k.Value += wishShift
			if _, err := server.Desire(ctx, w.e.s, wtx, k, "bench 12"); err != nil {
				return wishFigures{}, err
			}
		}
	}
	desired := time.Since(start)
	w.f.filingsMu.Lock()
	w.f.filings = nil
	w.f.filingsMu.Unlock()
	start = time.Now()
	if err := wtx.Commit(ctx); err != nil {
		return wishFigures{}, err
	}
	a := &answerWatch{c: w.c, e: w.e, f: w.f, n: w.n}
	answered, err := w.f.pollUntil(ctx, w.c, w.e, 5*time.Minute, "wishes answered (applied, waiting, otherwise)",
		`SELECT count(*) FILTER (WHERE answered = wish AND state = 3), count(*) FILTER (WHERE answered = wish AND state = 2),
			count(*) FILTER (WHERE answered = wish AND state NOT IN (2, 3)) FROM public.sync_wishes`,
		func(row []int) (bool, error) { return a.check(ctx, row) })
	if err != nil {
		if a.maxWaiting > 0 {
			return wishFigures{}, fmt.Errorf("%w (at most %d waiting at once: %s; offered again %d times)", err, a.maxWaiting, a.waitedWhy, a.reoffers)
		}
		return wishFigures{}, err
	}
	filed, err := w.f.answersFiled(ctx, answered)
	if err != nil {
		return wishFigures{}, err
	}
	wishesTook := filed.Sub(start)
	w.c.note("%d wishes answered applied in %v, the first answer seen after %v (Desire: %v)", w.n, wishesTook.Round(time.Millisecond),
		a.first.Sub(start).Round(time.Millisecond), desired.Round(time.Millisecond))
	waited := a.waited()
	if a.maxWaiting > 0 {
		w.c.note("%s", waited)
	}
	return wishFigures{desired: desired, took: wishesTook, seen: answered.Sub(start), waited: waited}, nil
}

// answerWatch follows the server's counts of the wishes answered applied,
// waiting and otherwise, as benchmark 12 reads them.
//
// A wish answered waiting is to be offered again after WishesEvery; one
// refused or superseded fails the benchmark. Either way, why is read. The
// replica arms WishesEvery only for a wish that waits when its pass of
// offers has started them all (runWishes), not for one whose offer ends
// waiting later: while wishes wait, the benchmark asks every replica to
// offer them again (OfferWishes), once every WishesEvery, and counts how
// often it did.
type answerWatch struct {
	c config
	e *serverEnv
	f *wishFleet
	n int // the wishes made

	first, offered time.Time // the first answer seen; the last offer asked
	maxWaiting     int
	waitedWhy      string
	reoffers       int
}

// check takes a read of the counts, and reports whether every wish is
// answered applied.
func (a *answerWatch) check(ctx context.Context, row []int) (bool, error) {
	if a.first.IsZero() && row[0]+row[1]+row[2] > 0 {
		a.first = time.Now()
	}
	if row[2] > 0 {
		why, err := wishReasons(ctx, a.e, "state NOT IN (2, 3)")
		if err != nil {
			return false, err
		}
		return false, fmt.Errorf("%d wishes were answered neither applied nor waiting: %s", row[2], why)
	}
	if row[1] > a.maxWaiting {
		a.maxWaiting = row[1]
		why, err := wishReasons(ctx, a.e, "state = 2")
		if err != nil {
			return false, err
		}
		a.waitedWhy = why
		a.c.note("%d wishes waiting: %s", row[1], why)
	}
	if row[1] > 0 && time.Since(a.offered) >= wishesEvery {
		if !a.offered.IsZero() {
			for _, m := range a.f.members {
				m.r.OfferWishes()
			}
			a.reoffers++
		}
		a.offered = time.Now()
	}
	return row[0] == a.n, nil
}

// waited says, for the result's note, how many wishes were seen waiting at
// once and how often the replicas were asked to offer them again.
func (a *answerWatch) waited() string {
	if a.maxWaiting == 0 {
		return "no wish seen waiting"
	}
	return fmt.Sprintf("at most %d wishes seen waiting at once (%s); every replica asked to offer them again (OfferWishes) %d times, a WishesEvery (%v) apart",
		a.maxWaiting, a.waitedWhy, a.reoffers, wishesEvery)
}

// retriedNote says, for a note, how many messages a Receive failed to
// apply and the replica took again; nothing when none.
func (f *wishFleet) retriedNote() string {
	if n := f.retried.Load(); n > 0 {
		return fmt.Sprintf("; %d messages a replica's Receive failed to apply (its file busy) and took again", n)
	}
	return ""
}

// checkWished checks, not timed, the server's own account of the wishes
// and the values the replicas hold.
func (w *wishesRun) checkWished(ctx context.Context) error {
	list, err := w.e.s.Wishes(ctx, server.WishScope{})
	if err != nil {
		return err
	}
	if got := list.Counts[server.WishApplied]; got != w.n {
		return fmt.Errorf("the server shows %d of %d wishes applied: %v", got, w.n, list.Counts)
	}
	written, err := w.f.count(ctx, `SELECT count(*) FROM knobs WHERE value >= ?`, wishShift)
	if err != nil {
		return err
	}
	if written != w.n {
		return fmt.Errorf("the replicas hold %d of the %d values wished", written, w.n)
	}
	return nil
}

// results are benchmark 12's figures: the wishes' rate against the rows'
// fan-out, which took rowsTook.
func (w *wishesRun) results(rowsTook time.Duration, a wishFigures) []result {
	n, replicas := w.n, len(w.ids)
	wishRate, rowRate := float64(n)/a.took.Seconds(), float64(n)/rowsTook.Seconds()
	return []result{
		{name: "12 wishes to a fleet, answered", unit: "wishes/s", figure: wishRate, baseline: rowRate, bounds: []bound{ratioFloor(wishesFloor, wishesFloorShort)},
			note: fmt.Sprintf("%d wishes (%d settings × %d replicas, Direct handlers; engines over SQLite files, %d connections each, in-process transport) in %v, from the commit until the server's Receive of the last upload carrying an answer applied returned (all applied, as a read of its tables every %v showed, %v after the commit); baseline: %d rows of a catalog assigned %d to each replica, committed, until the server took the last acknowledgement of them, in %v, as rows/s; %s",
				n, settingsPerReplica, replicas, wishPoolConns, a.took.Round(time.Millisecond), wishPoll, a.seen.Round(time.Millisecond), n, settingsPerReplica, rowsTook.Round(time.Millisecond), a.waited+w.f.retriedNote())},
		{name: "12 wishes: the rows' fan-out alone", unit: "rows/s", figure: rowRate,
			note: "the baseline above: assigned catalog rows, from the commit until the server took every replica's acknowledgement of the messages that brought them"},
		{name: "12 wishes: Desire in the host's transaction", unit: "wishes/s", figure: float64(n) / a.desired.Seconds(),
			note: fmt.Sprintf("%d server.Desire calls, one after the other, in one transaction, before its commit", n)},
	}
}

// wishReasons lists the reasons of the wishes answered in the states cond
// selects, the commonest first, with their counts.
func wishReasons(ctx context.Context, e *serverEnv, cond string) (string, error) {
	rows, err := e.pool.Query(ctx, `SELECT state, reason, count(*) FROM public.sync_wishes WHERE answered = wish AND `+cond+`
		GROUP BY state, reason ORDER BY count(*) DESC LIMIT 3`)
	if err != nil {
		return "", err
	}
	var out []string
	var state int16
	var reason string
	var k int
	if _, err := pgx.ForEachRow(rows, []any{&state, &reason, &k}, func() error {
		out = append(out, fmt.Sprintf("%d × %v %q", k, server.WishState(state), reason))
		return nil
	}); err != nil {
		return "", err
	}
	return strings.Join(out, "; "), nil
}

// benchCommand is the name of benchmark 12's commands, whose handler
// returns at once.
const benchCommand = "bench-12"

// commandFigures is what benchmark 12 measured of the commands.
type commandFigures struct {
	// issued is how long the IssueCommand calls took, before the commit;
	// took is from the commit until a read of the server's tables showed
	// every command succeeded.
	issued, took time.Duration
}

// commandEveryReplica issues as many commands as there were wishes, as
// many to each replica as it holds settings, in one transaction, commits
// it, and waits until the server shows every command succeeded.
func (w *wishesRun) commandEveryReplica(ctx context.Context) (commandFigures, error) {
	tx, err := w.e.s.Begin(ctx)
	if err != nil {
		return commandFigures{}, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	start := time.Now()
	for _, id := range w.ids {
		for range settingsPerReplica {
			if _, err := server.IssueCommand(ctx, w.e.s, tx, server.CommandRequest{Replica: id, Name: benchCommand, Note: "bench 12"}); err != nil {
				return commandFigures{}, err
			}
		}
	}
	issued := time.Since(start)
	start = time.Now()
	if err := tx.Commit(ctx); err != nil {
		return commandFigures{}, err
	}
	var failedWhy string
	done, err := w.f.pollUntil(ctx, w.c, w.e, 5*time.Minute, "commands succeeded (succeeded, otherwise ended)",
		`SELECT count(*) FILTER (WHERE state = 4), count(*) FILTER (WHERE state <> 4) FROM public.sync_commands_done`,
		func(row []int) (bool, error) {
			if row[1] > 0 {
				if failedWhy == "" {
					rows, err := w.e.pool.Query(ctx, `SELECT state, reason FROM public.sync_commands_done WHERE state <> 4 LIMIT 1`)
					if err == nil {
						var state int16
						var reason string
						_, _ = pgx.ForEachRow(rows, []any{&state, &reason}, func() error {
							failedWhy = fmt.Sprintf("%v: %s", server.CommandState(state), reason)
							return nil
						})
					}
				}
				return false, fmt.Errorf("%d commands ended otherwise than succeeded (%s)", row[1], failedWhy)
			}
			return row[0] == w.n, nil
		})
	if err != nil {
		return commandFigures{}, err
	}
	took := done.Sub(start)
	list, err := w.e.s.Commands(ctx, server.CommandScope{Name: benchCommand})
	if err != nil {
		return commandFigures{}, err
	}
	if got := list.Counts[server.CommandSucceeded]; got != w.n {
		return commandFigures{}, fmt.Errorf("the server shows %d of %d commands succeeded: %v", got, w.n, list.Counts)
	}
	w.c.note("%d commands succeeded in %v (IssueCommand: %v)", w.n, took.Round(time.Millisecond), issued.Round(time.Millisecond))
	return commandFigures{issued: issued, took: took}, nil
}

// commandResults are benchmark 12's figures of the commands, beside the
// wishes' figure of the same run.
func (w *wishesRun) commandResults(a wishFigures, c commandFigures) []result {
	n, replicas := w.n, len(w.ids)
	return []result{
		{name: "12 commands to a fleet, answered", unit: "commands/s", figure: float64(n) / c.took.Seconds(), baseline: float64(n) / a.seen.Seconds(),
			note: fmt.Sprintf("%d commands (%d to each of %d replicas, a handler that returns at once; the fleet above) issued by server.IssueCommand in one transaction, in %v from the commit until a read of the server's tables every %v showed every command succeeded; baseline: the wishes above, to the same mark (every wish applied, as the same read showed, %v after the commit), as wishes/s",
				n, settingsPerReplica, replicas, c.took.Round(time.Millisecond), wishPoll, a.seen.Round(time.Millisecond))},
		{name: "12 commands: IssueCommand in the host's transaction", unit: "commands/s", figure: float64(n) / c.issued.Seconds(),
			note: fmt.Sprintf("%d server.IssueCommand calls, one after the other, in one transaction, before its commit", n)},
	}
}
