// What the tries of a message learnt: the rows whose refusal undid a
// message's whole transaction rather than their own statement, found
// (checkForeignKeys, blame), left out on the next try and kept between
// deliveries (learnt), and how a refusal is told from a failure of storage.

package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/magicsync/magicsync/internal/codec"
)

// learnt keeps, between deliveries of one message, what its tries learnt
// to leave out.
type learnt struct {
	mu   sync.Mutex
	msg  uint64
	left leftOut
}

// take returns what was learnt of message msg, or nothing.
func (l *learnt) take(msg uint64) leftOut {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.msg != msg {
		return leftOut{}
	}
	left := l.left
	l.msg, l.left = 0, leftOut{}
	return left
}

func (l *learnt) keep(msg uint64, left leftOut) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msg, l.left = msg, left
}

// undoneError is a row's refusal that undid the message's whole
// transaction. key is nil when the statement carried many rows.
type undoneError struct {
	table string
	key   []byte
	cause error
	// del is set when the refused statement was a delete.
	del bool
	// commit is set when the commit was refused, naming no row: the next
	// try checks the foreign keys before it commits.
	commit bool
	// also lists more rows to leave out, found together.
	also []*undoneError
}

func (e *undoneError) Error() string {
	return fmt.Sprintf("a row of %q undid the whole transaction: %v", e.table, e.cause)
}

func (e *undoneError) Unwrap() error { return e.cause }

// leftOut is what the tries of one message learnt to leave out.
type leftOut struct {
	// rows and deletes map a table to the keys to leave out, with why.
	rows, deletes map[string]map[string]string
	// oneByOne lists the tables whose rows go one a statement, to find
	// the row among many that undid the transaction.
	oneByOne map[string]bool
	// foreignKeys, once a commit was refused, checks the foreign keys
	// before committing, to name the rows that break them.
	foreignKeys bool
}

// learn records what the next try leaves out, and whether it differs from
// this try.
func (l *leftOut) learn(e *undoneError) bool {
	learnt := false
	for _, more := range e.also {
		learnt = l.learn(more) || learnt
	}
	if e.commit {
		if l.foreignKeys {
			return learnt
		}
		l.foreignKeys = true
		return true
	}
	return l.learnRow(e) || learnt
}

func (l *leftOut) learnRow(e *undoneError) bool {
	if e.key == nil {
		if l.oneByOne[e.table] {
			return false
		}
		if l.oneByOne == nil {
			l.oneByOne = map[string]bool{}
		}
		l.oneByOne[e.table] = true
		return true
	}
	set := &l.rows
	if e.del {
		set = &l.deletes
	}
	if *set == nil {
		*set = map[string]map[string]string{}
	}
	keys := (*set)[e.table]
	if keys == nil {
		keys = map[string]string{}
		(*set)[e.table] = keys
	}
	if _, seen := keys[string(e.key)]; seen {
		return false
	}
	what := "the database refused the row, undoing the whole message: "
	if e.del {
		what = "the database refused the delete, undoing the whole message: "
	}
	keys[string(e.key)] = what + e.cause.Error()
	return true
}

// intact checks, after a statement of table's rows failed with cause, that
// the message's transaction is still open: that SQLite undid only the
// statement. run marks the transaction first thing (applying = 1, never
// committed), so the mark is gone when the transaction was rolled back.
// A transaction the row's refusal undid gives an *undoneError naming the
// row (key, nil for a statement of many rows), for the next try to leave
// it out; one that storage failed, an error to return.
func (a *applier) intact(ctx context.Context, cause error, table string, key []byte, del bool) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var applying int
	if err := a.tx.QueryRowContext(ctx, selectApplying).Scan(&applying); err != nil {
		return fmt.Errorf("after %v: %w", cause, err)
	}
	switch {
	case !refusal(cause):
		// Storage failed, not the row: the message fails, and comes again.
		return fmt.Errorf("storing a row of %q: %w", table, cause)
	case applying == 1:
		return nil
	default:
		return &undoneError{table: table, key: key, cause: cause, del: del}
	}
}

// SQLite's primary result codes of a statement the data made fail.
const (
	sqliteTooBig     = 18
	sqliteConstraint = 19
	sqliteMismatch   = 20
)

// refusal tells a statement the data made fail — a constraint, a
// trigger's RAISE, a value too big — from a failure of storage or of the
// engine, by SQLite's result code. A driver that carries no code is
// taken at its words of a failed constraint, and at nothing else: a
// storage failure taken for a refusal would leave a row out for good.
func refusal(err error) bool {
	if code, ok := resultCode(err); ok {
		switch code & 0xff {
		case sqliteConstraint, sqliteTooBig, sqliteMismatch:
			return true
		}
		return false
	}
	return strings.Contains(err.Error(), "constraint failed")
}

// resultCode finds the SQLite result code in err's chain, where the
// drivers keep it: a Code method (modernc.org/sqlite) or a Code field
// (mattn/go-sqlite3). The engine imports no driver, so it looks for the
// shape rather than the type.
func resultCode(err error) (int, bool) {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if c, ok := e.(interface{ Code() int }); ok {
			return c.Code(), true
		}
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Kind() == reflect.Struct {
			if f := v.FieldByName("Code"); f.IsValid() && f.CanInt() {
				return int(f.Int()), true
			}
		}
	}
	return 0, false
}

// checkForeignKeys names the rows that break a foreign key before the
// commit does, when a try's commit was refused: a row whose parent is
// missing, or the parent a message deleted from under a row. Only then,
// for the check reads every table.
func (a *applier) checkForeignKeys(ctx context.Context) error {
	rows, err := a.tx.QueryContext(ctx, selectForeignKeyViolations)
	if err != nil {
		return fmt.Errorf("checking foreign keys: %w", err)
	}
	type violation struct {
		table, parent string
		rowid         sql.NullInt64
		fk            int
	}
	var found []violation
	for rows.Next() {
		var v violation
		if err := rows.Scan(&v.table, &v.rowid, &v.parent, &v.fk); err != nil {
			rows.Close()
			return err
		}
		found = append(found, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var undone *undoneError
	for _, v := range found {
		if !v.rowid.Valid {
			continue // a table WITHOUT ROWID: the row cannot be named
		}
		u, err := a.blame(ctx, v.table, v.rowid.Int64, v.parent, v.fk)
		if err != nil {
			return err
		}
		if u == nil {
			continue
		}
		if undone == nil {
			undone = u
		} else {
			undone.also = append(undone.also, u)
		}
	}
	if undone == nil {
		return nil
	}
	return undone
}

// blame names what breaks foreign key fk of table's row rowid: the row
// itself, when this try wrote it; else the parent row this try deleted
// from under it, when the parent is a catalog whose key the foreign key
// names. nil when neither: a row that broke the key before the message,
// or one of a table WITHOUT ROWID, which the check cannot name.
func (a *applier) blame(ctx context.Context, table string, rowid int64, parent string, fk int) (*undoneError, error) {
	cause := fmt.Errorf("FOREIGN KEY constraint failed: a row of %q points at a row of %q that is not there", table, parent)
	if tc, err := a.r.codecs.Table(table); err == nil && tc.Mirror == codec.Catalog {
		key, err := a.keyAt(ctx, tc.Name, quoteAll(tc.ColumnNames(tc.KeyIndex)), tc, rowid)
		if err != nil {
			return nil, err
		}
		if key != nil && a.written[table][string(key)] {
			return &undoneError{table: table, key: key, cause: cause}, nil
		}
	}
	ptc, err := a.r.codecs.Table(parent)
	if err != nil || ptc.Mirror != codec.Catalog {
		return nil, nil
	}
	from, to, err := a.foreignKey(ctx, table, fk)
	if err != nil {
		return nil, err
	}
	keyNames := ptc.ColumnNames(ptc.KeyIndex)
	if len(to) == 0 {
		to = keyNames
	}
	if !slices.Equal(to, keyNames) {
		return nil, nil
	}
	key, err := a.keyAt(ctx, table, quoteAll(from), ptc, rowid)
	if err != nil || key == nil || !a.removed[parent][string(key)] {
		return nil, err
	}
	return &undoneError{table: parent, key: key, cause: cause, del: true}, nil
}

func (a *applier) wrote(table string, key []byte) { note(&a.written, table, key) }

func note(set *map[string]map[string]bool, table string, key []byte) {
	if *set == nil {
		*set = map[string]map[string]bool{}
	}
	if (*set)[table] == nil {
		(*set)[table] = map[string]bool{}
	}
	(*set)[table][string(key)] = true
}

// keyAt reads columns of table's row rowid as a key of keyOf's table.
func (a *applier) keyAt(ctx context.Context, table string, columns []string, keyOf *codec.TableCodec, rowid int64) ([]byte, error) {
	raw := make([]any, len(columns))
	ptrs := make([]any, len(raw))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	q := selectAtRowid(table, columns)
	if err := a.tx.QueryRowContext(ctx, q, rowid).Scan(ptrs...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		return nil, err
	}
	vals := make([]codec.Value, len(raw))
	for i, src := range raw {
		v, err := keyOf.Columns[keyOf.KeyIndex[i]].Canonical(src)
		if err != nil {
			return nil, nil // not a key of the parent's: nothing to name
		}
		vals[i] = v
	}
	return []byte(codec.KeyOfValues(vals...)), nil
}

// foreignKey lists the columns of table's foreign key fk, and those of the
// parent they point at (none when they point at its primary key).
func (a *applier) foreignKey(ctx context.Context, table string, fk int) (from, to []string, err error) {
	rows, err := a.tx.QueryContext(ctx, selectForeignKeyColumns, table, fk)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var f string
		var t sql.NullString
		if err := rows.Scan(&f, &t); err != nil {
			return nil, nil, err
		}
		from = append(from, f)
		if t.Valid {
			to = append(to, t.String)
		}
	}
	return from, to, rows.Err()
}
