package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/serverhook"
	"github.com/magicsync/magicsync/server"
)

// pgSource finds PostgreSQL once for the whole run, and stops what it
// started (a throwaway cluster) at the end: the server of most
// benchmarks, and the one with wal_level=logical of those that run in both
// capture modes, each found when a benchmark first needs it.
type pgSource struct {
	main    pgFound
	logical pgFound
}

// pgFound is one server of the run, found once.
type pgFound struct {
	once   sync.Once
	url    string
	origin pgtest.Origin
	stop   func() error
	err    error
	// server is what the server said of itself (version, durability),
	// for the results' header.
	server pgServer
}

// ensureFunc finds a server: pgtest.EnsureOrigin or pgtest.EnsureLogical.
type ensureFunc func(ctx context.Context, dataDir string, logf func(format string, args ...any)) (string, pgtest.Origin, func() error, error)

// find finds the server with ensure on the first call and returns its
// server-level connection string.
func (f *pgFound) find(ctx context.Context, c config, ensure ensureFunc) (string, error) {
	f.once.Do(func() {
		f.url, f.origin, f.stop, f.err = ensure(ctx, "", c.note)
		if f.err == nil {
			f.server, f.err = askServer(ctx, f.url)
		}
	})
	return f.url, f.err
}

// serverURL returns the server-level connection string of the server of
// c's databases: the logical one when c.onLogical, else the main one.
func (p *pgSource) serverURL(ctx context.Context, c config) (string, error) {
	if c.onLogical {
		return p.logical.find(ctx, c, pgtest.EnsureLogical)
	}
	return p.main.find(ctx, c, pgtest.EnsureOrigin)
}

// close stops what the run started, the logical server first.
func (p *pgSource) close() {
	for _, f := range []*pgFound{&p.logical, &p.main} {
		if f.stop != nil {
			if err := f.stop(); err != nil {
				fmt.Fprintln(os.Stderr, "bench: stopping PostgreSQL:", err)
			}
		}
	}
}

// database is a database of one benchmark run, dropped by drop.
type database struct {
	url   string // its connection string
	pool  *pgxpool.Pool
	stats *sqlStats // nil unless -sqlstats
	drop  func()
}

// newDatabase creates an empty database magicsync_bench_<random> on the
// server of c (pgSource.serverURL) and opens a pool of at most maxConns
// connections on it, named app (application_name) when app is not empty.
func newDatabase(ctx context.Context, c config, maxConns int32, app string) (*database, error) {
	srv, err := c.pg.serverURL(ctx, c)
	if err != nil {
		return nil, err
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	name := "magicsync_bench_" + hex.EncodeToString(suffix[:])
	admin, err := pgx.Connect(ctx, srv)
	if err != nil {
		return nil, err
	}
	url, err := pgtest.EnsureDatabase(ctx, srv, name)
	if err != nil {
		admin.Close(ctx)
		return nil, err
	}
	ident := pgx.Identifier{name}.Sanitize()
	d := &database{url: url}
	d.drop = func() {
		if d.pool != nil {
			d.pool.Close()
		}
		if d.stats != nil {
			d.stats.report(os.Stderr, 15)
		}
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// A database an engine captured the writes of by logical
		// replication holds its slot, which PostgreSQL will not drop it
		// with.
		if c.onLogical {
			if err := pgtest.DropSlots(dctx, admin, name); err != nil {
				c.note("dropping the replication slots of database %s: %v", name, err)
			}
		}
		if _, err := admin.Exec(dctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			c.note("dropping database %s: %v", name, err)
		}
		admin.Close(dctx)
	}
	if c.sqlStats {
		d.stats = newSQLStats()
	}
	d.pool, err = openPoolNamed(ctx, d.url, maxConns, tracerOf(d.stats), app)
	if err != nil {
		d.drop()
		return nil, err
	}
	return d, nil
}

// openPool opens a pool of at most maxConns connections, its statements
// timed into stats when stats is not nil.
func openPool(ctx context.Context, connString string, maxConns int32, stats *sqlStats) (*pgxpool.Pool, error) {
	return openPoolTraced(ctx, connString, maxConns, tracerOf(stats))
}

// tracerOf is stats as a pool's tracer: none when stats is nil.
func tracerOf(stats *sqlStats) pgx.QueryTracer {
	if stats == nil {
		return nil
	}
	return stats
}

// openPoolTraced opens a pool of at most maxConns connections, its
// statements traced by tracer when it is not nil.
func openPoolTraced(ctx context.Context, connString string, maxConns int32, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	return openPoolNamed(ctx, connString, maxConns, tracer, "")
}

// openPoolNamed is openPoolTraced with the connections named app
// (application_name), when app is not empty.
func openPoolNamed(ctx context.Context, connString string, maxConns int32, tracer pgx.QueryTracer, app string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.Tracer = tracer
	if app != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = app
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// sqlStats times every statement of a pool, by its text: the -sqlstats
// diagnostic, which says where a benchmark's database time goes.
type sqlStats struct {
	mu sync.Mutex
	by map[string]*sqlStat
}

type sqlStat struct {
	n     int
	total time.Duration
}

type sqlStart struct{}

func newSQLStats() *sqlStats { return &sqlStats{by: map[string]*sqlStat{}} }

// TraceQueryStart notes when a statement began.
func (s *sqlStats) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlStart{}, sqlBegun{sql: data.SQL, at: time.Now()})
}

type sqlBegun struct {
	sql string
	at  time.Time
}

// TraceQueryEnd adds the statement's time to its text's.
func (s *sqlStats) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	b, ok := ctx.Value(sqlStart{}).(sqlBegun)
	if !ok {
		return
	}
	d := time.Since(b.at)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.by[b.sql]
	if st == nil {
		st = &sqlStat{}
		s.by[b.sql] = st
	}
	st.n++
	st.total += d
}

// reset forgets every statement timed so far.
func (s *sqlStats) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.by)
}

// report writes the statements that took longest in all, one a line.
func (s *sqlStats) report(w io.Writer, top int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	type row struct {
		sql string
		st  sqlStat
	}
	var rows []row
	for q, st := range s.by {
		rows = append(rows, row{q, *st})
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(b.st.total, a.st.total) })
	for i, r := range rows {
		if i == top {
			break
		}
		q := strings.Join(strings.Fields(r.sql), " ")
		if len(q) > 110 {
			q = q[:110] + "…"
		}
		fmt.Fprintf(w, "  sql %9.1f ms %7d× %7.2f ms/each  %s\n", ms(r.st.total), r.st.n, ms(r.st.total)/float64(r.st.n), q)
	}
}

// Receipt is the record the server benchmarks file: written by a replica,
// its origin the replica's id.
type Receipt struct {
	ReplicaID uuid.UUID `db:"replica_id" sync:"key"`
	ID        uuid.UUID `db:"id" sync:"key"`
	Total     int64     `db:"total"`
	Note      string    `db:"note"`
	RungAt    time.Time `db:"rung_at" sync:"version"`
}

// SyncTable declares the receipts.
func (Receipt) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "bench", Name: "receipts", Mirror: magicsync.Record, Origin: "replica_id"}
}

// pgSchema is the host's schema of the server benchmarks: the replicas, the
// items catalog (broadcast: every replica holds every row) and receipts.
const pgSchema = `
CREATE SCHEMA bench;
CREATE TABLE bench.replicas (id uuid PRIMARY KEY);
CREATE TABLE bench.items (id uuid PRIMARY KEY, name text NOT NULL, price bigint NOT NULL, qty bigint NOT NULL,
	weight float8 NOT NULL, updated_at timestamptz NOT NULL);
CREATE TABLE bench.receipts (replica_id uuid NOT NULL, id uuid NOT NULL, total bigint NOT NULL, note text NOT NULL,
	rung_at timestamptz NOT NULL, PRIMARY KEY (replica_id, id));
`

// receiptsDDL is the receipts table of a replica.
const receiptsDDL = `CREATE TABLE receipts (replica_id TEXT NOT NULL, id TEXT NOT NULL, total INTEGER NOT NULL, note TEXT NOT NULL,
	rung_at TIMESTAMP NOT NULL, PRIMARY KEY (replica_id, id))`

// serverOptions are the options of every server of the benchmarks: the
// capture the benchmark runs in (c.capture), triggers unless it runs in
// both modes.
func serverOptions(c config) server.Options {
	return server.Options{Replicas: "bench.replicas(id)", Logger: c.log, Capture: c.capture, Linger: c.linger}
}

// benchCodecs declares the items catalog and the receipts.
func benchCodecs() (*magicsync.Codecs, error) {
	return magicsync.NewCodecs(Item{}, Receipt{})
}

// prepareSchema creates the host's schema (pgSchema, or a benchmark's
// own), applies the engine's steps and installs what its capture needs:
// the triggers, or under CaptureLogical the publication.
func prepareSchema(ctx context.Context, pool *pgxpool.Pool, schema string, codecs *magicsync.Codecs, opts server.Options) error {
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("creating the schema: %w", err)
	}
	if err := server.Migrate(ctx, pool); err != nil {
		return err
	}
	install, what := server.Triggers, "the triggers"
	if opts.Capture == server.CaptureLogical {
		install, what = server.Publication, "the publication"
	}
	ddl, err := install(codecs, opts)
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("installing %s: %w", what, err)
	}
	return nil
}

// serverEnv is a fresh database prepared for the engine, and the engine
// over it: not running until the benchmark runs it, but under
// CaptureLogical, running from the start (see newEnv).
type serverEnv struct {
	db     *database
	pool   *pgxpool.Pool
	codecs *magicsync.Codecs
	s      *server.Server
	// hooks reach the engine's planning pass (Pass), run at once.
	hooks *serverhook.Hooks
	opts  server.Options
	// eng is the engine's Run once runEngine started it.
	eng *running
}

// newServerEnv creates a database, prepares it and starts no engine loop
// (but under CaptureLogical: see newEnv): the caller runs Run, or Pass, as
// the benchmark needs.
func newServerEnv(ctx context.Context, c config, maxConns int32, opts server.Options) (*serverEnv, error) {
	codecs, err := benchCodecs()
	if err != nil {
		return nil, err
	}
	return newServerEnvOf(ctx, c, maxConns, opts, pgSchema, codecs)
}

// newServerEnvOf is newServerEnv over a host's schema and declarations of
// the caller's.
func newServerEnvOf(ctx context.Context, c config, maxConns int32, opts server.Options, schema string, codecs *magicsync.Codecs) (*serverEnv, error) {
	return newEnv(ctx, c, envSpec{maxConns: maxConns, opts: opts, schema: schema, codecs: codecs})
}

// envSpec is what a server env is made of.
type envSpec struct {
	maxConns int32
	opts     server.Options
	schema   string
	codecs   *magicsync.Codecs
	// app, when not empty, names the connections of the engine's pool
	// (application_name), for a pgMeter.
	app string
}

// newEnv creates a database on the server of c, prepares it as spec says
// and makes the engine over it. Under CaptureLogical it also starts the
// engine's Run, which runs until the env is closed, and waits until Run's
// reader of the slot noted the rows already there (as it does once, when
// it first reads a slot) and streams: only Run notes the host's writes
// then, and those of the benchmark come after, so that each is noted once.
func newEnv(ctx context.Context, c config, spec envSpec) (*serverEnv, error) {
	db, err := newDatabase(ctx, c, spec.maxConns, spec.app)
	if err != nil {
		return nil, err
	}
	if err := prepareSchema(ctx, db.pool, spec.schema, spec.codecs, spec.opts); err != nil {
		db.drop()
		return nil, err
	}
	hooks := &serverhook.Hooks{}
	s, err := server.New(serverhook.With(ctx, hooks), db.pool, spec.codecs, spec.opts)
	if err != nil {
		db.drop()
		return nil, err
	}
	e := &serverEnv{db: db, pool: db.pool, codecs: spec.codecs, s: s, hooks: hooks, opts: spec.opts}
	if spec.opts.Capture == server.CaptureLogical {
		if err := e.awaitReading(ctx); err != nil {
			e.close()
			return nil, err
		}
	}
	return e, nil
}

// runEngine runs the engine's Run until the env is closed or the running
// it returns stopped, unless it runs already: then that running.
func (e *serverEnv) runEngine(ctx context.Context) *running {
	if e.eng == nil {
		e.eng = runEngine(ctx, e.s)
	}
	return e.eng
}

// close stops the engine's Run when it runs, and drops the database.
func (e *serverEnv) close() {
	if e.eng != nil {
		e.eng.stop()
	}
	e.db.drop()
}

// addReplicas inserts n replicas into the replicas table and returns their
// ids.
func (e *serverEnv) addReplicas(ctx context.Context, n int) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
	}
	_, err := e.pool.Exec(ctx, `INSERT INTO bench.replicas (id) SELECT unnest($1::uuid[])`, ids)
	return ids, err
}

// copyItems loads rows into bench.items with COPY (the triggers note them).
func (e *serverEnv) copyItems(ctx context.Context, rows []Item) error {
	_, err := e.pool.CopyFrom(ctx, pgx.Identifier{"bench", "items"}, []string{"id", "name", "price", "qty", "weight", "updated_at"},
		pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
			it := &rows[i]
			return []any{it.ID, it.Name, it.Price, it.Qty, it.Weight, it.UpdatedAt}, nil
		}))
	return err
}

// copyPlainItems copies bench.items into bench.items_plain, a table like
// it that the engine does not capture (no triggers, not in the
// publication): the baselines' host table.
func (e *serverEnv) copyPlainItems(ctx context.Context) error {
	_, err := e.pool.Exec(ctx, `CREATE TABLE bench.items_plain (LIKE bench.items INCLUDING ALL);
		INSERT INTO bench.items_plain SELECT * FROM bench.items`)
	return err
}

// passAll runs passes until the triggers' notes are all planned.
func (e *serverEnv) passAll(ctx context.Context) error {
	for {
		if err := e.hooks.Pass(ctx); err != nil {
			return err
		}
		var left bool
		if err := e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM public.sync_touched)`).Scan(&left); err != nil {
			return err
		}
		if !left {
			return nil
		}
	}
}

// adopt adds n replicas and loads catalog into bench.items, then passes
// until the engine adopted the replicas and planned the rows — under
// CaptureLogical, waits until Run did (awaitCaptured). It returns the
// replicas' ids.
func (e *serverEnv) adopt(ctx context.Context, n int, catalog []Item) ([]uuid.UUID, error) {
	ids, err := e.addReplicas(ctx, n)
	if err != nil {
		return nil, err
	}
	if len(catalog) > 0 {
		if err := e.copyItems(ctx, catalog); err != nil {
			return nil, err
		}
	}
	if e.opts.Capture == server.CaptureLogical {
		return ids, e.awaitCaptured(ctx, n, len(catalog))
	}
	return ids, e.passAll(ctx)
}

// newAdoptedEnv is a server env with n replicas adopted and catalog
// planned (adopt): what most benchmarks start from.
func newAdoptedEnv(ctx context.Context, c config, maxConns int32, n int, catalog []Item) (*serverEnv, []uuid.UUID, error) {
	e, err := newServerEnv(ctx, c, maxConns, serverOptions(c))
	if err != nil {
		return nil, nil, err
	}
	return e.orClose(e.adopt(ctx, n, catalog))
}

// newIssuedEnv is newAdoptedEnv with the replicas issued their tokens
// (credentials): for the benchmarks whose replicas talk over HTTP.
func newIssuedEnv(ctx context.Context, c config, maxConns int32, n int, catalog []Item) (*serverEnv, []fleetMember, error) {
	e, ids, err := newAdoptedEnv(ctx, c, maxConns, n, catalog)
	if err != nil {
		return nil, nil, err
	}
	members, err := credentials(ctx, e.s, ids)
	if err != nil {
		e.close()
		return nil, nil, err
	}
	return e, members, nil
}

// orClose hands on the outcome of a step that sets e up further, closing
// e when the step failed: the caller has no env to close then.
func (e *serverEnv) orClose(ids []uuid.UUID, err error) (*serverEnv, []uuid.UUID, error) {
	if err != nil {
		e.close()
		return nil, nil, err
	}
	return e, ids, nil
}

// stillOwed reports whether the server owes a replica anything: a message
// in an outbox, a provisioning, a cursor behind its group's head.
func (e *serverEnv) stillOwed(ctx context.Context) (bool, error) {
	var owed bool
	err := e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM public.sync_outbox)
		OR EXISTS (SELECT 1 FROM public.sync_replicas WHERE provision_needed OR snapshot <> 0)
		OR EXISTS (SELECT 1 FROM public.sync_memberships m JOIN public.sync_groups g ON g.id = m.grp WHERE m.acked_pos < g.head)`).Scan(&owed)
	return owed, err
}

// errTimeout is a benchmark's wait that never ended.
var errTimeout = errors.New("timed out")
