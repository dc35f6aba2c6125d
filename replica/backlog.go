// ReleaseBacklog: the rows set aside after a refusal for good, handed back
// to their queue by an operator once the cause is fixed.

package replica

import (
	"context"
	"database/sql"
	"fmt"
)

// ReleaseBacklog hands the rows set aside after the server refused them
// for good (Status.Backlog) back to their queue, as a different build
// starting would, once the cause was fixed on the server; and with them
// the reports of rows the replica could not take and the answers to
// wishes set aside alike. With tables, only those of the tables named.
// It returns how many rows of the backlog it released.
//
// It is safe on the file of a running replica: one short write
// transaction, which waits for the engine's under the connection's busy
// timeout (give db one: modernc.org/sqlite _pragma=busy_timeout(5000)).
// The running replica sends the released rows at its lane's next idle
// turn (Settings.Idle); one that is stopped sends them when it starts. A
// row the server refuses again goes back to the backlog.
//
// It refuses a table the file does not have, and a database the engine
// was never installed in or another build set up.
func ReleaseBacklog(ctx context.Context, db *sql.DB, tables ...string) (int, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("magicsync/replica: releasing the backlog: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	n, err := releaseHeld(ctx, tx, tables)
	if err != nil {
		return 0, fmt.Errorf("magicsync/replica: releasing the backlog: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("magicsync/replica: releasing the backlog: %w", err)
	}
	return n, nil
}

// releaseHeld releases the backlog in tx.
func releaseHeld(ctx context.Context, tx *sql.Tx, tables []string) (int, error) {
	// The first statement writes, so that the transaction takes the write
	// lock at once (waiting under the busy timeout) rather than failing to
	// upgrade a read begun earlier: a no-op that needs the engine's table.
	if _, err := tx.ExecContext(ctx, takeWriteLock); err != nil {
		return 0, fmt.Errorf("%w (is this a magicsync replica's file? replica.Install creates sync_replica)", err)
	}
	var version int
	if err := tx.QueryRowContext(ctx, selectSchemaVersion).Scan(&version); err != nil {
		return 0, err
	}
	if version != schemaVersion {
		return 0, fmt.Errorf("the engine tables are at version %d and this build knows version %d: use the magicsync command of the replica's own build", version, schemaVersion)
	}
	if _, err := tx.ExecContext(ctx, markWriting); err != nil {
		return 0, err
	}
	where := ""
	var args []any
	if len(tables) > 0 {
		for _, t := range tables {
			var n int
			if err := tx.QueryRowContext(ctx, countNamedTable, t).Scan(&n); err != nil {
				return 0, err
			}
			if n == 0 {
				return 0, fmt.Errorf("the file has no table %q: name a table of the replica's own (inspect lists those with rows in the backlog)", t)
			}
			args = append(args, t)
		}
		where = " AND tbl IN (" + placeholders(len(tables)) + ")"
	}
	res, err := tx.ExecContext(ctx, fmt.Sprintf(releaseBacklogFormat, where), args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(releaseReportsFormat, where), args...); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(releaseAnswersFormat, where), args...); err != nil {
		return 0, err
	}
	if where == "" {
		// Answers on commands name no table: released with the whole backlog.
		if _, err := tx.ExecContext(ctx, releaseAllCommandAnswers); err != nil {
			return 0, err
		}
	}
	if _, err := tx.ExecContext(ctx, unmarkWriting); err != nil {
		return 0, err
	}
	return int(n), nil
}
