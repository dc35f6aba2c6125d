// Open: the engine's schema, its triggers and New in one call, for a host
// that does not run the engine's migrations itself.

package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
)

// Open prepares the database for the engine and returns a Server over it,
// in one call, for a host that does not run the engine's migrations
// itself: it applies the engine's schema steps the database lacks
// (MigrateSchema, into opts.Schema), installs the triggers on the host's
// tables (the SQL of Triggers) when they are missing or outdated — or,
// under CaptureLogical, the publication (the SQL of Publication) — and
// returns New's Server. The host's own tables — those the declarations
// name, the replicas table, the members tables of Grouped routes — must
// exist first; New's refusal of any other mismatch is returned as it is,
// saying what to change.
//
// Several processes may call Open at once over one database: they take
// turns. Over a database already prepared it changes nothing and takes no
// lock the host's writers would wait for; only a trigger to install or
// replace does (its DDL locks the table for as long as it takes). A host
// that runs its migrations itself adds the steps (Steps) and the SQL of
// Triggers to them, and calls New.
func Open(ctx context.Context, pool *pgxpool.Pool, codecs *magicsync.Codecs, opts Options) (*Server, error) {
	if err := MigrateSchema(ctx, pool, opts.Schema); err != nil {
		return nil, err
	}
	s, err := New(ctx, pool, codecs, opts)
	if err == nil {
		return s, nil
	}
	prepare := Triggers
	if opts.Capture == CaptureLogical {
		prepare = Publication
	}
	ddl, terr := prepare(codecs, opts)
	if terr != nil {
		// The declarations or the options themselves are wrong, which
		// New said first.
		return nil, err
	}
	if ierr := installTriggers(ctx, pool, ddl); ierr != nil {
		// A table missing, say: New says which, in plain words.
		return nil, errors.Join(err, ierr)
	}
	return New(ctx, pool, codecs, opts)
}

// installTriggers runs the SQL of Triggers (or Publication's) in one transaction, under the
// advisory lock MigrateSchema takes, so that processes opening at once
// install them one after the other. PostgreSQL may undo it for a deadlock
// with another process's pass reading the same tables: it is then run
// again, a few times.
func installTriggers(ctx context.Context, pool *pgxpool.Pool, ddl string) error {
	for try := 1; ; try++ {
		err := installTriggersOnce(ctx, pool, ddl)
		var pe *pgconn.PgError
		if err == nil || try == 5 || !errors.As(err, &pe) || pe.Code != "40P01" {
			if err != nil {
				return fmt.Errorf("magicsync/server: installing the triggers: %w", err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(try) * 50 * time.Millisecond):
		}
	}
}

func installTriggersOnce(ctx context.Context, pool *pgxpool.Pool, ddl string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.Exec(ctx, qMigrateLock, lockMigrate); err != nil {
		return fmt.Errorf("taking the lock: %w", err)
	}
	if _, err := tx.Exec(ctx, ddl); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
