// This file holds templates: a database prepared once per test binary and
// cloned, already prepared, for each test that asks for one.

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// cloneWait bounds how long a clone waits for the template to be free of
// other sessions. PostgreSQL itself waits five seconds for them to leave
// before it refuses; a template's sessions are all gone once it is prepared,
// so a refusal here means one lingers, and a few more tries settle it.
const cloneWait = 30 * time.Second

// A Template is a database that a test binary prepares once, on the first
// test that asks for a copy, and then clones for each test (CREATE DATABASE
// ... TEMPLATE), so that every test gets a fresh database already holding
// what prepare put in it, for the price of a file copy. Declare one as a
// package-level variable of a test helper package; it is safe for
// concurrent use, and [Run] drops its database when the tests end.
type Template struct {
	name    string
	prepare func(ctx context.Context, connString string) error

	mu sync.Mutex
	// on is the template's database on each server it was prepared on
	// (the shared one, the logical one), or why preparing it failed.
	on map[*Server]preparedTemplate
}

// preparedTemplate is a template's database on one server.
type preparedTemplate struct {
	dbName string // the prepared database, once made
	err    error  // why preparing it failed, once it did
}

// NewTemplate returns a template named name (a short word, used in the
// database's name) that prepare fills: prepare gets the connection string
// of a new, empty database and must close every connection it opened on it
// before it returns. Nothing happens until a test asks for a copy.
func NewTemplate(name string, prepare func(ctx context.Context, connString string) error) *Template {
	return &Template{name: name, prepare: prepare}
}

// NewDatabase creates a copy of the template for this test alone, preparing
// the template first if no test did yet, drops the copy when the test ends,
// and returns its connection string.
func (tp *Template) NewDatabase(t testing.TB) string {
	t.Helper()
	return tp.newDatabaseOn(t, server(t))
}

// newDatabaseOn is NewDatabase on server s.
func (tp *Template) newDatabaseOn(t testing.TB, s *Server) string {
	t.Helper()
	source, err := tp.database(s)
	if err != nil {
		t.Fatal(err)
	}
	return s.newDatabase(t, source)
}

// NewPool creates a copy of the template for this test alone, as
// [Template.NewDatabase] does, and returns a pool on it that is closed when
// the test ends.
func (tp *Template) NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return poolOn(t, tp.NewDatabase(t))
}

// poolOn opens a pool on the test's database at url, closed when the test
// ends, before the database is dropped.
func poolOn(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// database returns the name of the template's prepared database on s,
// preparing it on the first call.
func (tp *Template) database(s *Server) (string, error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if p, ok := tp.on[s]; ok {
		return p.dbName, p.err
	}
	if tp.on == nil {
		tp.on = map[*Server]preparedTemplate{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name := databaseName("template_" + tp.name)
	if err := s.createTemplate(ctx, name, tp.prepare); err != nil {
		err = fmt.Errorf("pgtest: preparing template %s: %w", tp.name, err)
		tp.on[s] = preparedTemplate{err: err}
		return "", err
	}
	tp.on[s] = preparedTemplate{dbName: name}
	return name, nil
}

// createTemplate creates database name, has prepare fill it, and closes it
// to connections so that it can be cloned. The database is dropped when the
// tests end ([Run]), or at once when preparing it fails.
func (s *Server) createTemplate(ctx context.Context, name string, prepare func(context.Context, string) error) error {
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return fmt.Errorf("creating database %s on the %s: %w", name, s.kind, err)
	}
	err := prepare(ctx, withDatabase(s.url, name))
	if err == nil {
		// No session may be connected to a database being cloned: refuse
		// new ones, and end any that prepare left behind.
		_, err = s.admin.Exec(ctx, "ALTER DATABASE "+ident+" WITH ALLOW_CONNECTIONS false")
	}
	if err == nil {
		_, err = s.admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name)
	}
	if err != nil {
		_, dropErr := s.admin.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
		return errors.Join(err, dropErr)
	}
	shared.mu.Lock()
	s.templates = append(s.templates, name)
	shared.mu.Unlock()
	return nil
}

// dropTemplates drops the templates' databases; Run calls it with shared.mu
// held, once the tests have ended.
func (s *Server) dropTemplates(names []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	for _, name := range names {
		if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			errs = append(errs, fmt.Errorf("dropping template database %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// createDatabase creates database ident, a copy of template when it is
// not empty. A clone that PostgreSQL refuses because a session is still
// connected to the template is tried again, for at most cloneWait.
func (s *Server) createDatabase(ctx context.Context, ident, template string) error {
	sql := "CREATE DATABASE " + ident
	if template == "" {
		_, err := s.admin.Exec(ctx, sql)
		return err
	}
	sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	deadline := time.Now().Add(cloneWait)
	for {
		_, err := s.admin.Exec(ctx, sql)
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "55006" || time.Now().After(deadline) {
			return err // 55006: object_in_use, "source database ... is being accessed by other users"
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
