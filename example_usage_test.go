package magicsync_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the register's SQLite driver, "sqlite"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/dashboard"
	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

// Receipt is a sale rung up on a register: a record the register writes
// and the head office files.
type Receipt struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	TotalCents int64     `db:"total_cents"`
	RungAt     time.Time `db:"rung_at" sync:"version"`
}

// SyncTable declares the receipts: records, each row belonging to the
// register its register_id names.
func (Receipt) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "receipts", Mirror: magicsync.Record, Origin: "register_id"}
}

// hostSchema is the head office's own tables: the registers (the replicas
// table, which also says which shop each register is in), the products and
// the receipts. The engine only adds its triggers to them.
const hostSchema = `
CREATE SCHEMA shop;
CREATE TABLE shop.registers (id uuid PRIMARY KEY, shop_id uuid NOT NULL);
CREATE TABLE shop.products (
	id uuid PRIMARY KEY, shop_id uuid NOT NULL, name text NOT NULL,
	price_cents bigint NOT NULL, updated_at timestamptz NOT NULL);
CREATE TABLE shop.receipts (
	register_id uuid NOT NULL REFERENCES shop.registers (id), id uuid NOT NULL,
	total_cents bigint NOT NULL, rung_at timestamptz NOT NULL,
	PRIMARY KEY (register_id, id));
`

// registerSchema is a register's own SQLite tables, the same tables by the
// same names, without the schema; made again at every start without harm.
const registerSchema = `
CREATE TABLE IF NOT EXISTS products (
	id TEXT PRIMARY KEY, shop_id TEXT NOT NULL, name TEXT NOT NULL,
	price_cents INTEGER NOT NULL, updated_at TIMESTAMP NOT NULL);
CREATE TABLE IF NOT EXISTS receipts (
	register_id TEXT NOT NULL, id TEXT NOT NULL,
	total_cents INTEGER NOT NULL, rung_at TIMESTAMP NOT NULL,
	PRIMARY KEY (register_id, id));
`

// The head office and one register, end to end, as README.md's "How it is
// used" shows them: the head office serves a shop's products, the register
// receives them, rings up a sale, and the head office files it.
func Example_headOfficeAndRegister() {
	// Test plumbing: a database of its own on the tests' PostgreSQL, with
	// the host's tables, and a folder for the register's file.
	setupCtx, cancelSetup := context.WithTimeout(context.Background(), time.Minute)
	defer cancelSetup()
	databaseURL, dropDatabase, err := exampleDatabase(setupCtx, "usage")
	if err != nil {
		log.Fatal(err)
	}
	defer dropDatabase()
	if err := execOn(setupCtx, databaseURL, hostSchema); err != nil { // the host's migrations
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "magicsync-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(setupCtx)
	defer cancel()

	// Both sides declare the same tables.
	codecs, err := magicsync.NewCodecs(Product{}, Receipt{})
	if err != nil {
		log.Fatal(err)
	}

	// The head office, over the host's PostgreSQL, whose own tables (the
	// registers among them) its migrations made. Open adds the engine's.
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	s, err := server.Open(ctx, pool, codecs, server.Options{Replicas: "shop.registers(id)"})
	if err != nil {
		log.Fatal(err) // says what the host's tables lack
	}
	var wg sync.WaitGroup            // the loops, which end with ctx
	wg.Go(func() { _ = s.Run(ctx) }) // plans what each replica should hold
	mux := http.NewServeMux()
	mux.Handle("/sync/", headoffice.Handler(s, headoffice.HandlerOptions{}))
	headOffice := httptest.NewServer(mux) // a host serves mux with its own http.Server
	defer headOffice.Close()

	// The dashboard, for operators only.
	mux.Handle("/", dashboard.New(s, dashboard.Options{
		Authorize: dashboard.BasicAuth("operator", os.Getenv("DASHBOARD_PASSWORD")), // or the host's own check
	}))

	// A shop with a product, and a register in it: its row in the replicas
	// table comes first, then its token, handed to the register once.
	shop, register := uuid.New(), uuid.New()
	coffee := Product{ID: uuid.New(), ShopID: shop, Name: "Coffee", PriceCents: 250, UpdatedAt: time.Now()}
	if _, err := pool.Exec(ctx, `INSERT INTO shop.products VALUES ($1, $2, $3, $4, $5)`,
		coffee.ID, coffee.ShopID, coffee.Name, coffee.PriceCents, coffee.UpdatedAt); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO shop.registers (id, shop_id) VALUES ($1, $2)`, register, shop); err != nil {
		log.Fatal(err)
	}
	secret, err := s.Credentials(ctx, register)
	if err != nil {
		log.Fatal(err)
	}
	token := httpsync.JoinToken(register, secret)

	// The register, over its own SQLite file: its own tables, then the
	// engine's; its id is in its token.
	reg, err := httpsync.OpenReplica(ctx, filepath.Join(dir, "register.db"), headOffice.URL, token, codecs,
		httpsync.ReplicaOptions{Schema: registerSchema})
	if err != nil {
		log.Fatal(err)
	}
	wg.Go(func() { _ = reg.Run(ctx) }) // sends up what it writes, applies what comes down

	// The register rings up a sale: a row in its own table, as the till
	// writes it; the engine's triggers note it for sending.
	sale := Receipt{RegisterID: register, ID: uuid.New(), TotalCents: 250, RungAt: time.Now()}
	if _, err := reg.DB.ExecContext(ctx, `INSERT INTO receipts VALUES (?, ?, ?, ?)`,
		sale.RegisterID.String(), sale.ID.String(), sale.TotalCents, sale.RungAt); err != nil {
		log.Fatal(err)
	}

	// Test plumbing: wait, boundedly, until the register holds the product
	// and the head office has filed the sale.
	var name string
	var price, filed int64
	deadline := time.Now().Add(30 * time.Second)
	for name == "" || filed == 0 {
		if time.Now().After(deadline) {
			log.Fatalf("after 30 s: the register holds product %q, the head office filed a sale of %d cents", name, filed)
		}
		time.Sleep(20 * time.Millisecond)
		err := reg.DB.QueryRowContext(ctx, `SELECT name, price_cents FROM products WHERE id = ?`, coffee.ID.String()).Scan(&name, &price)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			log.Fatal(err)
		}
		err = pool.QueryRow(ctx, `SELECT total_cents FROM shop.receipts WHERE register_id = $1 AND id = $2`, register, sale.ID).Scan(&filed)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			log.Fatal(err)
		}
	}
	fmt.Printf("the register holds %s at %d cents\n", name, price)
	fmt.Printf("the head office filed a sale of %d cents\n", filed)

	// The dashboard asks for the operator's password.
	resp, err := http.Get(headOffice.URL + "/")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("the dashboard without a password:", resp.Status)

	// Stop: the loops end with ctx; the register's file is closed once
	// they have.
	cancel()
	wg.Wait()
	if err := reg.Close(); err != nil {
		log.Fatal(err)
	}

	// Output:
	// the register holds Coffee at 250 cents
	// the head office filed a sale of 250 cents
	// the dashboard without a password: 401 Unauthorized
}

// exampleDatabase creates an empty database for an example on the test
// binary's PostgreSQL server (pgtest.Start, which the package's TestMain
// allows by running the tests with pgtest.Main), and returns its connection
// string and a function dropping it, closing the connections left open.
// Examples have no *testing.T, so pgtest.NewDatabase does not serve them.
func exampleDatabase(ctx context.Context, name string) (connString string, drop func(), err error) {
	srv, err := pgtest.Start(ctx)
	if err != nil {
		return "", nil, err
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:]) // crypto/rand.Read never fails
	name = "pgtest_example_" + name + "_" + hex.EncodeToString(suffix[:])
	connString, err = pgtest.EnsureDatabase(ctx, srv.URL(), name)
	if err != nil {
		return "", nil, err
	}
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, srv.URL())
		if err != nil {
			log.Printf("dropping database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			log.Printf("dropping database %s: %v", name, err)
		}
	}
	return connString, drop, nil
}

// execOn runs sql on the database at connString.
func execOn(ctx context.Context, connString, sql string) error {
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}
