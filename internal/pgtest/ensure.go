package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// envDatabaseURL names the server to use, ahead of everything else.
	envDatabaseURL = "DATABASE_URL"
	// envForceCluster, when set to a true value, skips $DATABASE_URL and the
	// local server and always starts a private cluster.
	envForceCluster = "MAGICSYNC_PGTEST_FORCE_LOCAL_CLUSTER"
	// localServerURL is the server a developer or CI machine usually runs.
	localServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	// probeTimeout bounds the question "does the local server answer?".
	probeTimeout = 2 * time.Second
	// throwawayPrefix begins the names of the temporary directories of
	// throwaway clusters.
	throwawayPrefix = "magicsync-pgtest-"
)

// Ensure finds PostgreSQL for a program: $DATABASE_URL when it is set (and
// answers), else the local server on 127.0.0.1:5432 when it answers, else a
// private cluster started from the local PostgreSQL binaries in
// dataDir/postgresql, created on the first run and kept between runs so that
// running the program again resumes where it stopped. An empty dataDir asks
// for a throwaway cluster in a temporary directory instead.
//
// It returns a server-level connection string and a function that stops what
// Ensure started (a cluster it found already running is left alone, and so
// are the other servers). logf, which may be nil, is told which server is used.
// When the process runs as root the cluster runs as the OS user postgres,
// which must be able to reach dataDir.
func Ensure(ctx context.Context, dataDir string, logf func(format string, args ...any)) (url string, stop func() error, err error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	f, err := find(ctx, config{dir: dataDir, logf: logf, getenv: os.Getenv, localURL: localServerURL})
	if err != nil {
		return "", nil, err
	}
	return f.url, f.stop, nil
}

// config is what find needs to know, so that tests can vary it.
type config struct {
	dir      string // where a kept cluster lives; "" for a throwaway one
	logf     func(format string, args ...any)
	getenv   func(key string) string
	localURL string // the local server to try
	logical  bool   // a private cluster runs with wal_level=logical
	// durable keeps a throwaway cluster's commits waiting for the disk
	// (fsync, synchronous_commit and full_page_writes on), as a kept
	// one's do.
	durable bool
}

// found is a server that find settled on.
type found struct {
	url    string       // server-level connection string
	kind   string       // which server it is, for messages
	origin Origin       // and which of the search's steps found it
	stop   func() error // stops what find started; never nil
}

func noStop() error { return nil }

// find is the one search for a server shared by Ensure and the tests.
func find(ctx context.Context, c config) (found, error) {
	f, ok, err := findRunning(ctx, c)
	if err != nil || ok {
		return f, err
	}
	f, err = startPrivate(ctx, c, "postgresql")
	if err != nil {
		return found{}, fmt.Errorf("no PostgreSQL: $%s is unset and nothing answers at 127.0.0.1:5432, and %w", envDatabaseURL, err)
	}
	return f, nil
}

// findRunning is the search's first two steps: the server $DATABASE_URL
// names, else the local one when it answers. ok is false when neither is
// to be used; an error, when $DATABASE_URL names a server that does not
// answer.
func findRunning(ctx context.Context, c config) (f found, ok bool, err error) {
	if truthy(c.getenv(envForceCluster)) {
		return found{}, false, nil
	}
	if u := c.getenv(envDatabaseURL); u != "" {
		if err := ping(ctx, u, 10*time.Second); err != nil {
			return found{}, false, fmt.Errorf("$%s is set, but PostgreSQL does not answer there: %w", envDatabaseURL, err)
		}
		c.logf("pgtest: using the PostgreSQL server named by $%s", envDatabaseURL)
		return found{url: u, kind: "server named by $DATABASE_URL", origin: OriginDatabaseURL, stop: noStop}, true, nil
	}
	if ping(ctx, c.localURL, probeTimeout) == nil {
		c.logf("pgtest: using the local PostgreSQL server at 127.0.0.1:5432")
		return found{url: c.localURL, kind: "local server at 127.0.0.1:5432", origin: OriginLocal, stop: noStop}, true, nil
	}
	return found{}, false, nil
}

// startPrivate is the search's last step: a private cluster, kept in
// c.dir/name when c.dir is set, else a throwaway one in a temporary
// directory.
func startPrivate(ctx context.Context, c config, name string) (found, error) {
	var o clusterOptions
	if c.dir == "" {
		sweepThrowaways(c.logf)
		dir, err := os.MkdirTemp("", throwawayPrefix)
		if err != nil {
			return found{}, err
		}
		if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return found{}, errors.Join(err, os.RemoveAll(dir))
		}
		o = clusterOptions{dir: dir, throwaway: true, durable: c.durable, logical: c.logical, logf: c.logf}
	} else {
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			return found{}, err
		}
		o = clusterOptions{dir: filepath.Join(c.dir, name), logical: c.logical, logf: c.logf}
	}
	u, stop, err := startCluster(ctx, o)
	if err != nil {
		if o.throwaway {
			err = errors.Join(err, os.RemoveAll(o.dir))
		}
		return found{}, fmt.Errorf("starting a private cluster failed: %w", err)
	}
	f := found{url: u, kind: "private cluster", origin: OriginCluster, stop: stop}
	switch {
	case c.logical && c.durable:
		f.kind, f.origin = "private cluster with wal_level=logical", OriginLogicalCluster
	case o.throwaway:
		f.origin = OriginThrowaway
	}
	return f, nil
}

// sweepThrowaways removes the directories of throwaway clusters whose owner
// died without stopping them (a test binary killed by a timeout or Ctrl-C),
// once their server is gone too.
func sweepThrowaways(logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), throwawayPrefix+"*"))
	for _, dir := range dirs {
		if owner, ok := readPID(filepath.Join(dir, "owner.pid")); !ok || alive(owner) {
			continue
		}
		if server, ok := readPID(filepath.Join(dir, "data", "postmaster.pid")); ok && alive(server) {
			continue
		}
		if os.RemoveAll(dir) == nil {
			logf("pgtest: removed %s, left by a test process that died", dir)
		}
	}
}

// readPID reads the process id on the first line of a file.
func readPID(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	return pid, err == nil && pid > 0
}

// truthy reads an environment switch: empty, "0", "false", "no" and "off" are off.
func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "0", "false", "no", "off":
		return false
	}
	return true
}

// EnsureDatabase returns the connection string of database name on the
// server serverURL names, creating the database when it is missing, so
// that a program keeps its tables apart from whatever else that server
// holds. name must need no quoting.
func EnsureDatabase(ctx context.Context, serverURL, name string) (string, error) {
	c, err := pgconn.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("pgtest: connecting to create database %s: %w", name, err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	res := c.ExecParams(ctx, "SELECT 1 FROM pg_database WHERE datname = $1", [][]byte{[]byte(name)}, nil, nil, nil).Read()
	if res.Err != nil {
		return "", fmt.Errorf("pgtest: looking for database %s: %w", name, res.Err)
	}
	if len(res.Rows) == 0 {
		if err := c.Exec(ctx, "CREATE DATABASE "+name).Close(); err != nil {
			// Another process may have created it since.
			if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "42P04" {
				return "", fmt.Errorf("pgtest: creating database %s: %w", name, err)
			}
		}
	}
	return withDatabase(serverURL, name), nil
}
