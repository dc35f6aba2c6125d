package natssync_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/natssync"
	"github.com/magicsync/magicsync/transport/natssync/embedded"
	"github.com/magicsync/magicsync/transport/natssync/headoffice"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runHeadOfficeProcess())
	}
	if os.Getenv(registerEnv) != "" {
		os.Exit(runRegisterProcess())
	}
	pgtest.Main(m)
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// at is the time the tests' rows are stamped with.
var at = time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)

// serverOptions are the head office's options in every test and child.
func serverOptions() server.Options {
	return server.Options{Replicas: shoptest.Replicas, Logger: quiet(), PassEvery: 50 * time.Millisecond}
}

// shopCodecs are the tables the tests sync: products down, receipts up.
func shopCodecs() (*magicsync.Codecs, error) {
	return magicsync.NewCodecs(shoptest.Product{}, shoptest.Receipt{})
}

// office is a head office: its database, its engine, and a NATS server
// (embedded unless a test gives its own URL) it serves over.
type office struct {
	t      *testing.T
	ctx    context.Context
	url    string // the database's
	pool   *pgxpool.Pool
	s      *server.Server
	codecs *magicsync.Codecs
	shop   uuid.UUID
}

// newOffice prepares a head office's database with one shop, and its
// engine, which runs until the test ends; it serves nothing yet.
func newOffice(t *testing.T) *office {
	t.Helper()
	ctx := context.Background()
	url := shopserver.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	codecs, err := shopCodecs()
	if err != nil {
		t.Fatal(err)
	}
	shopserver.InstallTriggers(t, pool, codecs, serverOptions())
	s, err := server.New(ctx, pool, codecs, serverOptions())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(runCtx) })
	t.Cleanup(func() { stop(); wg.Wait() })
	o := &office{t: t, ctx: ctx, url: url, pool: pool, s: s, codecs: codecs, shop: uuid.New()}
	o.exec(`INSERT INTO shop.shops (id) VALUES ($1)`, o.shop)
	return o
}

// startNATS starts an embedded NATS server that lives as long as the test.
func startNATS(t *testing.T, opts embedded.Options) *embedded.Server {
	t.Helper()
	ns, err := embedded.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// serve has the office serve the replicas over the NATS server at url,
// until the test ends.
func (o *office) serve(url string, opts ...nats.Option) {
	t := o.t
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.MaxReconnects(-1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(o.ctx)
	done := make(chan error, 1)
	go func() {
		done <- headoffice.Serve(ctx, nc, headoffice.ForServer(o.s), headoffice.Options{PollWait: time.Second, Logger: quiet()})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
		nc.Close()
	})
	// Serve subscribed once a request is answered.
	eventually(t, "the head office answers", func() bool {
		resp, err := nc.Request(natssync.Subject(natssync.DefaultPrefix, uuid.New(), "schema"), nil, time.Second)
		return err == nil && resp.Header.Get(natssync.HeaderStatus) != ""
	})
}

func (o *office) exec(sql string, args ...any) {
	o.t.Helper()
	if _, err := o.pool.Exec(o.ctx, sql, args...); err != nil {
		o.t.Fatal(err)
	}
}

func (o *office) count(sql string, args ...any) int {
	o.t.Helper()
	var n int
	if err := o.pool.QueryRow(o.ctx, sql, args...).Scan(&n); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		o.t.Fatal(err)
	}
	return n
}

// addRegister adds a register of the office's shop and returns its id and
// token.
func (o *office) addRegister() (uuid.UUID, string) {
	o.t.Helper()
	id := uuid.New()
	o.exec(`INSERT INTO shop.registers (id, shop_id) VALUES ($1, $2)`, id, o.shop)
	secret, err := o.s.Credentials(o.ctx, id)
	if err != nil {
		o.t.Fatal(err)
	}
	return id, natssync.JoinToken(id, secret)
}

// addProduct adds a product to the office's shop.
func (o *office) addProduct(name string, price int64) uuid.UUID {
	o.t.Helper()
	id := uuid.New()
	o.exec(`INSERT INTO shop.products (id, shop_id, name, price_cents) VALUES ($1, $2, $3, $4)`, id, o.shop, name, price)
	return id
}

// register is a replica over NATS, running until the test ends (or stop).
type register struct {
	t      *testing.T
	id     uuid.UUID
	db     *sql.DB
	client *natssync.Client
	engine *replica.Replica
	stop   func()
}

// startRegister opens a register's SQLite database and runs its replica,
// and its client's receive loop, over the NATS server at url.
func startRegister(t *testing.T, codecs *magicsync.Codecs, url string, id uuid.UUID, token string, opts ...nats.Option) *register {
	t.Helper()
	return startRegisterOn(t, registerDB(t, codecs), codecs, url, id, token, opts...)
}

// registerDB opens a register's SQLite database, its tables made and the
// engine installed.
func registerDB(t *testing.T, codecs *magicsync.Codecs) *sql.DB {
	t.Helper()
	db := sqlitetest.Open(t, sqlitetest.Modernc())
	if _, err := db.Exec(shoptest.SQLiteProducts + shoptest.SQLiteReceipts); err != nil {
		t.Fatal(err)
	}
	if err := replica.Install(context.Background(), db, codecs); err != nil {
		t.Fatal(err)
	}
	return db
}

// startRegisterOn is startRegister over db, which registerDB opened.
func startRegisterOn(t *testing.T, db *sql.DB, codecs *magicsync.Codecs, url string, id uuid.UUID, token string, opts ...nats.Option) *register {
	t.Helper()
	ctx := context.Background()
	nc, err := natssync.Connect(url, id, opts...)
	if err != nil {
		t.Fatal(err)
	}
	client := natssync.NewClient(nc, id, token, natssync.ClientOptions{
		PollWait: time.Second, RequestTimeout: 2 * time.Second, BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond, Logger: quiet()})
	r, err := replica.New(ctx, db, codecs, replica.Me(id), client, replica.Settings{
		Logger: quiet(), Idle: 20 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond, DigestsEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.Run(runCtx); err != nil {
			t.Errorf("replica Run = %v", err)
		}
	})
	wg.Go(func() {
		if err := client.ReceiveLoop(runCtx, r.Endpoint()); err != nil {
			t.Errorf("ReceiveLoop = %v", err)
		}
	})
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait(); r.Close(); nc.Close() }) }
	t.Cleanup(stop)
	return &register{t: t, id: id, db: db, client: client, engine: r, stop: stop}
}

// sell records a sale on the register and returns its id.
func (g *register) sell(cents int64) uuid.UUID {
	g.t.Helper()
	id := uuid.New()
	if _, err := g.db.Exec(`INSERT INTO receipts (register_id, id, total_cents, changed_at) VALUES (?, ?, ?, ?)`,
		g.id.String(), id.String(), cents, at); err != nil {
		g.t.Fatal(err)
	}
	return id
}

// price returns a product's price on the register, or -1 without it.
func (g *register) price(product uuid.UUID) int64 {
	g.t.Helper()
	var p int64
	err := g.db.QueryRow(`SELECT price_cents FROM products WHERE id = ?`, product.String()).Scan(&p)
	if errors.Is(err, sql.ErrNoRows) {
		return -1
	}
	if err != nil {
		g.t.Fatal(err)
	}
	return p
}

// eventually waits, up to 20 s, for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventuallyWithin(t, 20*time.Second, what, cond)
}

func eventuallyWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
