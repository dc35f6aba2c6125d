package kit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

// office is the head office the kit runs: the engine over a database of
// its own, its HTTP handler behind the fault-injecting proxy, on a
// loopback listener. The engine can be replaced by one over a restored
// copy of its database (restore).
type office struct {
	serverURL string // the PostgreSQL server, server-level
	dbName    string // the current database
	dropped   []string
	codecs    *magicsync.Codecs
	log       *slog.Logger

	mu     sync.Mutex
	pool   *pgxpool.Pool
	engine *server.Server
	stop   func() // stops the engine's Run and closes pool

	handler atomic.Pointer[http.Handler]
	proxy   *proxy
	srv     *http.Server
	url     string
}

// options are the engine's: small messages, so that a provisioning takes
// several parts, and quick passes.
func officeOptions(log *slog.Logger) server.Options {
	return server.Options{Replicas: replicasTable, Logger: log, PassEvery: 200 * time.Millisecond, MaxMessageBytes: 2048, Commands: true}
}

// newDatabaseName draws the name of a database of the kit's own.
func newDatabaseName() string {
	return "magicsync_conformance_" + strings.ToLower(rand.Text()[:12])
}

// withDatabase is the connection string serverURL with database name.
func withDatabase(serverURL, name string) (string, error) {
	if strings.Contains(serverURL, "://") {
		u, err := url.Parse(serverURL)
		if err != nil {
			return "", fmt.Errorf("reading the PostgreSQL URL: %w", err)
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return serverURL + " dbname=" + name, nil
}

// adminExec runs one statement on the server's maintenance database.
func adminExec(ctx context.Context, serverURL, sql string) error {
	c, err := pgconn.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL at %s: %w (give the kit a server it can create databases on)", redact(serverURL), err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	return c.Exec(ctx, sql).Close()
}

// redact leaves a password out of a connection string shown.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return u.String()
		}
	}
	return s
}

// openOffice creates the kit's database on serverURL, its schema, the
// engine's tables and triggers and the seeded products, and starts the
// engine and the HTTP listener.
func openOffice(ctx context.Context, serverURL string, seed func(context.Context, *pgxpool.Pool) error, log *slog.Logger) (_ *office, err error) {
	codecs, err := Codecs()
	if err != nil {
		return nil, err
	}
	o := &office{serverURL: serverURL, dbName: newDatabaseName(), codecs: codecs, log: log}
	if err := adminExec(ctx, serverURL, "CREATE DATABASE "+o.dbName); err != nil {
		return nil, fmt.Errorf("creating the kit's database: %w", err)
	}
	o.dropped = append(o.dropped, o.dbName)
	defer func() {
		if err != nil {
			o.close()
		}
	}()
	dbURL, err := withDatabase(serverURL, o.dbName)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, postgresSchema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("creating the kit's tables: %w", err)
	}
	if err := server.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	triggers, err := server.Triggers(codecs, officeOptions(log))
	if err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := pool.Exec(ctx, triggers); err != nil {
		pool.Close()
		return nil, fmt.Errorf("installing the engine's triggers: %w", err)
	}
	if err := seed(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("seeding the catalog: %w", err)
	}
	pool.Close()
	if err := o.start(ctx, dbURL); err != nil {
		return nil, err
	}
	o.proxy = newProxy(o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening on loopback: %w", err)
	}
	o.url = "http://" + ln.Addr().String()
	o.srv = &http.Server{Handler: o.proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = o.srv.Serve(ln) }()
	return o, nil
}

// start runs an engine over the database dbURL and puts its handler
// behind the proxy.
func (o *office) start(ctx context.Context, dbURL string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	engine, err := server.New(ctx, pool, o.codecs, officeOptions(o.log))
	if err != nil {
		pool.Close()
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); _ = engine.Run(runCtx) }()
	var h http.Handler = headoffice.Handler(engine, headoffice.HandlerOptions{PollWait: 2 * time.Second, Logger: o.log})
	o.mu.Lock()
	o.pool, o.engine = pool, engine
	o.stop = func() { cancel(); <-done; pool.Close() }
	o.mu.Unlock()
	o.handler.Store(&h)
	return nil
}

// current returns the engine and the pool of its database.
func (o *office) current() (*server.Server, *pgxpool.Pool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.engine, o.pool
}

// halt stops the engine and closes its pool: the database has no
// connection of the kit's left, so that it can be copied.
func (o *office) halt() {
	o.mu.Lock()
	stop := o.stop
	o.stop = nil
	o.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// backup stops the engine, copies its database as a backup, and starts
// the engine again over the original; it returns the backup's name.
func (o *office) backup(ctx context.Context) (string, error) {
	o.halt()
	name := o.dbName + "_backup"
	if err := adminExec(ctx, o.serverURL, "CREATE DATABASE "+name+" TEMPLATE "+o.dbName); err != nil {
		return "", fmt.Errorf("copying the head office's database: %w", err)
	}
	o.dropped = append(o.dropped, name)
	dbURL, err := withDatabase(o.serverURL, o.dbName)
	if err != nil {
		return "", err
	}
	return name, o.start(ctx, dbURL)
}

// restore stops the engine and starts another over the database name, as
// a head office restored from that backup would.
func (o *office) restore(ctx context.Context, name string) error {
	o.halt()
	dbURL, err := withDatabase(o.serverURL, name)
	if err != nil {
		return err
	}
	o.dbName = name
	return o.start(ctx, dbURL)
}

// enrol adds replica id to the replicas table and issues its token.
func (o *office) enrol(ctx context.Context, id uuid.UUID) (string, error) {
	engine, pool := o.current()
	if _, err := pool.Exec(ctx, "INSERT INTO kit.replicas (id) VALUES ($1)", id); err != nil {
		return "", err
	}
	secret, err := engine.Credentials(ctx, id)
	if err != nil {
		return "", err
	}
	return httpsync.JoinToken(id, secret), nil
}

// close stops everything and drops the kit's databases.
func (o *office) close() {
	if o.srv != nil {
		shut, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = o.srv.Shutdown(shut)
		cancel()
		_ = o.srv.Close()
	}
	o.halt()
	for _, name := range o.dropped {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := adminExec(ctx, o.serverURL, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil && !errors.Is(err, context.Canceled) {
			o.log.Warn("conformance kit: dropping its database", "database", name, "err", err)
		}
		cancel()
	}
}
