package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/dashboard"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync"
)

// names of the shop's rows, fixed so that running the demo again finds the
// same shop.
var (
	shopID        = uuid.NewSHA1(uuid.NameSpaceURL, []byte("magicsync.example/shop/corner"))
	registerNames = []string{"register 1", "register 2", "register 3"}
	productNames  = []string{"coffee", "croissant", "orange juice", "baguette", "apple pie"}
)

func registerID(i int) uuid.UUID {
	return uuid.NewSHA1(shopID, fmt.Appendf(nil, "register %d", i+1))
}

// headOffice is the server side of the demo: the engine, its sync
// endpoints and the dashboard, on one HTTP listener.
type headOffice struct {
	pool   *pgxpool.Pool
	engine *server.Server
	codecs *magicsync.Codecs
	url    string
	log    *slog.Logger

	srv *http.Server
	wg  sync.WaitGroup
}

// startHeadOffice prepares the database (schema, engine steps, triggers,
// the shop's first rows), starts the engine and serves HTTP on addr.
func startHeadOffice(ctx context.Context, databaseURL, addr string, registers int, log *slog.Logger) (*headOffice, error) {
	codecs, err := codecs()
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	ho := &headOffice{pool: pool, codecs: codecs, log: log}
	if err := ho.prepare(ctx, registers); err != nil {
		pool.Close()
		return nil, err
	}
	ho.engine, err = server.New(ctx, pool, codecs, ho.options())
	if err != nil {
		pool.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("listening on %s: %w (pick another with -addr)", addr, err)
	}
	ho.url = "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("/sync/", httpsync.NewHandler(httpsync.ForServer(ho.engine), httpsync.HandlerOptions{PollWait: 10 * time.Second, Logger: log}))
	mux.Handle("/", dashboard.New(ho.engine, dashboard.Options{Title: "Corner shop — head office", Names: ho.name, Logger: log}))
	ho.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
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
		<-ctx.Done()
		shut, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = ho.srv.Shutdown(shut)
		cancel()
	})
	return ho, nil
}

func (ho *headOffice) options() server.Options {
	return server.Options{Replicas: "shop.registers(id)", Logger: ho.log, PassEvery: time.Second}
}

// name shows a replica on the dashboard by its register's name.
func (ho *headOffice) name(id uuid.UUID) string {
	for i, n := range registerNames {
		if registerID(i) == id {
			return n
		}
	}
	return id.String()
}

// prepare creates what the database lacks; it runs every time the demo
// starts and changes nothing the second time.
func (ho *headOffice) prepare(ctx context.Context, registers int) error {
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
	if _, err := ho.pool.Exec(ctx, triggers); err != nil {
		return fmt.Errorf("installing the engine's triggers: %w", err)
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
		}{"INSERT INTO shop.registers (id, shop_id, name) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", []any{registerID(i), shopID, registerNames[i]}})
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
	return tx.Commit(ctx)
}

// changePrice moves a product's price, as an operator at the head office
// would.
func (ho *headOffice) changePrice(ctx context.Context, product string, cents int64) error {
	_, err := ho.pool.Exec(ctx, "UPDATE shop.products SET price_cents = $1, updated_at = now() WHERE id = $2", cents, uuid.NewSHA1(shopID, []byte(product)))
	return err
}

// addProduct adds a product to the shop's range.
func (ho *headOffice) addProduct(ctx context.Context, name string, cents int64) error {
	_, err := ho.pool.Exec(ctx, "INSERT INTO shop.products (id, shop_id, name, price_cents, updated_at) VALUES ($1, $2, $3, $4, now()) ON CONFLICT (id) DO UPDATE SET price_cents = excluded.price_cents, updated_at = now()",
		uuid.NewSHA1(shopID, []byte(name)), shopID, name, cents)
	return err
}

// wait stops the head office once its context ended.
func (ho *headOffice) wait() {
	ho.wg.Wait()
	ho.pool.Close()
}
