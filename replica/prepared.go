// The statements every message runs, prepared once by New.

package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/magicsync/magicsync/internal/codec"
)

// statements are the statements every message runs, prepared once on the
// database by New. A message's transaction binds them with Tx.StmtContext,
// which reuses what its connection prepared before: modernc.org/sqlite
// parses a statement run by its text afresh every time, and for a message
// of one row that parsing cost as much as the rest of the message.
type statements struct {
	// lock takes the write lock, marks the transaction as the engine's
	// own (which the read-only triggers of the server's tables let pass),
	// and reads the last message applied and the connection's pragmas.
	lock *sql.Stmt
	// done records the message applied; doneFiled, a Filed applied.
	done, doneFiled *sql.Stmt
	// upserts are the one-row upserts of each catalog, for the columns
	// the server sends, by SQL text.
	upserts map[string]*sql.Stmt
}

// prepare prepares the statements of every message.
func (st *statements) prepare(ctx context.Context, db *sql.DB, catalogs []*codec.TableCodec) error {
	var err error
	one := func(query string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var s *sql.Stmt
		if s, err = db.PrepareContext(ctx, query); err != nil {
			err = fmt.Errorf("magicsync/replica: preparing %q: %w", firstLine(query), err)
		}
		return s
	}
	st.lock = one(lockReplica)
	st.done = one(markApplied)
	st.doneFiled = one(markFiledApplied)
	st.upserts = map[string]*sql.Stmt{}
	for _, tc := range catalogs {
		p := newPlan(tc, tc.ColumnNames(downColumns(tc)))
		if p.problem == "" {
			q := p.query(1)
			st.upserts[q] = one(q)
		}
	}
	if err != nil {
		return errors.Join(err, st.close())
	}
	return nil
}

// close closes the statements prepare prepared.
func (st *statements) close() error {
	var errs []error
	for _, s := range append([]*sql.Stmt{st.lock, st.done, st.doneFiled}, slices.Collect(maps.Values(st.upserts))...) {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}
