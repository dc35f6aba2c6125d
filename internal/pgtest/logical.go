// This file holds PostgreSQL with wal_level=logical, as capture by
// logical replication needs it: the server the tests of that capture
// share, a program's (EnsureLogical), and the dropping of the replication
// slots a database on it holds.

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/testenv"
)

// StartLogical returns the test binary's server with wal_level=logical,
// finding or starting it on the first call: the shared server ([Start])
// when it is so configured, else a throwaway cluster of its own, started
// with wal_level=logical from the local PostgreSQL binaries and stopped by
// [Run] (the development machines' local server runs wal_level=replica).
func StartLogical(ctx context.Context) (*Server, error) {
	s, err := Start(ctx)
	if err != nil {
		return nil, err
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.logical != nil || shared.logicalErr != nil {
		return shared.logical, shared.logicalErr
	}
	var level string
	if err := s.admin.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return nil, fmt.Errorf("pgtest: reading wal_level of the %s: %w", s.kind, err)
	}
	if level == "logical" {
		shared.logical = s
		return s, nil
	}
	force := func(key string) string {
		if key == envForceCluster {
			return "1"
		}
		return ""
	}
	srv, err := newServer(ctx, config{logf: logStderr, getenv: force, logical: true})
	if err != nil {
		err = fmt.Errorf("pgtest: the %s runs wal_level=%s, and a cluster with wal_level=logical could not start: %w", s.kind, level, err)
		if ctx.Err() == nil {
			shared.logicalErr = err
		}
		return nil, err
	}
	srv.kind = "private cluster with wal_level=logical"
	shared.logical = srv
	return srv, nil
}

// EnsureLogical finds PostgreSQL with wal_level=logical for a program, as
// capture by logical replication needs it: the server [EnsureOrigin] would
// use ($DATABASE_URL, else the local server) when it runs
// wal_level=logical, else a private cluster started with
// wal_level=logical from the local PostgreSQL binaries. That cluster is
// kept in dataDir/postgresql-logical between runs when dataDir is not
// empty, else in a temporary directory removed when it is stopped; either
// way its commits are durable (fsync, synchronous_commit and
// full_page_writes on), unlike EnsureOrigin's throwaway cluster, so that
// figures measured on it compare with those of a production server.
//
// It returns a server-level connection string, which server it settled
// on, and a function that stops what it started (a server it found
// running is left alone). logf, which may be nil, is told which server is
// used. When the process runs as root the cluster runs as the OS user
// postgres, which must be able to reach dataDir.
func EnsureLogical(ctx context.Context, dataDir string, logf func(format string, args ...any)) (url string, origin Origin, stop func() error, err error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	f, err := findLogical(ctx, config{dir: dataDir, logf: logf, getenv: os.Getenv, localURL: localServerURL})
	if err != nil {
		return "", 0, nil, err
	}
	return f.url, f.origin, f.stop, nil
}

// findLogical is EnsureLogical's search, as c says.
func findLogical(ctx context.Context, c config) (found, error) {
	running, ok, err := findRunning(ctx, c)
	if err != nil {
		return found{}, err
	}
	why := "no server with wal_level=logical answers"
	if ok {
		level, err := walLevel(ctx, running.url)
		if err != nil {
			return found{}, fmt.Errorf("reading wal_level of the %s: %w", running.kind, err)
		}
		if level == "logical" {
			return running, nil
		}
		why = fmt.Sprintf("the %s runs wal_level=%s", running.kind, level)
		c.logf("pgtest: %s; starting a private cluster with wal_level=logical", why)
	}
	c.logical, c.durable = true, true
	f, err := startPrivate(ctx, c, "postgresql-logical")
	if err != nil {
		return found{}, fmt.Errorf("%s, and %w", why, err)
	}
	return f, nil
}

// walLevel asks the server at url for its wal_level.
func walLevel(ctx context.Context, url string) (string, error) {
	c, err := pgconn.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer c.Close(context.WithoutCancel(ctx))
	res := c.ExecParams(ctx, "SHOW wal_level", nil, nil, nil, nil).Read()
	if res.Err != nil {
		return "", res.Err
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
		return "", fmt.Errorf("SHOW wal_level returned %d rows", len(res.Rows))
	}
	return string(res.Rows[0][0]), nil
}

// logicalServer returns the logical server or ends the test: skipped on a
// machine without the PostgreSQL server programs (failed under CI), when
// the shared server is not so configured.
func logicalServer(t testing.TB) *Server {
	t.Helper()
	s, err := StartLogical(context.Background())
	if err != nil {
		if _, ferr := findBinaries(context.Background(), 0); ferr != nil {
			testenv.Missing(t, "no server with wal_level=logical, and no local PostgreSQL server programs to start one: "+ferr.Error(), "the tests of capture by logical replication")
		}
		t.Fatal(err)
	}
	return s
}

// NewLogicalDatabase is [Template.NewDatabase] on the server with
// wal_level=logical ([StartLogical]).
func (tp *Template) NewLogicalDatabase(t testing.TB) string {
	t.Helper()
	return tp.newDatabaseOn(t, logicalServer(t))
}

// NewLogicalPool is [Template.NewPool] on the server with
// wal_level=logical ([StartLogical]).
func (tp *Template) NewLogicalPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return poolOn(t, tp.NewLogicalDatabase(t))
}

// dropSlots drops the replication slots of database name ([DropSlots]).
func (s *Server) dropSlots(ctx context.Context, name string) error {
	return DropSlots(ctx, s.admin, name)
}

// Conn is a connection or a pool (*pgx.Conn, *pgxpool.Pool): what
// [DropSlots] runs its statements on.
type Conn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DropSlots drops the replication slots of database name, through admin
// (a connection to another database of the same server), ending the
// sessions that stream from them first: PostgreSQL refuses to drop a
// database a slot is of, and a slot a session streams from. Call it once
// the program's own readers of the slots have stopped; it gives up after
// 30 s of slots still active.
func DropSlots(ctx context.Context, admin Conn, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE database = $1 AND active_pid IS NOT NULL`, name); err != nil {
			return err
		}
		var left int
		err := admin.QueryRow(ctx, `SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots
			WHERE database = $1 AND NOT active`, name).Scan(&left)
		if err == nil {
			err = admin.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`, name).Scan(&left)
		}
		if err == nil && left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(err, fmt.Errorf("%d slots still active", left))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// NewLogicalDatabase creates an empty database for this test alone on the
// server with wal_level=logical ([StartLogical]), as [NewDatabase] does on
// the shared one.
func NewLogicalDatabase(t testing.TB) string {
	t.Helper()
	return logicalServer(t).NewDatabase(t)
}
