package kit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the kit reads and writes the replica's file with it

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/server"
)

// Config says what to run the cases against.
type Config struct {
	// Replica is the shell command (run with sh -c) that starts the
	// replica under test; it reads the environment the package doc
	// describes. Required.
	Replica string
	// DatabaseURL names a PostgreSQL server the kit may create databases
	// on (and drop them); the database it names is only connected to, to
	// create the kit's own. Required.
	DatabaseURL string
	// Dir is where the replica's SQLite file goes; empty means a temporary
	// directory, removed at the end.
	Dir string
	// CaseTimeout bounds how long one case waits for the replica. Zero
	// means 15 seconds.
	CaseTimeout time.Duration
	// ReplicaOutput receives the replica's standard output and error; nil
	// discards them.
	ReplicaOutput io.Writer
	// Logger receives the logs of the head office the kit runs; nil
	// discards them.
	Logger *slog.Logger
	// Progress, when set, is called with each case's report as it ends.
	Progress func(Report)
	// Front, when set, puts another transport in front of the kit's head
	// office: it is given the head office's HTTP base URL (behind the
	// kit's fault-injecting proxy, whose faults then reach the replica
	// through the front) and returns the URL the replica is given as
	// MAGICSYNC_URL — a nats:// URL, say, for transport/natssync's
	// conformance command — and a function that stops it, called once the
	// replica stopped. Nil gives the replica the HTTP URL.
	Front func(ctx context.Context, httpURL string) (replicaURL string, stop func(), err error)
}

// Report is the outcome of one case.
type Report struct {
	// Name names the case, e.g. "redelivery of an older message".
	Name string
	// Checks says what the case checks.
	Checks string
	// Passed is true when the replica did what the protocol asks.
	Passed bool
	// Reason says why the case failed; empty when it passed.
	Reason string
	// Took is how long the case ran.
	Took time.Duration
}

// ErrSetup is wrapped by the errors Run returns when it could not run the
// cases at all: no PostgreSQL, no replica command, a replica that would not
// start. A case the replica fails is no error: its Report says so.
var ErrSetup = errors.New("conformance kit: cannot run the cases")

// run is one run of the cases: the head office, the replica process and
// what the cases share.
type run struct {
	cfg    Config
	o      *office
	p      *proxy
	id     uuid.UUID
	file   string
	url    string // the replica's MAGICSYNC_URL
	cancel context.CancelFunc
	// exited is closed when the replica's process ended.
	exited  chan struct{}
	exitErr error
	// receipts numbers the receipts the kit writes.
	receipts int
}

// Run starts a head office, starts the replica Config.Replica names
// against it, and runs every case in order, one report per case. It
// returns an error wrapping ErrSetup when it could not run them.
func Run(ctx context.Context, cfg Config) ([]Report, error) {
	if strings.TrimSpace(cfg.Replica) == "" {
		return nil, fmt.Errorf("%w: no replica command: say how to start the replica under test", ErrSetup)
	}
	if cfg.DatabaseURL == "" {
		return nil, fmt.Errorf("%w: no PostgreSQL server: give one the kit may create databases on", ErrSetup)
	}
	if cfg.CaseTimeout <= 0 {
		cfg.CaseTimeout = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ReplicaOutput == nil {
		cfg.ReplicaOutput = io.Discard
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "magicsync-conformance-")
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSetup, err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	o, err := openOffice(ctx, cfg.DatabaseURL, seedCatalog, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("%w: starting the head office: %w", ErrSetup, err)
	}
	defer o.close()
	r := &run{cfg: cfg, o: o, p: o.proxy, id: uuid.New(), file: filepath.Join(dir, "replica.db"), url: o.url, exited: make(chan struct{})}
	if cfg.Front != nil {
		url, stop, err := cfg.Front(ctx, o.url)
		if err != nil {
			return nil, fmt.Errorf("%w: starting the transport in front of the head office: %w", ErrSetup, err)
		}
		defer stop()
		r.url = url
	}
	token, err := o.enrol(ctx, r.id)
	if err != nil {
		return nil, fmt.Errorf("%w: enrolling the replica: %w", ErrSetup, err)
	}
	if err := r.createFile(ctx); err != nil {
		return nil, fmt.Errorf("%w: creating the replica's file: %w", ErrSetup, err)
	}
	if err := r.start(ctx, token); err != nil {
		return nil, fmt.Errorf("%w: starting the replica: %w", ErrSetup, err)
	}
	defer r.stop()
	var reports []Report
	for _, c := range cases {
		started := time.Now()
		m := r.mark()
		cctx, cancel := context.WithTimeout(ctx, cfg.CaseTimeout)
		err := c.run(cctx, r)
		cancel()
		r.p.hooks(nil, nil, nil)
		rep := Report{Name: c.name, Checks: c.checks, Passed: err == nil, Took: time.Since(started)}
		if err != nil {
			rep.Reason = err.Error()
			srv, acks, ups := r.since(m)
			rep.Reason += fmt.Sprintf(" [during the case: messages served %s; acknowledged %v; uploads %s%s]", describe(srv), acks, describeUps(ups), r.standing(ctx))
			select {
			case <-r.exited:
				rep.Reason += fmt.Sprintf(" (the replica's process ended: %v)", r.exitErr)
			default:
			}
		}
		reports = append(reports, rep)
		if cfg.Progress != nil {
			cfg.Progress(rep)
		}
		if ctx.Err() != nil {
			return reports, ctx.Err()
		}
	}
	return reports, nil
}

// seedCatalog writes the products the replica is first provisioned with:
// more than one message of the head office's holds.
func seedCatalog(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `INSERT INTO kit.products (id, name, price)
		SELECT 'p' || lpad(i::text, 3, '0'), 'product ' || i || ' — ' || repeat('x', 40), 100 * i FROM generate_series(1, 60) i`)
	return err
}

// createFile creates the replica's SQLite file holding the kit's tables.
func (r *run) createFile(ctx context.Context) error {
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: r.file}).EscapedPath()+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, SQLiteSchema)
	return err
}

// start starts the replica's process with the contract's environment.
func (r *run) start(ctx context.Context, token string) error {
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(pctx, "sh", "-c", r.cfg.Replica)
	cmd.Env = append(os.Environ(),
		"MAGICSYNC_URL="+r.url,
		"MAGICSYNC_REPLICA="+r.id.String(),
		"MAGICSYNC_TOKEN="+token,
		"MAGICSYNC_DB="+r.file,
		"MAGICSYNC_DIGESTS_EVERY=1s",
		"MAGICSYNC_RESEND_AFTER=2s",
		"MAGICSYNC_WISHES_EVERY=1s",
	)
	cmd.Stdout, cmd.Stderr = r.cfg.ReplicaOutput, r.cfg.ReplicaOutput
	ownGroup(cmd)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		return err
	}
	r.cancel = cancel
	go func() {
		r.exitErr = cmd.Wait()
		close(r.exited)
	}()
	return nil
}

// stop ends the replica's process and waits for it.
func (r *run) stop() {
	r.cancel()
	<-r.exited
}

// standing says where the head office believes the replica stands, for
// the reason of a case that failed.
func (r *run) standing(ctx context.Context) string {
	engine, _ := r.o.current()
	all, err := engine.Status(ctx)
	if err != nil {
		return ""
	}
	for _, st := range all {
		if st.ID == r.id {
			s := fmt.Sprintf("; the head office: last applied %d, %d queued", st.LastApplied, st.Queued)
			if st.Provisioning {
				s += ", provisioning: " + st.ProvisionReason
			}
			return s
		}
	}
	return ""
}

// product is a product's values, as either side holds them.
type product struct {
	name  string
	price int64
}

// replicaProducts reads the products the replica's file holds, read-only.
func (r *run) replicaProducts(ctx context.Context) (map[string]product, error) {
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: r.file}).EscapedPath()+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return readProducts(ctx, db, "SELECT id, name, price FROM products")
}

// serverProducts reads the products the head office holds.
func (r *run) serverProducts(ctx context.Context) (map[string]product, error) {
	_, pool := r.o.current()
	rows, err := pool.Query(ctx, "SELECT id, name, price FROM kit.products")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectProducts(rows)
}

func readProducts(ctx context.Context, db *sql.DB, query string) (map[string]product, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectProducts(rows)
}

// collectProducts reads rows of id, name and price, from either side's
// database.
func collectProducts(rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}) (map[string]product, error) {
	out := map[string]product{}
	for rows.Next() {
		var id string
		var p product
		if err := rows.Scan(&id, &p.name, &p.price); err != nil {
			return nil, err
		}
		out[id] = p
	}
	return out, rows.Err()
}

// inSync says whether the replica holds exactly the head office's
// products, and if not, how they differ.
func (r *run) inSync(ctx context.Context) (bool, string) {
	want, err := r.serverProducts(ctx)
	if err != nil {
		return false, "reading the head office's products: " + err.Error()
	}
	got, err := r.replicaProducts(ctx)
	if err != nil {
		return false, "reading the replica's products: " + err.Error()
	}
	var diffs []string
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			diffs = append(diffs, "lacks "+id)
		case g != w:
			diffs = append(diffs, fmt.Sprintf("%s holds price %d, want %d", id, g.price, w.price))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, "holds "+id+", which the head office does not")
		}
	}
	if len(diffs) == 0 {
		return true, ""
	}
	sort.Strings(diffs)
	if len(diffs) > 4 {
		diffs = append(diffs[:4], fmt.Sprintf("and %d more", len(diffs)-4))
	}
	return false, fmt.Sprintf("the replica's products differ from the head office's (%d rows there): %s", len(want), strings.Join(diffs, "; "))
}

// writeReceipt writes a receipt into the replica's file, as the replica's
// application would, and returns its id.
func (r *run) writeReceipt(ctx context.Context, total int64) (string, error) {
	r.receipts++
	id := fmt.Sprintf("r%03d", r.receipts)
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: r.file}).EscapedPath()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "INSERT INTO receipts (replica_id, id, total) VALUES (?, ?, ?)", r.id.String(), id, total); err != nil {
		return "", fmt.Errorf("writing receipt %s into the replica's file: %w", id, err)
	}
	return id, nil
}

// filed says whether the head office holds receipt id of the replica.
func (r *run) filed(ctx context.Context, id string) (bool, error) {
	_, pool := r.o.current()
	var n int
	err := pool.QueryRow(ctx, "SELECT count(*) FROM kit.receipts WHERE replica_id = $1 AND id = $2", r.id, id).Scan(&n)
	return n > 0, err
}

// exec runs a statement on the head office's database.
func (r *run) exec(ctx context.Context, query string, args ...any) error {
	_, pool := r.o.current()
	if _, err := pool.Exec(ctx, query, args...); err != nil {
		return fmt.Errorf("the kit's own write at the head office failed: %w", err)
	}
	return nil
}

// rejected returns the reason the head office's status gives for a
// product row the replica reported it could not take, if it does.
func (r *run) rejected(ctx context.Context, id string) (string, bool, error) {
	engine, _ := r.o.current()
	all, err := engine.Status(ctx)
	if err != nil {
		return "", false, err
	}
	key := productKey(id)
	for _, st := range all {
		if st.ID != r.id {
			continue
		}
		for _, row := range st.Rejected {
			if row.Side == server.SideReplica && strings.HasSuffix(row.Table, "products") && string(row.Key) == string(key) {
				return row.Reason, true, nil
			}
		}
	}
	return "", false, nil
}

// productKey is the key tuple of product id.
func productKey(id string) []byte {
	return wire.AppendTuple(nil, []wire.Value{wire.TextValue(id)})
}

// receiptKey is the key tuple of the replica's receipt id.
func (r *run) receiptKey(id string) []byte {
	return wire.AppendTuple(nil, []wire.Value{wire.UUIDValue(r.id), wire.TextValue(id)})
}

// eventually waits until cond holds, looking again whenever the proxy
// records something and at least every 100 ms; when ctx ends first, it
// returns an error with cond's last reason.
func (r *run) eventually(ctx context.Context, cond func() (bool, string)) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var why string
	for {
		_, _, _, changed := r.p.snapshot()
		ok, reason := cond()
		if ok {
			return nil
		}
		// A look cut short by the deadline says nothing of the replica.
		if ctx.Err() == nil || why == "" {
			why = reason
		}
		select {
		case <-ctx.Done():
			if why == "" {
				why = "the replica did not get there"
			}
			return fmt.Errorf("%s (after %s)", why, r.cfg.CaseTimeout)
		case <-changed:
		case <-tick.C:
		}
	}
}

// parseReplica reads the replica's id from a /sync/{id}/… path.
func parseReplica(path string) (uuid.UUID, error) {
	rest, _ := strings.CutPrefix(path, "/sync/")
	id, _, _ := strings.Cut(rest, "/")
	return uuid.Parse(id)
}
