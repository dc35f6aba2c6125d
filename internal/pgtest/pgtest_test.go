package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/testenv"
)

func TestMain(m *testing.M) { Main(m) }

func TestNewPoolWorks(t *testing.T) {
	t.Parallel()
	pool := NewPool(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO items VALUES (1, 'one'), (2, 'two')`); err != nil {
		t.Fatal(err)
	}
	var n int
	var db string
	if err := pool.QueryRow(ctx, `SELECT count(*), current_database() FROM items`).Scan(&n, &db); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("count = %d, want 2", n)
	}
	if !strings.HasPrefix(db, "pgtest_testnewpoolworks_") {
		t.Errorf("database %q is not named after the test", db)
	}
}

func TestNewDatabaseIsFreshAndOwn(t *testing.T) {
	t.Parallel()
	a, b := NewDatabase(t), NewDatabase(t)
	if a == b {
		t.Fatalf("two databases with one connection string %s", a)
	}
	ca, cb := connect(t, a), connect(t, b)
	ctx := t.Context()
	var nameA, nameB string
	if err := ca.QueryRow(ctx, `SELECT current_database()`).Scan(&nameA); err != nil {
		t.Fatal(err)
	}
	if err := cb.QueryRow(ctx, `SELECT current_database()`).Scan(&nameB); err != nil {
		t.Fatal(err)
	}
	if nameA == nameB {
		t.Fatalf("both connection strings reach database %s", nameA)
	}
	if _, err := ca.Exec(ctx, `CREATE TABLE only_in_a (id int)`); err != nil {
		t.Fatal(err)
	}
	var tables int
	if err := cb.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("the second database has %d tables, want 0", tables)
	}
}

// TestNewDatabaseParallel creates databases from parallel tests at once.
func TestNewDatabaseParallel(t *testing.T) {
	t.Parallel()
	for i := range 6 {
		t.Run(string(rune('a'+i)), func(t *testing.T) {
			t.Parallel()
			var one int
			if err := NewPool(t).QueryRow(t.Context(), `SELECT 1`).Scan(&one); err != nil || one != 1 {
				t.Fatalf("SELECT 1 = %d, %v", one, err)
			}
		})
	}
}

// TestDatabaseDroppedAtCleanup checks that a database is gone once its test
// ended, even with a connection still open on it.
func TestDatabaseDroppedAtCleanup(t *testing.T) {
	var name string
	var leftOpen *pgx.Conn
	t.Run("inner", func(t *testing.T) {
		u := NewDatabase(t)
		name = databaseOf(t, u)
		c, err := pgx.Connect(context.Background(), u) // not closed before the drop
		if err != nil {
			t.Fatal(err)
		}
		leftOpen = c
	})
	defer leftOpen.Close(context.Background())
	admin := connect(t, URL(t))
	var exists bool
	if err := admin.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %s still exists after its test ended", name)
	}
}

func TestURLIsServerLevel(t *testing.T) {
	t.Parallel()
	c := connect(t, URL(t))
	var canCreate bool
	if err := c.QueryRow(t.Context(), `SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&canCreate); err != nil {
		t.Fatal(err)
	}
	if !canCreate {
		t.Error("the server-level user cannot create databases")
	}
}

// TestDatabaseURLTakesPrecedence names, in $DATABASE_URL, the test binary's
// own server under a distinctive application name, and checks that find
// chooses it over a local server that answers.
func TestDatabaseURLTakesPrecedence(t *testing.T) {
	local := answeringLocal(t)
	want := withParam(t, URL(t), "application_name", "pgtest-precedence")
	env := map[string]string{envDatabaseURL: want}
	f, err := find(t.Context(), config{logf: t.Logf, getenv: mapEnv(env), localURL: local})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.stop() })
	if f.url != want || f.kind != "server named by $DATABASE_URL" || f.origin != OriginDatabaseURL {
		t.Fatalf("find chose the %s at %s, want $DATABASE_URL %s over the local server %s", f.kind, f.url, want, local)
	}
	var app string
	if err := connect(t, f.url).QueryRow(t.Context(), `SHOW application_name`).Scan(&app); err != nil {
		t.Fatal(err)
	}
	if app != "pgtest-precedence" {
		t.Errorf("application_name = %q: not the server $DATABASE_URL names", app)
	}
}

// TestLocalServerChosenWhenItAnswers leaves $DATABASE_URL unset and checks
// that find takes the local server, starting no cluster.
func TestLocalServerChosenWhenItAnswers(t *testing.T) {
	local := answeringLocal(t)
	f, err := find(t.Context(), config{logf: t.Logf, getenv: mapEnv(nil), localURL: local})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.stop() })
	if f.url != local || f.kind != "local server at 127.0.0.1:5432" || f.origin != OriginLocal {
		t.Fatalf("find chose the %s at %s, want the local server %s", f.kind, f.url, local)
	}
}

// answeringLocal is a local server that answers: the one at
// 127.0.0.1:5432 when it does, else the test binary's own server standing
// in for it, under an application name of its own.
func answeringLocal(t *testing.T) string {
	t.Helper()
	if ping(t.Context(), localServerURL, probeTimeout) == nil {
		return localServerURL
	}
	t.Logf("nothing answers at 127.0.0.1:5432: the test binary's server stands in for the local server")
	return withParam(t, URL(t), "application_name", "pgtest-local")
}

// deadURL is a server-level connection string to a port on 127.0.0.1 where
// nothing listens: one a listener held a moment ago.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", port)
}

// TestDatabaseURLMustAnswer checks that an unreachable $DATABASE_URL is an
// error rather than a silent fall back to another server.
func TestDatabaseURLMustAnswer(t *testing.T) {
	t.Parallel()
	bad := "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"
	_, err := find(t.Context(), config{logf: t.Logf, getenv: mapEnv(map[string]string{envDatabaseURL: bad}), localURL: localServerURL})
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("find = %v, want an error naming $DATABASE_URL", err)
	}
}

// TestFindFallsBackToAThrowawayCluster leaves $DATABASE_URL unset and the
// local server dead, as on a machine that runs no server, and checks that
// find starts a cluster on its own: in a temporary directory, fast and
// unsafe, removed when stopped.
func TestFindFallsBackToAThrowawayCluster(t *testing.T) {
	t.Parallel()
	requireBinaries(t)
	dead := deadURL(t)
	if err := ping(t.Context(), dead, time.Second); err == nil {
		t.Fatalf("something answers at %s", dead)
	}
	srv, err := newServer(t.Context(), config{logf: t.Logf, getenv: mapEnv(nil), localURL: dead})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			srv.admin.Close()
			_ = srv.stop()
		}
	})
	if srv.kind != "private cluster" || srv.origin != OriginThrowaway {
		t.Fatalf("server is the %s (%s), want a throwaway private cluster", srv.kind, srv.origin)
	}
	host := hostOf(t, srv.URL())
	if !strings.HasPrefix(filepath.Base(host), throwawayPrefix) {
		t.Fatalf("socket in %s, want the cluster's temporary directory", host)
	}

	// The helpers work on it as on any server; the subtest's database is
	// dropped when it ends, before the cluster stops.
	t.Run("use", func(t *testing.T) {
		pool := srv.NewPool(t)
		var fsync, listen string
		if err := pool.QueryRow(t.Context(), `SELECT current_setting('fsync'), current_setting('listen_addresses')`).Scan(&fsync, &listen); err != nil {
			t.Fatal(err)
		}
		if fsync != "off" {
			t.Errorf("fsync = %s, want off in a throwaway cluster", fsync)
		}
		if listen != "" {
			t.Errorf("listen_addresses = %q, want no TCP", listen)
		}
	})

	srv.admin.Close()
	if err := srv.stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if _, err := os.Stat(host); !os.IsNotExist(err) {
		t.Errorf("%s still there after stop (%v)", host, err)
	}
	if err := ping(t.Context(), srv.URL(), time.Second); err == nil {
		t.Error("the cluster still answers after stop")
	}
}

// TestEnsureKeepsCluster forces a kept cluster in a directory of the test's
// own, as the demo uses it: stopped, then started again with its data.
func TestEnsureKeepsCluster(t *testing.T) {
	requireBinaries(t)
	t.Setenv(envForceCluster, "1")
	dir := reachableTempDir(t)
	ctx := t.Context()

	u, stop, err := Ensure(ctx, dir, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	if _, err := os.Stat(filepath.Join(dir, "postgresql", "data", "PG_VERSION")); err != nil {
		t.Fatalf("no cluster in %s: %v", dir, err)
	}
	// A second Ensure while it runs uses the running server.
	u2, stop2, err := Ensure(ctx, dir, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := stop2(); err != nil { // leaves the first one's server alone
		t.Fatal(err)
	}
	c := connect(t, u2)
	var fsync string
	if err := c.QueryRow(ctx, `SHOW fsync`).Scan(&fsync); err != nil {
		t.Fatal(err)
	}
	if fsync != "on" {
		t.Errorf("fsync = %s, want on in a kept cluster", fsync)
	}
	if _, err := c.Exec(ctx, `CREATE TABLE kept (note text); INSERT INTO kept VALUES ('from the first run')`); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := ping(ctx, u, time.Second); err == nil {
		t.Fatal("the cluster still answers after stop")
	}

	u, stop, err = Ensure(ctx, dir, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	var note string
	if err := connect(t, u).QueryRow(ctx, `SELECT note FROM kept`).Scan(&note); err != nil {
		t.Fatalf("the second run lost the first one's data: %v", err)
	}
	if note != "from the first run" {
		t.Errorf("note = %q", note)
	}
}

func TestDatabaseName(t *testing.T) {
	t.Parallel()
	long := "Test" + strings.Repeat("VeryLong/Sub test: ünïcode ", 10)
	seen := map[string]bool{}
	for _, in := range []string{"TestX", "TestX", "TestA/b c", "/__/", long} {
		got := databaseName(in)
		if len(got) > 63 {
			t.Errorf("databaseName(%q) = %q, %d bytes", in, got, len(got))
		}
		if strings.Trim(got, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" || strings.Contains(got, "__") {
			t.Errorf("databaseName(%q) = %q, want [a-z0-9_] without doubled underscores", in, got)
		}
		if !strings.HasPrefix(got, "pgtest_") {
			t.Errorf("databaseName(%q) = %q, want prefix pgtest_", in, got)
		}
		if seen[got] {
			t.Errorf("databaseName(%q) = %q twice", in, got)
		}
		seen[got] = true
	}
	if got := databaseName("TestA/b c"); !strings.HasPrefix(got, "pgtest_testa_b_c_") {
		t.Errorf("databaseName = %q", got)
	}
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:p@h:5/orig?sslmode=disable":                 "postgres://u:p@h:5/db1?sslmode=disable",
		"postgresql://u@h":                                        "postgresql://u@h/db1",
		"postgres://postgres@/postgres?host=%2Ftmp%2Fd&port=5432": "postgres://postgres@/db1?host=%2Ftmp%2Fd&port=5432",
		"postgres://u@h/x?dbname=orig":                            "postgres://u@h/db1?dbname=db1",
		"host=h user=u dbname=orig":                               "host=h user=u dbname=orig dbname=db1",
		"host=/tmp/d user=u ":                                     "host=/tmp/d user=u dbname=db1",
	} {
		if got := withDatabase(in, "db1"); got != want {
			t.Errorf("withDatabase(%q) = %q, want %q", in, got, want)
		}
	}
	// pgx reads the keyword/value form with the last dbname winning.
	cfg, err := pgx.ParseConfig(withDatabase("host=h user=u dbname=orig", "db1"))
	if err != nil || cfg.Database != "db1" {
		t.Errorf("pgx reads database %q (%v), want db1", cfg.Database, err)
	}
}

func TestPickBinaries(t *testing.T) {
	t.Parallel()
	found := []binaries{
		{dir: "a", major: 13, version: "13.9"},
		{dir: "b", major: 15, version: "15.2"},
		{dir: "c", major: 15, version: "15.19"},
		{dir: "d", major: 9, version: "9.6.24"},
	}
	if b, ok := pickBinaries(found, 0); !ok || b.dir != "c" {
		t.Errorf("newest = %+v, %v; want 15.19", b, ok)
	}
	if b, ok := pickBinaries(found, 13); !ok || b.dir != "a" {
		t.Errorf("major 13 = %+v, %v", b, ok)
	}
	if b, ok := pickBinaries(found, 16); ok {
		t.Errorf("major 16 = %+v, want none", b)
	}
	major, version, err := parseVersion("postgres (PostgreSQL) 15.19 (Debian 15.19-0+deb12u1)\n")
	if err != nil || major != 15 || version != "15.19" {
		t.Errorf("parseVersion = %d %q %v", major, version, err)
	}
	if major, version, err := parseVersion("postgres (PostgreSQL) 17devel"); err != nil || major != 17 || version != "17" {
		t.Errorf("parseVersion(devel) = %d %q %v", major, version, err)
	}
}

func TestTruthy(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{"": false, "0": false, "false": false, "OFF": false, "1": true, "true": true, "yes": true} {
		if truthy(v) != want {
			t.Errorf("truthy(%q) = %v", v, !want)
		}
	}
}

// requireBinaries skips a test that needs PostgreSQL's server programs on a
// machine without them, or fails it under CI.
func requireBinaries(t *testing.T) {
	t.Helper()
	if _, err := findBinaries(t.Context(), 0); err != nil {
		binariesMissing(t, err)
	}
}

// binariesMissing ends a test that needs PostgreSQL's server programs and
// found none (err says where it looked). A developer without them sees it
// skip, saying what to install; under CI (the environment variable CI set,
// as CI services set it) it fails instead: CI must never skip the cluster
// tests silently.
func binariesMissing(t testing.TB, err error) {
	t.Helper()
	testenv.Missing(t, fmt.Sprintf("no local PostgreSQL server programs (initdb and postgres): %v", err), "the cluster tests")
}

// TestMissingBinariesFailUnderCIAndSkipOtherwise checks that a test
// needing initdb fails under CI when there is none, and otherwise skips,
// saying what is missing.
func TestMissingBinariesFailUnderCIAndSkipOtherwise(t *testing.T) {
	_, err := findBinariesIn(t.Context(), []string{t.TempDir()}, 0)
	if err == nil {
		t.Fatal("binaries found in an empty directory")
	}
	for _, tc := range []struct {
		ci   string
		fail bool
	}{{"true", true}, {"1", true}, {"yes", true}, {"", false}, {"false", false}, {"0", false}} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			fake := testenv.Ends(t, func(tb testing.TB) { binariesMissing(tb, err) })
			switch {
			case tc.fail && fake.FatalMsg == "":
				t.Errorf("under CI=%q, a missing initdb did not fail the test (skip: %q)", tc.ci, fake.SkipMsg)
			case tc.fail && !strings.Contains(fake.FatalMsg, "under CI the cluster tests must run"):
				t.Errorf("under CI=%q, the failure does not say why: %q", tc.ci, fake.FatalMsg)
			case !tc.fail && (fake.SkipMsg == "" || fake.FatalMsg != ""):
				t.Errorf("with CI=%q, a missing initdb did not skip the test (fatal: %q)", tc.ci, fake.FatalMsg)
			}
			if msg := fake.FatalMsg + fake.SkipMsg; !strings.Contains(msg, "initdb") || !strings.Contains(msg, "install PostgreSQL") {
				t.Errorf("the message does not say initdb is missing and what to do: %q", msg)
			}
		})
	}
}

// reachableTempDir returns t.TempDir(), opened (with its parent, which the
// testing package creates mode 0700) so that the postgres OS user can enter
// it when the tests run as root.
func reachableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func connect(t *testing.T, connString string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), connString)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func databaseOf(t *testing.T, connString string) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.ConnConfig.Database
}

func hostOf(t *testing.T, connString string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Host
}

func withParam(t *testing.T, connString, key, value string) string {
	t.Helper()
	if !strings.Contains(connString, "://") {
		return connString + " " + key + "=" + value
	}
	u, err := url.Parse(connString)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

func mapEnv(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

func TestEnsureDatabaseCreatesItOnceAndThenReusesIt(t *testing.T) {
	ctx := context.Background()
	server := URL(t)
	name := databaseName(t.Name())
	t.Cleanup(func() {
		c, err := pgconn.Connect(ctx, server)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(ctx)
		if err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)").Close(); err != nil {
			t.Error(err)
		}
	})
	first, err := EnsureDatabase(ctx, server, name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgconn.Connect(ctx, first)
	if err != nil {
		t.Fatalf("the database EnsureDatabase named does not answer: %v", err)
	}
	if err := c.Exec(ctx, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)").Close(); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	again, err := EnsureDatabase(ctx, server, name)
	if err != nil {
		t.Fatalf("EnsureDatabase of a database that exists: %v", err)
	}
	c, err = pgconn.Connect(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	res := c.ExecParams(ctx, "SELECT x FROM kept", nil, nil, nil, nil).Read()
	if res.Err != nil || len(res.Rows) != 1 || string(res.Rows[0][0]) != "7" {
		t.Fatalf("the second EnsureDatabase did not reuse the first's database: %v %v", res.Rows, res.Err)
	}
}

// TestTemplateIsPreparedOnceAndClonedPerTest takes copies of a template from
// parallel tests: each holds what prepare made, is its own, and prepare ran
// once.
func TestTemplateIsPreparedOnceAndClonedPerTest(t *testing.T) {
	t.Parallel()
	var prepared atomic.Int32
	tp := NewTemplate("items", func(ctx context.Context, connString string) error {
		prepared.Add(1)
		c, err := pgx.Connect(ctx, connString)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, `CREATE TABLE items (id int PRIMARY KEY); INSERT INTO items VALUES (1), (2)`)
		return err
	})
	t.Run("copies", func(t *testing.T) {
		for i := range 6 {
			t.Run(string(rune('a'+i)), func(t *testing.T) {
				t.Parallel()
				pool := tp.NewPool(t)
				ctx := t.Context()
				var n int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM items`).Scan(&n); err != nil || n != 2 {
					t.Fatalf("the copy holds %d items (%v), want 2", n, err)
				}
				if _, err := pool.Exec(ctx, `INSERT INTO items VALUES (3)`); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
	if n := prepared.Load(); n != 1 {
		t.Errorf("the template was prepared %d times, want once", n)
	}
	var n int
	if err := tp.NewPool(t).QueryRow(t.Context(), `SELECT count(*) FROM items`).Scan(&n); err != nil || n != 2 {
		t.Errorf("a copy made after the others wrote to theirs holds %d items (%v), want 2", n, err)
	}
}

// TestTemplateThatFailsToPrepareFailsEveryCopy checks that an error of
// prepare is reported, and the half-made template dropped.
func TestTemplateThatFailsToPrepareFailsEveryCopy(t *testing.T) {
	t.Parallel()
	tp := NewTemplate("broken", func(context.Context, string) error { return errors.New("no schema today") })
	s, err := Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := tp.database(s); err == nil || !strings.Contains(err.Error(), "no schema today") {
			t.Fatalf("preparing a broken template: %v, want its error", err)
		}
	}
	var left int
	if err := connect(t, URL(t)).QueryRow(t.Context(), `SELECT count(*) FROM pg_database WHERE datname LIKE 'pgtest\_template\_broken\_%'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d databases of the broken template left", left)
	}
}

// TestEnsureLogicalStartsADurableCluster leaves $DATABASE_URL unset and
// the local server dead, and checks that EnsureLogical's search starts a
// cluster with wal_level=logical whose commits wait for the disk, in a
// temporary directory removed when stopped; and that, named by
// $DATABASE_URL, that server is then used as it is.
func TestEnsureLogicalStartsADurableCluster(t *testing.T) {
	t.Parallel()
	requireBinaries(t)
	ctx := t.Context()
	f, err := findLogical(ctx, config{logf: t.Logf, getenv: mapEnv(nil), localURL: deadURL(t)})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = f.stop()
		}
	})
	if f.origin != OriginLogicalCluster {
		t.Fatalf("server is the %s (%s), want %s", f.kind, f.origin, OriginLogicalCluster)
	}
	c := connect(t, f.url)
	var level, fsync, commit, pages string
	if err := c.QueryRow(ctx, `SELECT current_setting('wal_level'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('full_page_writes')`).Scan(&level, &fsync, &commit, &pages); err != nil {
		t.Fatal(err)
	}
	if level != "logical" || fsync != "on" || commit != "on" || pages != "on" {
		t.Errorf("wal_level %s, fsync %s, synchronous_commit %s, full_page_writes %s; want logical and all on", level, fsync, commit, pages)
	}
	c.Close(ctx)

	again, err := findLogical(ctx, config{logf: t.Logf, getenv: mapEnv(map[string]string{envDatabaseURL: f.url}), localURL: deadURL(t)})
	if err != nil {
		t.Fatal(err)
	}
	if again.origin != OriginDatabaseURL || again.url != f.url {
		t.Errorf("named by $DATABASE_URL, the logical server found is %s (%s), want it used as it is", again.url, again.origin)
	}

	host := hostOf(t, f.url)
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if _, err := os.Stat(host); !os.IsNotExist(err) {
		t.Errorf("%s still there after stop (%v)", host, err)
	}
}
