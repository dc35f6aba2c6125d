package replica

import (
	"context"
	"database/sql"
)

// txn.go holds the engine's write transactions on a connection of their
// own: begun IMMEDIATE, and marked as the engine's; and queryAll, which
// reads a query's rows into a slice.

// immediate runs f in a transaction of conn begun IMMEDIATE: SQLite's
// write lock is taken before anything is read, so that another
// connection's commit cannot leave the transaction unable to write. It
// commits when f returns commit and no error, and rolls back otherwise.
//
// Neither the COMMIT nor the ROLLBACK is cut short by ctx: a driver may
// report a context that ended while the COMMIT ran as its error though
// the commit went through (modernc.org/sqlite does), and a rollback left
// undone would leave the connection in a transaction.
func immediate(ctx context.Context, conn *sql.Conn, f func() (commit bool, err error)) error {
	if _, err := conn.ExecContext(ctx, beginImmediate); err != nil {
		return err
	}
	done := context.WithoutCancel(ctx)
	commit, err := f()
	if err != nil || !commit {
		_, _ = conn.ExecContext(done, rollbackTx)
		return err
	}
	_, err = conn.ExecContext(done, commitTx)
	return err
}

// engineWrite runs f in an immediate transaction on a connection of its
// own, marked as the engine's (markWriting) until just before its commit:
// the guards of the engine's tables let its writes through.
func (r *Replica) engineWrite(ctx context.Context, f func(conn *sql.Conn) (commit bool, err error)) error {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return immediate(ctx, conn, func() (bool, error) {
		if _, err := conn.ExecContext(ctx, markWriting); err != nil {
			return false, err
		}
		commit, err := f(conn)
		if err != nil || !commit {
			return false, err
		}
		if _, err := conn.ExecContext(ctx, unmarkWriting); err != nil {
			return false, err
		}
		return true, nil
	})
}

// writeEngine runs f in a transaction of its own, marked as the engine's
// (markWriting): the way for the engine's writes outside a message, a
// gather or an offer, which mark their own transactions.
func (r *Replica) writeEngine(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	if _, err := tx.ExecContext(ctx, markWriting); err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, unmarkWriting); err != nil {
		return err
	}
	return tx.Commit()
}

// rowsQuerier is what queryAll reads from: a database, a connection or a
// transaction.
type rowsQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryAll runs query on q and returns its rows, each scanned into a T by
// scan.
func queryAll[T any](ctx context.Context, q rowsQuerier, scan func(*sql.Rows, *T) error, query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// scanText scans a row of one text column.
func scanText(rows *sql.Rows, s *string) error { return rows.Scan(s) }
