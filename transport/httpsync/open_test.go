package httpsync

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// One call opens a register over a file path, on either driver, with its
// id from its token and its tables made by Schema, then Prepare; its Run
// both applies what comes down and sends up what it writes, and returns
// nil once its context ends. Opened again, the file is the same replica,
// its tables made again without harm.
func TestOpenReplicaSyncsARegisterInOneCall(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		ctx := context.Background()
		o := newShopOffice(t)
		pool, srv, token, register, product, codecs := o.pool, o.srv, o.token, o.register, o.product, o.codecs
		path := filepath.Join(t.TempDir(), "register.db")
		prepared := 0
		ropts := ReplicaOptions{
			Driver: d.Name,
			Schema: shoptest.SQLiteProducts,
			Prepare: func(ctx context.Context, db *sql.DB) error {
				prepared++
				// After Schema: the products are there.
				if _, err := db.ExecContext(ctx, `SELECT count(*) FROM products`); err != nil {
					return err
				}
				_, err := db.ExecContext(ctx, shoptest.SQLiteReceipts)
				return err
			},
			Client:   ClientOptions{PollWait: time.Second, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond},
			Settings: replica.Settings{Idle: 20 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond},
			Logger:   quiet(),
		}
		reg, err := OpenReplica(ctx, path, srv.URL, token, codecs, ropts)
		if err != nil {
			t.Fatal(err)
		}
		if reg.ID != register || prepared != 1 {
			t.Fatalf("OpenReplica: id %v, Prepare ran %d times; want %v, once", reg.ID, prepared, register)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- reg.Run(runCtx) }()

		eventually(t, "the product reaches the register", func() bool {
			var name string
			err := reg.DB.QueryRowContext(ctx, `SELECT name FROM products WHERE id = ?`, product.String()).Scan(&name)
			return err == nil && name == "Coffee"
		})
		sale := uuid.New()
		if _, err := reg.DB.ExecContext(ctx, `INSERT INTO receipts (register_id, id, total_cents, changed_at) VALUES (?, ?, 250, ?)`,
			register.String(), sale.String(), time.Now()); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the head office files the sale", func() bool {
			var total int64
			err := pool.QueryRow(ctx, `SELECT total_cents FROM shop.receipts WHERE register_id = $1 AND id = $2`, register, sale).Scan(&total)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				t.Fatal(err)
			}
			return total == 250
		})
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run = %v once its context ended; want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return within 10 s of its context ending")
		}
		if err := reg.Close(); err != nil {
			t.Fatal(err)
		}

		again, err := OpenReplica(ctx, path, srv.URL, token, codecs, ropts)
		if err != nil {
			t.Fatalf("opening the register again: %v", err)
		}
		defer again.Close()
		var n int
		if err := again.DB.QueryRowContext(ctx, `SELECT count(*) FROM products`).Scan(&n); err != nil || n != 1 || prepared != 2 {
			t.Fatalf("opened again: %d products (%v), Prepare ran %d times; want 1, twice", n, err, prepared)
		}
	})
}

// With CreateTables, the register's tables are made from the declarations
// (and the head office's Schema, which the client fetches), and it syncs
// as one whose host made them.
func TestOpenReplicaCreatesTheTablesTheDeclarationsName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newShopOffice(t)
	client := NewClient(o.srv.URL, o.register, o.token, ClientOptions{Logger: quiet()})
	got, err := client.Schema(ctx)
	if err != nil || !bytes.Equal(got, o.s.Endpoint().Schema()) {
		t.Fatalf("Client.Schema = %d bytes, %v; want the head office's %d", len(got), err, len(o.s.Endpoint().Schema()))
	}
	reg, err := OpenReplica(ctx, filepath.Join(t.TempDir(), "register.db"), o.srv.URL, o.token, o.codecs, ReplicaOptions{
		CreateTables: true,
		Client:       ClientOptions{PollWait: time.Second, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond},
		Settings:     replica.Settings{Idle: 20 * time.Millisecond},
		Logger:       quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- reg.Run(runCtx) }()
	defer func() { stop(); <-done }()
	eventually(t, "the product reaches the register", func() bool {
		var n int
		err := reg.DB.QueryRowContext(ctx, `SELECT count(*) FROM products WHERE id = ?`, o.product.String()).Scan(&n)
		return err == nil && n == 1
	})
	sale := uuid.New()
	if _, err := reg.DB.ExecContext(ctx, `INSERT INTO receipts (register_id, id, total_cents, changed_at) VALUES (?, ?, 250, ?)`,
		o.register.String(), sale.String(), time.Now()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the head office files the sale", func() bool {
		var n int
		err := o.pool.QueryRow(ctx, `SELECT count(*) FROM shop.receipts WHERE id = $1`, sale).Scan(&n)
		return err == nil && n == 1
	})
}

// With CreateTables and the head office out of reach, a first start fails
// (the foreign keys are the head office's to say), retryably.
func TestOpenReplicaCreatingTablesWithoutTheHeadOfficeFails(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens there now
	_, err := OpenReplica(context.Background(), filepath.Join(t.TempDir(), "register.db"), srv.URL, JoinToken(uuid.New(), "s"),
		shoptest.Codecs(t, shoptest.Product{}), ReplicaOptions{CreateTables: true, Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "schema") {
		t.Fatalf("OpenReplica creating tables with the head office out of reach = %v; want an error naming the schema", err)
	}
}

// A token that names no replica is refused before anything is opened.
func TestOpenReplicaRefusesATokenNamingNoReplica(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "register.db")
	_, err := OpenReplica(context.Background(), path, "http://head-office.invalid", "a bare secret", shoptest.Codecs(t, shoptest.Product{}), ReplicaOptions{})
	if !errors.Is(err, ErrTokenNamesNoReplica) {
		t.Fatalf("OpenReplica with a bare secret = %v; want ErrTokenNamesNoReplica", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the file exists after a refusal (%v); want none made", err)
	}
}

// A database without the declared tables, and no Prepare to make them,
// is refused, naming the table, and closed.
func TestOpenReplicaWithoutTheHostsTablesSaysWhichAreMissing(t *testing.T) {
	t.Parallel()
	token := JoinToken(uuid.New(), "secret")
	path := filepath.Join(t.TempDir(), "register.db")
	_, err := OpenReplica(context.Background(), path, "http://head-office.invalid", token, shoptest.Codecs(t, shoptest.Product{}), ReplicaOptions{})
	if err == nil || !strings.Contains(err.Error(), "products") {
		t.Fatalf("OpenReplica without the products table = %v; want a refusal naming it", err)
	}
}

// shopOffice is a head office of the shop's products and receipts, served
// over HTTP, with a register in a shop holding one product (Coffee, 250).
type shopOffice struct {
	s                 *server.Server
	pool              *pgxpool.Pool
	srv               *httptest.Server
	codecs            *magicsync.Codecs
	token             string
	register, product uuid.UUID
}

func newShopOffice(t *testing.T) *shopOffice {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, shopserver.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	codecs := shoptest.Codecs(t, shoptest.Product{}, shoptest.Receipt{})
	opts := server.Options{Replicas: shoptest.Replicas, Logger: quiet(), PassEvery: 50 * time.Millisecond}
	shopserver.InstallTriggers(t, pool, codecs, opts)
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	officeCtx, stopOffice := context.WithCancel(ctx)
	var office sync.WaitGroup
	office.Go(func() { _ = s.Run(officeCtx) })
	t.Cleanup(func() { stopOffice(); office.Wait() })
	srv := httptest.NewServer(NewHandler(ForServer(s), HandlerOptions{PollWait: time.Second, Logger: quiet()}))
	t.Cleanup(srv.Close)

	shop, register, product := uuid.New(), uuid.New(), uuid.New()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO shop.shops (id) VALUES ($1)`, []any{shop}},
		{`INSERT INTO shop.registers (id, shop_id) VALUES ($1, $2)`, []any{register, shop}},
		{`INSERT INTO shop.products (id, shop_id, name, price_cents) VALUES ($1, $2, 'Coffee', 250)`, []any{product, shop}},
	} {
		if _, err := pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	secret, err := s.Credentials(ctx, register)
	if err != nil {
		t.Fatal(err)
	}
	token := JoinToken(register, secret)
	return &shopOffice{s: s, pool: pool, srv: srv, codecs: codecs, token: token, register: register, product: product}
}
