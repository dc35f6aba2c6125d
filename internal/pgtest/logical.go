// This file holds the server the tests of capture by logical replication
// share: PostgreSQL with wal_level=logical.

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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

// dropSlots drops the replication slots of database name, ending the
// sessions that stream from them first: PostgreSQL refuses to drop a
// database a slot is of.
func (s *Server) dropSlots(ctx context.Context, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := s.admin.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE database = $1 AND active_pid IS NOT NULL`, name); err != nil {
			return err
		}
		var left int
		err := s.admin.QueryRow(ctx, `SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots
			WHERE database = $1 AND NOT active`, name).Scan(&left)
		if err == nil {
			err = s.admin.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`, name).Scan(&left)
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
