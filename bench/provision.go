package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/natssync/headoffice"
)

// serverChildSpec is the spec of a server process: the engine (Run) and
// the httpsync handler on a loopback port, over a prepared database.
type serverChildSpec struct {
	DatabaseURL string `json:"database_url"`
	MaxConns    int32  `json:"max_conns"`
	SQLStats    bool   `json:"sql_stats,omitempty"`
	// PollWait is the handler's longest long-poll; zero means 25 s.
	PollWait time.Duration `json:"poll_wait,omitempty"`
	// AppName is the application_name of the pool's connections, by which
	// the benchmark finds their backends and measures their CPU time.
	AppName string `json:"app_name,omitempty"`
	// NATS, when set, is the URL of the NATS server the server serves the
	// replicas over (headoffice.Serve), rather than HTTP; "listening"
	// gives it back.
	NATS string `json:"nats,omitempty"`
}

// startServerChild starts a server process of spec and waits until it
// listens. It returns the process and the URL it listens on; on an error
// the process is killed.
func startServerChild(ctx context.Context, spec serverChildSpec) (*child, string, error) {
	srv, err := startChild("server", spec)
	if err != nil {
		return nil, "", err
	}
	listening, err := srv.next(ctx, "listening", time.Minute)
	if err != nil {
		srv.kill()
		return nil, "", err
	}
	return srv, listening.URL, nil
}

// runServerChild serves until stdin ends. Events: "listening" (URL). The
// command "stats" answers with a "stats" event: the statements and commits
// of the server's pool so far, the process's CPU time and resident memory,
// and the long-polls in flight now (Count);
// "stats gc" first returns the memory the Go runtime holds unused to the
// system, so that the resident memory is what is in use.
func runServerChild(ctx context.Context, spec serverChildSpec, cio *childIO, log *slog.Logger) error {
	counts := &sqlCounts{}
	var stats *sqlStats
	if spec.SQLStats {
		stats = newSQLStats()
		defer stats.report(os.Stderr, 15)
		// "profile" starts the statistics afresh too.
		restart := cio.profile
		cio.profile = func() error {
			stats.reset()
			if restart != nil {
				return restart()
			}
			return nil
		}
	}
	counts.next = stats
	pool, err := openPoolNamed(ctx, spec.DatabaseURL, spec.MaxConns, counts, spec.AppName)
	if err != nil {
		return err
	}
	defer pool.Close()
	codecs, err := benchCodecs()
	if err != nil {
		return err
	}
	opts := server.Options{Replicas: "bench.replicas(id)", Logger: log}
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		return err
	}
	eng := runEngine(ctx, s)
	defer eng.stop()
	wait := spec.PollWait
	if wait <= 0 {
		wait = 25 * time.Second
	}
	polls := &pollCount{}
	if spec.NATS != "" {
		stop, err := serveNATS(ctx, spec.NATS, headoffice.ForServer(s), wait, log)
		if err != nil {
			return err
		}
		defer func() {
			if err := stop(); err != nil {
				log.Error("serving over NATS", "err", err)
			}
		}()
		cio.emit(event{Event: "listening", URL: spec.NATS})
	} else {
		srv, err := serveLoopback(polls.counting(newHandlerWait(s, log, nil, wait)), log)
		if err != nil {
			return err
		}
		defer srv.stop()
		cio.emit(event{Event: "listening", URL: srv.url})
	}
	for {
		cmd, ok := cio.command(ctx)
		if !ok {
			return nil
		}
		switch cmd {
		case "stats", "stats gc":
			if cmd == "stats gc" {
				debug.FreeOSMemory()
				if err := writeSnapshots("server"); err != nil {
					cio.emit(event{Event: "error", Error: err.Error()})
					continue
				}
			}
			n := counts.snapshot()
			cio.emit(event{Event: "stats", Statements: n.Statements, Commits: n.Commits, CPU: cpuSeconds(),
				RSSKB: residentKB(), PeakKB: peakRSS(), Count: int(polls.inFlight.Load())})
		default:
			cio.emit(event{Event: "error", Error: "unknown command " + cmd})
		}
	}
}

// replicaChildSpec is the spec of a replica process that is provisioned.
type replicaChildSpec struct {
	URL   string    `json:"url"`
	ID    uuid.UUID `json:"id"`
	Token string    `json:"token"`
	Path  string    `json:"path"`
	Rows  int       `json:"rows"`
}

// runReplicaChild starts a new replica and waits until a provisioning
// switched in. Events: "provisioned" (Seconds since the replica started,
// Count of items held).
func runReplicaChild(ctx context.Context, spec replicaChildSpec, cio *childIO, log *slog.Logger) error {
	codecs, err := benchCodecs()
	if err != nil {
		return err
	}
	done := make(chan struct{})
	start := time.Now()
	rep, err := startReplica(ctx, replicaSpec{path: spec.Path, id: spec.ID, token: spec.Token, url: spec.URL, hc: httpClient(4), log: log, codecs: codecs,
		wrap: func(r *replica.Replica) httpsync.Receiver {
			return receiveFunc(func(ctx context.Context, msg []byte) (replica.Received, error) {
				got, err := r.Endpoint().Receive(ctx, msg)
				if err == nil && got.Provisioned {
					close(done)
				}
				return got, err
			})
		}})
	if err != nil {
		return err
	}
	defer rep.stop()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	elapsed := time.Since(start)
	var n int
	if err := rep.db.QueryRowContext(ctx, "SELECT count(*) FROM items").Scan(&n); err != nil {
		return err
	}
	cio.emit(event{Event: "provisioned", Seconds: elapsed.Seconds(), Count: n})
	return nil
}

// benchProvision: a new replica that should hold a catalog of 1,000,000
// rows is provisioned over httpsync on loopback, the server and the
// replica each in a process of its own. Measured in the replica's process,
// from its start (a new SQLite file) until the provisioning switched in;
// and each process's peak resident memory (VmHWM). The catalog is loaded
// and planned beforehand. Baseline: bench 1's, for the same row count: the
// same rows upserted into a bare SQLite table with one prepared statement
// in one transaction, as rows per second.
func benchProvision(ctx context.Context, c config) (_ []result, err error) {
	n := c.scale(1_000_000, 20_000)
	e, err := newServerEnv(ctx, c, 8, serverOptions(c))
	if err != nil {
		return nil, err
	}
	defer e.close()
	ids, err := e.addReplicas(ctx, 1)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	const chunk = 100_000
	for at := 0; at < n; at += chunk {
		if err := e.copyItems(ctx, items(min(chunk, n-at), 600+at/chunk)); err != nil {
			return nil, err
		}
	}
	loaded := time.Since(start)
	start = time.Now()
	if err := e.passAll(ctx); err != nil {
		return nil, err
	}
	planned := time.Since(start)
	// A catalog that has been there a while has been vacuumed: the
	// planner's own tables are visible to index-only scans.
	if _, err := e.pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return nil, err
	}
	c.note("%d rows loaded in %v, planned in %v", n, loaded.Round(time.Millisecond), planned.Round(time.Millisecond))
	members, err := credentials(ctx, e.s, ids)
	if err != nil {
		return nil, err
	}
	srv, url, err := startServerChild(ctx, serverChildSpec{DatabaseURL: e.db.url, MaxConns: 8, SQLStats: c.sqlStats})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			srv.kill()
		}
	}()
	rep, err := startChild("replica", replicaChildSpec{URL: url, ID: members[0].ID, Token: members[0].Token, Path: filepath.Join(c.dir, "provision.db"), Rows: n})
	if err != nil {
		return nil, err
	}
	provisioned, err := rep.next(ctx, "provisioned", 10*time.Minute)
	if err != nil {
		rep.kill()
		return nil, err
	}
	exits, err := finishAll(ctx, rep, srv)
	if err != nil {
		return nil, err
	}
	repExit, srvExit := exits[0], exits[1]
	if provisioned.Count != n {
		return nil, fmt.Errorf("the replica holds %d rows of %d", provisioned.Count, n)
	}
	base, err := provisionBaseline(ctx, c, n)
	if err != nil {
		return nil, err
	}
	secs := provisioned.Seconds
	note := fmt.Sprintf("%d rows; %s baseline; catalog planned beforehand in %v", n, fmtSeconds(float64(n)/base), planned.Round(time.Second))
	return []result{
		{name: "6 new replica provisioned", unit: "s", figure: secs, bounds: []bound{ceiling(20)}, note: note},
		{name: "6 provisioning rate vs bench 1", unit: "rows/s", figure: float64(n) / secs, baseline: base,
			note: "baseline: the same rows upserted into bare SQLite in key order, as a provisioning sends them, one transaction"},
		{name: "6 planner: the catalog's rows, new", unit: "rows/s", figure: float64(n) / planned.Seconds(),
			note: "setup, reported: passes logging the COPY-loaded rows for their group (the server's changed rows per second)"},
		{name: "6 server peak RSS", unit: "MB", figure: float64(srvExit.PeakKB) / 1024, bounds: []bound{ceiling(300)}, note: "VmHWM of the server process"},
		{name: "6 replica peak RSS", unit: "MB", figure: float64(repExit.PeakKB) / 1024, bounds: []bound{ceiling(300)}, note: "VmHWM of the replica process"},
	}, nil
}

func fmtSeconds(s float64) string { return fmt.Sprintf("%.1f s", s) }

// provisionBaseline upserts n rows into a bare SQLite table in one
// transaction, as bench 1's baseline does, in key order — the order a
// provisioning sends them in, so that the two compare like with like (in
// the rows' random order SQLite's index inserts cost some three times as
// much) — and returns rows per second. Making the rows is not timed.
func provisionBaseline(ctx context.Context, c config, n int) (float64, error) {
	db, err := openSQLite(c, "provision-base.db")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	// The rows of the benchmark's catalog, by key: chunks of 100,000 made
	// with seeds 600, 601, ...
	const chunk = 100_000
	type ref struct {
		id       uuid.UUID
		seed, at int
	}
	refs := make([]ref, 0, n)
	for at := 0; at < n; at += chunk {
		for i := range min(chunk, n-at) {
			refs = append(refs, ref{item(600+at/chunk, i).ID, 600 + at/chunk, i})
		}
	}
	slices.SortFunc(refs, func(a, b ref) int { return bytes.Compare(a.id[:], b.id[:]) })
	start := time.Now()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	stmt, err := tx.PrepareContext(ctx, upsertItem)
	if err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	rows := make([]Item, 0, chunk)
	for at := 0; at < len(refs); at += chunk {
		rows = rows[:0]
		for _, r := range refs[at:min(at+chunk, len(refs))] {
			rows = append(rows, item(r.seed, r.at))
		}
		start = time.Now()
		for _, it := range rows {
			if _, err := stmt.ExecContext(ctx, it.ID, it.Name, it.Price, it.Qty, it.Weight, it.UpdatedAt); err != nil {
				return 0, err
			}
		}
		elapsed += time.Since(start)
	}
	start = time.Now()
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	elapsed += time.Since(start)
	if elapsed <= 0 {
		return 0, errors.New("no time passed")
	}
	return float64(n) / elapsed.Seconds(), nil
}

// pollCount counts the long-polls a handler is serving: with several
// server processes, the replicas parked at each are not told by the
// benchmark's side.
type pollCount struct {
	inFlight atomic.Int64
}

// counting is h, counting its GET requests (polls) while they run.
func (p *pollCount) counting(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			p.inFlight.Add(1)
			defer p.inFlight.Add(-1)
		}
		h.ServeHTTP(w, r)
	})
}
