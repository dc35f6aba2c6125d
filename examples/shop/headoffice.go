package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/dashboard"
	"github.com/magicsync/magicsync/internal/serverhook"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
	"github.com/magicsync/magicsync/transport/natssync/embedded"
	natshead "github.com/magicsync/magicsync/transport/natssync/headoffice"
)

// names of the shop's rows, fixed so that running the demo again finds the
// same shop.
var (
	shopID       = uuid.NewSHA1(uuid.NameSpaceURL, []byte("magicsync.example/shop/corner"))
	productNames = []string{"coffee", "croissant", "orange juice", "baguette", "apple pie"}
)

// demoRegisters is how many registers the demo runs, and how many the head
// office program serves unless its -registers flag says otherwise.
const demoRegisters = 3

// registerNames are the names of the demo's registers, registerName(0) on.
var registerNames = func() []string {
	names := make([]string, demoRegisters)
	for i := range names {
		names[i] = registerName(i)
	}
	return names
}()

// registerName is register i's name: "register 1" for i = 0, and so on,
// for as many registers as the head office serves.
func registerName(i int) string {
	return fmt.Sprintf("register %d", i+1)
}

// registerID is register i's id, fixed by its name.
func registerID(i int) uuid.UUID {
	return uuid.NewSHA1(shopID, []byte(registerName(i)))
}

// headOffice is the server side of the demo: the engine, its sync
// endpoints and the dashboard, on one HTTP listener.
type headOffice struct {
	pool   *pgxpool.Pool
	engine *server.Server
	// hooks reach the engine's planning pass, for the tests to run one
	// now (internal/serverhook); the head office itself leaves the
	// passes to the engine's Run.
	hooks  serverhook.Hooks
	codecs *magicsync.Codecs
	url    string
	// syncURL is where the registers sync: url over HTTP, the NATS
	// server's URL over NATS (serveNATS).
	syncURL string
	log     *slog.Logger
	// registers is how many registers it serves: registerID(0) on.
	registers int
	// dashboardPassword lets operators into the dashboard, as user
	// dashboardUser: drawn the first time, kept in the data folder, and
	// printed (see dashboardSecret).
	dashboardPassword string

	// sales is the day's sales, counted live as the registers' receipts
	// are filed (followSales).
	sales salesTotal

	srv *http.Server
	wg  sync.WaitGroup
}

// dashboardUser is the user operators log into the dashboard as.
const dashboardUser = "shop"

// shutdownGrace bounds how long the head office waits, once stopping, for
// requests in flight. Long-polls do not count: they end at once. (A
// variable for a test to lengthen.)
var shutdownGrace = 5 * time.Second

// startHeadOffice prepares the database (schema, engine steps, triggers,
// the shop's first rows, among them registers registers: registerID(0)
// on), starts the engine and serves HTTP on addr; a
// long-poll waits at most poll. The dashboard's password is kept in the
// data folder data, shared by every head office over it (or, with no
// data folder, drawn for this start alone). Everything stops when ctx
// ends.
func startHeadOffice(ctx context.Context, databaseURL, addr, data string, registers int, poll time.Duration, log *slog.Logger) (*headOffice, error) {
	codecs, err := codecs()
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	ho := &headOffice{pool: pool, codecs: codecs, log: log, registers: registers, sales: salesTotal{counted: map[receiptKey]int64{}}}
	if err := ho.prepare(ctx, registers); err != nil {
		pool.Close()
		return nil, err
	}
	ho.engine, err = server.New(serverhook.With(ctx, &ho.hooks), pool, codecs, ho.options())
	if err != nil {
		pool.Close()
		return nil, err
	}
	// The dashboard asks for a password, printed with its address; any
	// head office over the data folder takes it, and takes the rollout
	// forms the others served, whose token is drawn from it.
	ho.dashboardPassword, err = ho.dashboardSecret(ctx, data)
	if err != nil {
		pool.Close()
		return nil, err
	}
	formToken := sha256.Sum256([]byte("magicsync shop: the rollout form's token\x00" + ho.dashboardPassword))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("listening on %s: %w (pick another with -addr)", addr, err)
	}
	ho.url = "http://" + ln.Addr().String()
	ho.syncURL = ho.url
	mux := http.NewServeMux()
	mux.Handle("/sync/", headoffice.Handler(ho.engine, headoffice.HandlerOptions{PollWait: poll, Logger: log}))
	// The dashboard shares the registers' listener.
	mux.Handle("/", dashboard.New(ho.engine, dashboard.Options{Title: "Corner shop — head office", Names: ho.name, Logger: log,
		Authorize:  dashboard.BasicAuth(dashboardUser, ho.dashboardPassword),
		FormToken:  base64.RawURLEncoding.EncodeToString(formToken[:]),
		ServerName: "the head office",
		// Words a shop owner knows; products keep their name.
		TableLabels: map[string]string{"receipts": "sales", "receipt_lines": "sale lines", "readings": "till readings",
			"footers": "receipt footer", "register_settings": "register setting"}}))
	ho.srv = &http.Server{
		Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		// Every request's context ends with ctx: the registers'
		// long-polls in flight end at once (503, try again later) rather
		// than holding Shutdown up for their whole window.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	grace := shutdownGrace
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ho.wg.Go(func() {
		if err := ho.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("head office: HTTP server stopped", "err", err)
		}
	})
	ho.wg.Go(func() {
		_ = ho.engine.Run(runCtx)
	})
	ho.wg.Go(func() {
		if err := ho.followSales(runCtx); err != nil && runCtx.Err() == nil {
			log.Error("head office: following the sales stopped; the live total stands still", "err", err)
		}
	})
	ho.wg.Go(func() {
		<-ctx.Done()
		shut, done := context.WithTimeout(context.Background(), grace)
		defer done()
		_ = ho.srv.Shutdown(shut)
		cancel()
	})
	return ho, nil
}

func (ho *headOffice) options() server.Options {
	return server.Options{Replicas: "shop.registers(id)", Logger: ho.log, PassEvery: time.Second, Commands: true}
}

// name shows a replica on the dashboard by its register's name, for each
// register the head office serves; any other by its id.
func (ho *headOffice) name(id uuid.UUID) string {
	for i := range ho.registers {
		if registerID(i) == id {
			return registerName(i)
		}
	}
	return id.String()
}

// execDDL runs statements that change nothing when run again, and runs
// them again when PostgreSQL undid them for a deadlock: replacing the
// triggers of tables that another head office on the same database is
// busy with may take their locks in another order than its transactions.
func execDDL(ctx context.Context, pool *pgxpool.Pool, sql string) error {
	return retryDeadlocks(ctx, func() error {
		_, err := pool.Exec(ctx, sql)
		return err
	})
}

// retryDeadlocks runs f, and again, a few times, while PostgreSQL undoes
// it for a deadlock.
func retryDeadlocks(ctx context.Context, f func() error) error {
	for try := 1; ; try++ {
		err := f()
		var pe *pgconn.PgError
		if err == nil || try == 5 || !errors.As(err, &pe) || pe.Code != "40P01" {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(try) * 50 * time.Millisecond):
		}
	}
}

// prepare creates what the database lacks; it runs every time the demo
// starts and changes nothing the second time. Head offices starting
// together over one database take turns, under the preparing lock:
// PostgreSQL's CREATE … IF NOT EXISTS run at once by two of them may both
// find nothing and one fail on the other's.
func (ho *headOffice) prepare(ctx context.Context, registers int) error {
	return ho.underLock(ctx, prepareLock, func(pgx.Tx) error { return ho.prepareAlone(ctx, registers) })
}

// prepareAlone is prepare, under the preparing lock. A database prepared
// already — at an earlier start, or by another head office serving it now
// — keeps its tables as they are: their DDL (ALTER TABLE, CREATE INDEX,
// the triggers replaced) would take locks that wait for the operators'
// writes in progress, and that every reader of the tables — the other
// head offices' passes and polls — would then wait for, or deadlock with.
// Only the shop's first rows are seeded again, if missing.
func (ho *headOffice) prepareAlone(ctx context.Context, registers int) error {
	ready, err := ho.prepared(ctx)
	if err != nil {
		return err
	}
	if !ready {
		if _, err := ho.pool.Exec(ctx, headOfficeSchema); err != nil {
			return fmt.Errorf("creating the shop's schema: %w", err)
		}
		if err := server.Migrate(ctx, ho.pool); err != nil {
			return err
		}
		triggers, err := server.Triggers(ho.codecs, ho.options())
		if err != nil {
			return err
		}
		if err := execDDL(ctx, ho.pool, triggers); err != nil {
			return fmt.Errorf("installing the engine's triggers: %w", err)
		}
	}
	now := time.Now().UTC()
	batch := []struct {
		sql  string
		args []any
	}{{"INSERT INTO shop.shops (id, name) VALUES ($1, 'Corner shop') ON CONFLICT DO NOTHING", []any{shopID}}}
	for i := range registers {
		batch = append(batch, struct {
			sql  string
			args []any
		}{"INSERT INTO shop.registers (id, shop_id, name) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", []any{registerID(i), shopID, registerName(i)}})
	}
	for i, name := range productNames {
		batch = append(batch, struct {
			sql  string
			args []any
		}{"INSERT INTO shop.products (id, shop_id, name, price_cents, updated_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
			[]any{uuid.NewSHA1(shopID, []byte(name)), shopID, name, 150 + 75*i, now}})
	}
	tx, err := ho.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	for _, b := range batch {
		if _, err := tx.Exec(ctx, b.sql, b.args...); err != nil {
			return fmt.Errorf("seeding the shop: %w", err)
		}
	}
	// Every product has its barcodes: those seeded now, and those an
	// earlier demo added before products had barcodes.
	rows, err := tx.Query(ctx, "SELECT id FROM shop.products p WHERE NOT EXISTS (SELECT 1 FROM shop.barcodes b WHERE b.product_id = p.id)")
	if err != nil {
		return fmt.Errorf("seeding the shop's barcodes: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return fmt.Errorf("seeding the shop's barcodes: %w", err)
	}
	for _, id := range ids {
		if err := giveBarcodes(ctx, tx, id); err != nil {
			return fmt.Errorf("seeding the shop's barcodes: %w", err)
		}
	}
	return tx.Commit(ctx)
}

// prepared says whether the database holds what prepare creates: the
// engine takes it (its steps, the shop's synced tables and their columns,
// the triggers of this build, checked by server.New), and the shop's
// tables and index the engine does not check are there.
func (ho *headOffice) prepared(ctx context.Context) (bool, error) {
	if _, err := server.New(ctx, ho.pool, ho.codecs, ho.options()); err != nil {
		if ctx.Err() != nil {
			return false, err
		}
		// Whatever it lacks, preparing it makes it; what preparing
		// cannot mend, the engine says again after.
		return false, nil
	}
	var ready bool
	err := ho.pool.QueryRow(ctx, `SELECT to_regclass('shop.shops') IS NOT NULL AND to_regclass('shop.barcodes_product_id') IS NOT NULL`).Scan(&ready)
	if err != nil {
		return false, fmt.Errorf("looking at the shop's schema: %w", err)
	}
	return ready, nil
}

// barcodes are a product's barcodes: one or two (a second for its
// multipack, say), EAN-13 codes drawn from its id, so that the same
// product always has the same ones.
func barcodes(product uuid.UUID) []string {
	codes := make([]string, 1+int(product[0]%2))
	for i := range codes {
		// "2" opens the EAN range a shop numbers for itself.
		digits := fmt.Sprintf("2%011d", binary.BigEndian.Uint64(product[2*i:])%100_000_000_000)
		sum := 0
		for j, d := range digits {
			sum += int(d-'0') * (1 + 2*(j%2))
		}
		codes[i] = digits + strconv.Itoa((10-sum%10)%10)
	}
	return codes
}

// giveBarcodes gives a product its barcodes, unless it has them.
func giveBarcodes(ctx context.Context, tx pgx.Tx, product uuid.UUID) error {
	for _, code := range barcodes(product) {
		if _, err := tx.Exec(ctx, "INSERT INTO shop.barcodes (code, product_id) VALUES ($1, $2) ON CONFLICT DO NOTHING", code, product); err != nil {
			return err
		}
	}
	return nil
}

// changePrice moves a product's price, as an operator at the head office
// would.
func (ho *headOffice) changePrice(ctx context.Context, product string, cents int64) error {
	_, err := ho.pool.Exec(ctx, "UPDATE shop.products SET price_cents = $1, updated_at = now() WHERE id = $2", cents, uuid.NewSHA1(shopID, []byte(product)))
	return err
}

// addProduct adds a product to the shop's range, with its barcodes; a
// product discontinued before is back in the range.
func (ho *headOffice) addProduct(ctx context.Context, name string, cents int64) error {
	id := uuid.NewSHA1(shopID, []byte(name))
	tx, err := ho.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO shop.products (id, shop_id, name, price_cents, updated_at) VALUES ($1, $2, $3, $4, now())
		ON CONFLICT (id) DO UPDATE SET price_cents = excluded.price_cents, discontinued = false, updated_at = now()`,
		id, shopID, name, cents); err != nil {
		return err
	}
	if err := giveBarcodes(ctx, tx, id); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// discontinue takes a product out of the shop's range. It is never
// deleted: the registers' receipt lines point at the products they sold.
// Discontinued (the catalog's Retired column), it goes to no register that
// lacks it; a register that holds it lets it go, and its barcodes, unless
// its receipt lines point at it: then it keeps it, marked discontinued, and
// no longer sells it, until nothing points at it. A product discontinued
// already, or that the shop does not have, is an error.
func (ho *headOffice) discontinue(ctx context.Context, name string) error {
	tag, err := ho.pool.Exec(ctx, "UPDATE shop.products SET discontinued = true, updated_at = now() WHERE id = $1 AND NOT discontinued",
		uuid.NewSHA1(shopID, []byte(name)))
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("discontinuing %q: the shop has no such product in its range (add it with addProduct)", name)
	}
	return err
}

// wait stops the head office once its context ended.
// serveNATS serves the registers over NATS too, as a member of the queue
// group, until ctx ends: over the NATS server at url, or, when url is
// empty, one started inside the process on a free loopback port, which
// stops with it. Registers then sync at ho.syncURL, the server's URL.
func (ho *headOffice) serveNATS(ctx context.Context, url string, poll time.Duration, log *slog.Logger) error {
	var ns *embedded.Server
	if url == "" {
		var err error
		if ns, err = embedded.Start(embedded.Options{Name: "shop"}); err != nil {
			return err
		}
		url = ns.URL()
	}
	shutdown := func() {
		if ns != nil {
			ns.Shutdown()
		}
	}
	nc, err := nats.Connect(url, nats.Name("shop head office"), nats.MaxReconnects(-1))
	if err != nil {
		shutdown()
		return fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	ho.syncURL = url
	ho.wg.Go(func() {
		defer shutdown()
		defer nc.Close()
		if err := natshead.Serve(ctx, nc, natshead.ForServer(ho.engine), natshead.Options{PollWait: poll, Logger: log}); err != nil {
			log.Error("shop: serving the registers over NATS", "err", err)
		}
	})
	return nil
}

func (ho *headOffice) wait() {
	ho.wg.Wait()
	ho.pool.Close()
}

// passwordPath is where the head office keeps the dashboard's password,
// under the data folder.
func passwordPath(data string) string {
	return filepath.Join(data, "dashboard.password")
}

// dashboardSecret returns the dashboard's password, kept in the data
// folder: drawn and written by the first head office over it, under the
// data folder's lock, and read by the others and at every start after, so
// that behind a load balancer every head office asks for the same. With
// no data folder, it is drawn for this start alone.
func (ho *headOffice) dashboardSecret(ctx context.Context, data string) (string, error) {
	if data == "" {
		return rand.Text(), nil
	}
	path := passwordPath(data)
	read := func() (string, error) {
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("reading the dashboard's password: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	password, err := read()
	if err != nil || password != "" {
		return password, err
	}
	err = ho.underLock(ctx, dataLock, func(pgx.Tx) error {
		if password, err = read(); err != nil || password != "" {
			return err
		}
		password = rand.Text()
		if err := writeSecret(path, password+"\n"); err != nil {
			return fmt.Errorf("keeping the dashboard's password: %w", err)
		}
		return nil
	})
	return password, err
}

// tokenPath is where the head office keeps register i's token, under the
// data folder.
func tokenPath(data string, i int) string {
	return filepath.Join(data, "tokens", fmt.Sprintf("register-%d.token", i+1))
}

// errTokenHeld is wrapped by the error of a register whose token the
// head office does not have, though the database says it was issued one.
var errTokenHeld = errors.New("the register was issued a token this head office does not have")

// token returns register i's token and the file the head office keeps it
// in, under data. A token is issued once and kept: the file's token is
// handed out again as long as the engine accepts it, and one is issued
// (and the file written) only while the register was never issued one —
// the first run, or a new database. It never replaces a token that
// exists: when the register holds one the file does not (another head
// office, with another data folder, issued it), it returns an error
// wrapping errTokenHeld, saying what to do; rotateToken replaces it.
//
// Any number of head offices may share the database and the data folder,
// and start together: the file and the database are read again, and a
// token issued, only under the data folder's lock (see dataLock), so that all
// of them hand out the one token the first issued.
func (ho *headOffice) token(ctx context.Context, data string, i int) (token, path string, err error) {
	path = tokenPath(data, i)
	token, ok, err := ho.fileToken(ctx, path, i, ho.accepts)
	if err != nil || ok {
		return token, path, err
	}
	err = ho.underLock(ctx, dataLock, func(tx pgx.Tx) error {
		// Another head office may have issued it meanwhile: its file is
		// the one to hand out. Read from the database, not the engine's
		// cache of credentials, which may still hold what it read before.
		var ok bool
		token, ok, err = ho.fileToken(ctx, path, i, func(ctx context.Context, id uuid.UUID, secret string) (bool, error) {
			return storedSecret(ctx, tx, id, secret)
		})
		if err != nil || ok {
			return err
		}
		issued, err := ho.issued(ctx, tx, registerID(i))
		if err != nil {
			return fmt.Errorf("%s: looking for its token: %w", registerName(i), err)
		}
		if issued {
			return fmt.Errorf("%s: %w, in %s (another head office, with another -data folder, may have issued it): copy that head office's token file there, or start this one once with -rotate-tokens to issue new tokens — the registers holding the old ones must then be given the new", registerName(i), errTokenHeld, path)
		}
		token, err = ho.issueToken(ctx, path, i)
		return err
	})
	if err != nil {
		return "", "", err
	}
	return token, path, nil
}

// fileToken reads register i's token from its file at path, and says
// whether accepted takes it; a missing file is no error.
func (ho *headOffice) fileToken(ctx context.Context, path string, i int, accepted func(ctx context.Context, id uuid.UUID, secret string) (bool, error)) (token string, ok bool, err error) {
	id := registerID(i)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("%s: reading its token: %w", registerName(i), err)
	}
	token = strings.TrimSpace(string(b))
	claimed, ok := httpsync.TokenReplica(token)
	if !ok || claimed != id {
		return "", false, nil
	}
	_, secret, _ := strings.Cut(token, ".")
	ok, err = accepted(ctx, id, secret)
	if err != nil {
		return "", false, fmt.Errorf("%s: checking its token: %w", registerName(i), err)
	}
	return token, ok, nil
}

// accepts says whether the engine accepts secret for replica id.
func (ho *headOffice) accepts(ctx context.Context, id uuid.UUID, secret string) (bool, error) {
	err := ho.engine.Endpoint().Authenticate(ctx, id, secret)
	if errors.Is(err, server.ErrUnauthorized) {
		return false, nil
	}
	return err == nil, err
}

// rowQuerier reads one row: a pool, a connection or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// storedSecret says whether secret is replica id's, as the database holds
// it now: its SHA-256, as Credentials stores it.
func storedSecret(ctx context.Context, q rowQuerier, id uuid.UUID, secret string) (bool, error) {
	var stored []byte
	err := q.QueryRow(ctx, "SELECT secret FROM public.sync_replicas WHERE id = $1", id).Scan(&stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	h := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(stored, h[:]) == 1, nil
}

// issued says whether the engine holds a token of replica id: the
// SHA-256 that Credentials stores. (The engine offers no call to ask.)
func (ho *headOffice) issued(ctx context.Context, q rowQuerier, id uuid.UUID) (bool, error) {
	var issued bool
	err := q.QueryRow(ctx, "SELECT coalesce(length(secret), 0) > 0 FROM public.sync_replicas WHERE id = $1", id).Scan(&issued)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return issued, err
}

// The keys of the PostgreSQL advisory locks under which head offices over
// one database take turns. Held, a head office prepares the database
// (prepareLock), or reads a file of the data folder — a token file, and
// the database, or the dashboard's password — and writes it (dataLock),
// knowing that no other does the same at once. They are
// transactions' locks: a head office that dies holding one loses its
// connection, and the lock with it.
var (
	prepareLock = lockKey("prepare")
	dataLock    = lockKey("data folder")
)

// lockKey is the key of the shop's advisory lock called name.
func lockKey(name string) int64 {
	key := uuid.NewSHA1(shopID, []byte("lock "+name))
	return int64(binary.BigEndian.Uint64(key[:8]))
}

// underLock runs f in a transaction holding the advisory lock key, waiting
// for it while another head office holds it.
func (ho *headOffice) underLock(ctx context.Context, key int64, f func(tx pgx.Tx) error) error {
	tx, err := ho.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("taking the head offices' lock: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
		return fmt.Errorf("taking the head offices' lock: %w", err)
	}
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// rotateToken issues register i a new token, replacing the one it holds
// (which stops working at once), and writes it to its file under data. It
// runs only when asked (-rotate-tokens), or when the register holds none;
// under the data folder's lock, so that the file and the database end up
// holding the same token, whatever other head offices do at once.
func (ho *headOffice) rotateToken(ctx context.Context, data string, i int) (token, path string, err error) {
	path = tokenPath(data, i)
	err = ho.underLock(ctx, dataLock, func(pgx.Tx) error {
		token, err = ho.issueToken(ctx, path, i)
		return err
	})
	if err != nil {
		return "", "", err
	}
	return token, path, nil
}

// issueToken issues register i a new token and writes it to path; the
// caller holds the data folder's lock.
func (ho *headOffice) issueToken(ctx context.Context, path string, i int) (string, error) {
	id := registerID(i)
	secret, err := ho.engine.Credentials(ctx, id)
	if err != nil {
		return "", fmt.Errorf("%s: issuing its token: %w", registerName(i), err)
	}
	token := httpsync.JoinToken(id, secret)
	if err := writeSecret(path, token+"\n"); err != nil {
		return "", fmt.Errorf("%s: keeping its token: %w", registerName(i), err)
	}
	return token, nil
}

// writeSecret replaces the file at path, readable by its owner only, in
// one step: a reader sees the old content or the new, never a part.
func writeSecret(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return replaceFile(path, ".token-*", content, 0o600)
}

// replaceFile replaces the file at path with content, with the
// permissions perm, in one step: a temporary file beside it (named after
// the pattern temp, as os.CreateTemp takes it), written, synced and
// renamed over it, so that a reader sees the old content or the new,
// never a part.
func replaceFile(path, temp, content string, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), temp)
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // once renamed, removes nothing
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// onlineWatch follows, as the dashboard shows it, whether each register is
// online, and says when that changes.
type onlineWatch struct {
	ho  *headOffice
	say func(string, ...any)
	// every spaces the reads of the status.
	every    time.Duration
	read     time.Time
	online   map[uuid.UUID]bool
	offSince map[uuid.UUID]time.Time
}

func newOnlineWatch(ho *headOffice, every time.Duration, say func(string, ...any)) *onlineWatch {
	return &onlineWatch{ho: ho, say: say, every: every, online: map[uuid.UUID]bool{}, offSince: map[uuid.UUID]time.Time{}}
}

// check reads the status, unless it did less than every ago, and says
// which registers came online or went offline since. The first time it
// sees a register, it names it online, or offline if it called before.
func (w *onlineWatch) check(ctx context.Context) error {
	now := time.Now()
	if !w.due() {
		return nil
	}
	w.read = now
	all, err := w.ho.engine.Status(ctx)
	if err != nil {
		return err
	}
	for _, st := range all {
		was, known := w.online[st.ID]
		if !known && !st.Online {
			// Never seen online yet: offline, as the dashboard shows it,
			// from the first look on — though nothing is said of it. A
			// register unplugged before its first call (the database away
			// when it started, say) is so shown offline, and the day goes
			// on; one starting up has called (it is seen) before its first
			// poll is written (within a second), and going offline is no
			// news of it.
			if _, ok := w.offSince[st.ID]; !ok {
				w.offSince[st.ID] = now
			}
			continue
		}
		if known && was == st.Online {
			continue // no change
		}
		w.online[st.ID] = st.Online
		name := w.ho.name(st.ID)
		switch {
		case st.Online:
			delete(w.offSince, st.ID)
			if known {
				w.say("head office: %s is online again", name)
			} else {
				w.say("head office: %s is online", name)
			}
		default:
			w.offSince[st.ID] = now
			if !st.LastSeen.IsZero() {
				w.say("head office: %s is offline (last seen %s ago)", name, now.Sub(st.LastSeen).Round(time.Second))
			}
		}
	}
	return nil
}

// due says whether check would read the status now.
func (w *onlineWatch) due() bool {
	return w.read.IsZero() || time.Since(w.read) >= w.every
}

// offlineFor says how long ago the watch first found the register offline,
// if it is.
func (w *onlineWatch) offlineFor(id uuid.UUID) (time.Duration, bool) {
	since, off := w.offSince[id]
	if !off {
		return 0, false
	}
	return time.Since(since), true
}

// runHeadOffice is the head office program: the engine, the sync
// endpoints and the dashboard, until ctx ends. It serves c.registers
// registers (demoRegisters unless set), hands each its token through a
// file of the data folder and says when registers come online or go
// offline. With c.wishEvery, it acts as a busy operator too (see
// busy.go).
func runHeadOffice(ctx context.Context, c config) error {
	if c.poll <= 0 {
		c.poll = defaultPoll
	}
	if c.registers <= 0 {
		c.registers = demoRegisters
	}
	ctx, cancel := limit(ctx, c.runFor)
	defer cancel()
	say := sayer(c.out)
	ho, data, stopHeadOffice, err := openHeadOffice(ctx, c, logger(c.verbose), say)
	if err != nil {
		return err
	}
	defer func() {
		cancel()
		stopHeadOffice()
	}()
	err = func() error {
		say("head office up; dashboard at %s/", ho.url)
		say("dashboard login: user %s, password %s", dashboardUser, ho.dashboardPassword)
		for i := range c.registers {
			name := registerName(i)
			get := ho.token
			if c.rotateTokens {
				get = ho.rotateToken
			}
			_, path, err := get(ctx, data, i)
			if err != nil {
				return err
			}
			if c.rotateTokens {
				say("%s: its new token is in %s; the token it held no longer works", name, path)
				continue
			}
			say("%s: its token is in %s", name, path)
		}
		say("start a register with: go run ./examples/shop register -n 1 -server %s -token-file %s", ho.syncURL, tokenPath(data, 0))
		watch := newOnlineWatch(ho, 0, say)
		db := &dbHealth{say: say}
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		// The busy operator's turns; none without -wish-every.
		var turns <-chan time.Time
		var busy *busyOperator
		if c.wishEvery > 0 {
			t := time.NewTicker(c.wishEvery)
			defer t.Stop()
			turns, busy = t.C, newBusyOperator(ho, say)
			say("a busy operator acts every %v: it wishes registers other footers and screen brightnesses, withdraws wishes still waiting, rolls footers out", c.wishEvery)
		}
		for {
			// The database gone away ends nothing: said once, the head
			// office goes on and resumes when it is back.
			if !db.note(ctx, watch.check(ctx)) {
				return ctx.Err()
			}
			for waiting := true; waiting; {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-turns:
					busy.act(ctx)
				case <-tick.C:
					waiting = false
				}
			}
		}
	}()
	if stopped(ctx, err) {
		say("stopping: requests in flight are answered, long-polls end")
		return nil
	}
	return err
}
