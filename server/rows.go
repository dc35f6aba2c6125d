package server

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
)

// rows.go holds reading the host's rows: their canonical values and
// tuples, as bound and as scanned, and reading them by key.

// querier is what a pool, a connection and a transaction have in common.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// pgText writes a canonical value as PostgreSQL's text input of it, for
// binding as text and casting in SQL; ok is false for NULL.
func pgText(v codec.Value) (string, bool) {
	switch v.Kind {
	case wire.Null:
		return "", false
	case wire.Bool, wire.True, wire.False:
		if v.I != 0 || v.Kind == wire.True {
			return "t", true
		}
		return "f", true
	case wire.Int:
		return strconv.FormatInt(v.I, 10), true
	case wire.Float:
		switch {
		case math.IsNaN(v.F):
			return "NaN", true
		case math.IsInf(v.F, 1):
			return "Infinity", true
		case math.IsInf(v.F, -1):
			return "-Infinity", true
		}
		return strconv.FormatFloat(v.F, 'g', -1, 64), true
	case wire.Text, wire.Decimal:
		return v.S, true
	case wire.Bytes:
		return `\x` + hex.EncodeToString(v.B), true
	case wire.Time:
		return time.UnixMicro(v.I).UTC().Format("2006-01-02 15:04:05.999999Z07:00"), true
	case wire.UUID:
		return uuid.UUID(v.U).String(), true
	}
	return "", false
}

// keyArrays decodes canonical keys into one text array per key column.
func (t *table) keyArrays(keys [][]byte) ([]any, error) {
	cols := make([][]string, len(t.tc.KeyIndex))
	for n := range cols {
		cols[n] = make([]string, 0, len(keys))
	}
	var vals []codec.Value
	for _, k := range keys {
		var err error
		vals, err = codec.DecodeTuple(k, vals)
		if err != nil {
			return nil, err
		}
		if len(vals) != len(cols) {
			return nil, fmt.Errorf("a key of %d values for %d key columns", len(vals), len(cols))
		}
		for n, v := range vals {
			s, _ := pgText(v)
			cols[n] = append(cols[n], s)
		}
	}
	args := make([]any, len(cols))
	for n := range cols {
		args[n] = cols[n]
	}
	return args, nil
}

// current is a row as the planner last planned it: its down tuple, and
// the id of its group.
type current struct {
	tuple []byte
	grp   int64
}

// scanRow scans one row whose select list is the columns of idx then
// extra destinations, into canonical values at their positions in vals.
func (t *table) scanRow(rows pgx.Rows, idx []int, vals []codec.Value, extra ...any) error {
	raw := make([]any, len(idx))
	ptrs := make([]any, 0, len(idx)+len(extra))
	for i := range raw {
		ptrs = append(ptrs, &raw[i])
	}
	ptrs = append(ptrs, extra...)
	if err := rows.Scan(ptrs...); err != nil {
		return err
	}
	for i, j := range idx {
		v, err := t.tc.Columns[j].Canonical(raw[i])
		if err != nil {
			return fmt.Errorf("table %s: %w", t.qname, err)
		}
		vals[j] = v
	}
	return nil
}

// plannedRows reads the rows of the given canonical keys as the planner
// last planned them (sync_rows), keyed by canonical key (as a string): a
// row held by no group is absent. Its tuple is the one planned, unless it
// was encoded in another shape (the declaration changed since), when it is
// read from the host's table — where a row gone, or no longer to be held,
// is taken as absent until the planner catches up.
func (s *Server) plannedRows(ctx context.Context, q querier, t *table, keys [][]byte) (map[string]current, error) {
	out := make(map[string]current, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, s.sql.of(qPlannedRows), t.name, keys)
	if err != nil {
		return nil, fmt.Errorf("reading the planned rows of %s: %w", t.qname, err)
	}
	var stale [][]byte
	for rows.Next() {
		var key, tuple []byte
		var grp int64
		var shape *int64
		if err := rows.Scan(&key, &grp, &tuple, &shape); err != nil {
			rows.Close()
			return nil, err
		}
		if tuple == nil || shape == nil || *shape != t.shape {
			stale = append(stale, key)
			tuple = nil
		}
		out[string(key)] = current{tuple: tuple, grp: grp}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(stale) == 0 {
		return out, nil
	}
	fresh, err := t.readTuples(ctx, q, stale)
	if err != nil {
		return nil, err
	}
	for _, k := range stale {
		if tuple, ok := fresh[string(k)]; ok {
			out[string(k)] = current{tuple: tuple, grp: out[string(k)].grp}
		} else {
			delete(out, string(k))
		}
	}
	return out, nil
}

// readTuples reads the down tuples of the rows of the given canonical keys
// as they are now in the host's table, keyed by canonical key (as a
// string). A key that is absent is gone or not to be held (Active,
// Retired), and so is a row holding a value its declaration cannot hold.
func (t *table) readTuples(ctx context.Context, q querier, keys [][]byte) (map[string][]byte, error) {
	out := make(map[string][]byte, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	args, err := t.keyArrays(keys)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, t.selectByKeys(t.down, true), args...)
	if err != nil {
		return nil, fmt.Errorf("reading rows of %s: %w", t.qname, err)
	}
	defer rows.Close()
	vals := make([]codec.Value, len(t.tc.Columns))
	for rows.Next() {
		if err := t.scanRow(rows, t.down, vals); err != nil {
			if errors.Is(err, codec.ErrBadValue) {
				// A value its declaration cannot hold: the row is taken
				// as gone, as the pass takes it (which says so in the log).
				continue
			}
			return nil, err
		}
		out[string(t.tc.KeyOfRow(vals))] = t.tc.EncodeRow(nil, vals, t.down)
	}
	return out, rows.Err()
}

// readValuesByKeys reads every column of the rows of the given canonical
// keys, as canonical values by canonical key (as a string). A row holding
// a value its declaration cannot hold is left out.
func (t *table) readValuesByKeys(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, keys [][]byte) (map[string][]codec.Value, error) {
	out := make(map[string][]codec.Value, len(keys))
	args, err := t.keyArrays(keys)
	if err != nil {
		return nil, err
	}
	all := make([]int, len(t.tc.Columns))
	for i := range all {
		all[i] = i
	}
	rows, err := q.Query(ctx, t.selectByKeys(all, false), args...)
	if err != nil {
		return nil, fmt.Errorf("reading rows of %s: %w", t.qname, err)
	}
	defer rows.Close()
	for rows.Next() {
		vals := make([]codec.Value, len(t.tc.Columns))
		if err := t.scanRow(rows, all, vals); err != nil {
			if errors.Is(err, codec.ErrBadValue) {
				continue
			}
			return nil, err
		}
		out[string(t.tc.KeyOfRow(vals))] = vals
	}
	return out, rows.Err()
}
