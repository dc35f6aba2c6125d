package pgtest

// pgtest.go holds the test binary's shared server and the empty databases
// it hands each test.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Server is the PostgreSQL server the tests of one test binary share.
type Server struct {
	url    string        // server-level connection string
	kind   string        // where it came from, for messages
	origin Origin        // which step of the search found it
	admin  *pgxpool.Pool // creates and drops the tests' databases
	stop   func() error  // stops a private cluster; nil-safe no-op otherwise
	// templates are the databases of the Templates prepared on it, dropped
	// when the tests end; guarded by shared.mu.
	templates []string
}

// shared is the test binary's server, found or started by the first test that
// asks for one and stopped by Run. It is the module's only package-level
// state, allowed here because this package serves tests only (see the
// package documentation).
var shared struct {
	mu     sync.Mutex
	inMain bool    // Run is running the tests
	srv    *Server // the server, once found
	err    error   // why it could not be found, once that is known
	// logical is the server with wal_level=logical (StartLogical): srv
	// when it is so configured, else a throwaway cluster of its own.
	logical    *Server
	logicalErr error
}

// Main runs the tests of a package whose tests use PostgreSQL and exits with
// their status. Call it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run runs the tests like [Main] but returns their exit code instead of
// exiting, for a TestMain that has more to do. It stops a private cluster
// started for the tests once they have finished, and turns the exit code into
// a failure when stopping it fails.
func Run(m *testing.M) int {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()

	code := m.Run()

	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.inMain = false
	if shared.logical != nil && shared.logical != shared.srv {
		code = shared.logical.close(code)
	}
	if shared.srv != nil {
		code = shared.srv.close(code)
	}
	shared.srv, shared.logical = nil, nil
	return code
}

// close drops the server's templates and stops what was started for it,
// turning a zero exit code into 1 when that fails.
func (s *Server) close(code int) int {
	fail := func(format string, err error) {
		fmt.Fprintf(os.Stderr, format, err)
		if code == 0 {
			code = 1
		}
	}
	if err := s.dropTemplates(s.templates); err != nil {
		fail("pgtest: %v\n", err)
	}
	s.templates = nil
	s.admin.Close()
	if err := s.stop(); err != nil {
		fail("pgtest: stopping PostgreSQL: %v\n", err)
	}
	return code
}

// Start returns the test binary's server, finding or starting it on the first
// call: $DATABASE_URL, else the local server at 127.0.0.1:5432, else a
// throwaway cluster (see the package documentation). It fails unless the
// tests were started by [Main] or [Run], which stop that cluster at the end.
func Start(ctx context.Context) (*Server, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		return nil, errors.New("pgtest: the package's TestMain must run the tests with pgtest.Main(m) or pgtest.Run(m), so that a cluster started for them is stopped")
	}
	if shared.srv != nil || shared.err != nil {
		return shared.srv, shared.err
	}
	srv, err := newServer(ctx, config{logf: logStderr, getenv: os.Getenv, localURL: localServerURL})
	if err != nil {
		err = fmt.Errorf("pgtest: %w", err)
		if ctx.Err() == nil { // a cancelled caller says nothing about later ones
			shared.err = err
		}
		return nil, err
	}
	shared.srv = srv
	return srv, nil
}

// newServer finds a server as c says and connects to it.
func newServer(ctx context.Context, c config) (*Server, error) {
	f, err := find(ctx, c)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(f.url)
	if err != nil {
		return nil, errors.Join(err, f.stop())
	}
	cfg.MaxConns = 4
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, errors.Join(err, f.stop())
	}
	return &Server{url: f.url, kind: f.kind, origin: f.origin, admin: admin, stop: f.stop}, nil
}

func logStderr(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

// URL returns the server-level connection string: the database named by
// $DATABASE_URL, or database postgres as user postgres.
func (s *Server) URL() string { return s.url }

// NewDatabase creates an empty database for this test alone, drops it
// (WITH (FORCE), closing connections left open) when the test ends, and
// returns its connection string.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	return s.newDatabase(t, "")
}

// newDatabase creates a database for this test alone, a copy of database
// template when it is not empty, drops it when the test ends, and returns
// its connection string.
func (s *Server) newDatabase(t testing.TB, template string) string {
	t.Helper()
	name := databaseName(t.Name())
	ident := pgx.Identifier{name}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.createDatabase(ctx, ident, template); err != nil {
		t.Fatalf("pgtest: creating database %s on the %s: %v", name, s.kind, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.dropSlots(ctx, name); err != nil {
			t.Errorf("pgtest: dropping the replication slots of database %s: %v", name, err)
		}
		if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return withDatabase(s.url, name)
}

// NewPool creates a database for this test alone, as [Server.NewDatabase]
// does, and returns a pool on it that is closed when the test ends.
func (s *Server) NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	connString := s.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), connString)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close) // runs before the database is dropped
	return pool
}

// server returns the test binary's server or ends the test.
func server(t testing.TB) *Server {
	t.Helper()
	s, err := Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// NewDatabase creates an empty database for this test alone on the test
// binary's server and returns its connection string; the database is dropped
// when the test ends. See [Server.NewDatabase].
func NewDatabase(t testing.TB) string {
	t.Helper()
	return server(t).NewDatabase(t)
}

// NewPool creates an empty database for this test alone on the test binary's
// server and returns a pool on it; both go away when the test ends. See
// [Server.NewPool].
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return server(t).NewPool(t)
}

// URL returns the server-level connection string of the test binary's
// server, for tests and benchmarks that manage databases themselves.
func URL(t testing.TB) string {
	t.Helper()
	return server(t).URL()
}

// databaseName makes a database name from a test's name: lower-case letters,
// digits and underscores only, at most 63 bytes, and unique thanks to a
// random suffix.
func databaseName(testName string) string {
	var b strings.Builder
	underscore := true // no leading underscore after the prefix
	for _, r := range strings.ToLower(testName) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			underscore = false
		} else if !underscore {
			b.WriteByte('_')
			underscore = true
		}
	}
	body := strings.TrimRight(b.String(), "_")
	if len(body) > 45 {
		body = strings.TrimRight(body[:45], "_")
	}
	if body == "" {
		body = "test"
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:]) // crypto/rand.Read never fails
	return "pgtest_" + body + "_" + hex.EncodeToString(suffix[:])
}

// withDatabase returns connString with its database replaced by name, which
// must need no quoting. It handles both URLs and keyword/value strings.
func withDatabase(connString, name string) string {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err == nil {
			u.Path, u.RawPath = "/"+name, ""
			q := u.Query()
			if q.Has("dbname") {
				q.Set("dbname", name)
				u.RawQuery = q.Encode()
			}
			return u.String()
		}
	}
	// In keyword/value form the last setting of a keyword wins.
	return strings.TrimSpace(connString) + " dbname=" + name
}
