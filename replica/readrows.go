// Reading the rows due to go up as they are now, a table at a time, in the
// columns the server takes; a row whose key or values do not read is set
// aside (badKey), never sent as something it is not.

package replica

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// readRows reads the due rows as they are now: upserts of rows that exist,
// deletes of rows that do not; rows that do not read are set apart.
func (r *Replica) readRows(ctx context.Context, conn *sql.Conn, due []pendingRow) (*read, error) {
	out := &read{sent: make([]pendingRow, 0, len(due))}
	for start := 0; start < len(due); {
		end := start
		for end < len(due) && due[end].tbl == due[start].tbl {
			end++
		}
		tc, err := r.codecs.Table(due[start].tbl)
		if err != nil {
			return nil, err
		}
		if err := r.readTable(ctx, conn, tc, due[start:end], out); err != nil {
			return nil, fmt.Errorf("magicsync/replica: reading %q to send: %w", tc.Name, err)
		}
		start = end
	}
	for _, p := range append(out.sent, out.dropped...) {
		if p.unreadable {
			out.cleared = append(out.cleared, p)
		}
	}
	return out, nil
}

// upColumns are the columns of an own table that go up: all but generated.
func upColumns(tc *codec.TableCodec) []int {
	var idx []int
	for i, c := range tc.Columns {
		if !c.Generated {
			idx = append(idx, i)
		}
	}
	return idx
}

// readTable reads the due rows of one table by their noted keys, in
// batches, and matches each row found with its note by its canonical key.
// Rows are never looked up by the rowid a note kept: a table rebuilt the
// way SQLite recommends (create, copy, drop, rename) numbers its rows
// anew, and a rowid could then name another row. A row whose key or
// values do not read is set apart, never sent: one such row must not
// block the lane.
func (r *Replica) readTable(ctx context.Context, conn *sql.Conn, tc *codec.TableCodec, due []pendingRow, out *read) error {
	cols := upColumns(tc)
	ch := &syncpb.TableChanges{Table: tc.Name, Columns: tc.ColumnNames(cols)}
	nk := len(tc.KeyIndex)
	keys := make([]codec.Key, len(due))
	var readable []int
	for i, p := range due {
		key, raw, err := parseNotedKey(tc, p.key)
		if err != nil {
			bad, err := r.badKey(ctx, conn, tc, p, raw, err)
			if err != nil {
				return err
			}
			if bad == nil {
				out.dropped = append(out.dropped, p)
			} else {
				out.unreadable = append(out.unreadable, *bad)
			}
			continue
		}
		keys[i] = key
		readable = append(readable, i)
	}
	found := map[codec.Key][]codec.Value{}
	failed := map[codec.Key]string{}
	query := selectByKeys(tc, cols)
	full := make([]codec.Value, len(tc.Columns))
	raw := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	// Well below SQLite's smallest limit of bound parameters (999).
	per := max(1, 900/nk)
	for start := 0; start < len(readable); start += per {
		part := readable[start:min(start+per, len(readable))]
		args := make([]any, 0, len(part)*nk)
		for _, i := range part {
			vals, err := parseQuoted(due[i].key)
			if err != nil {
				return fmt.Errorf("the noted key %s: %w", due[i].key, err)
			}
			args = append(args, vals...)
		}
		rows, err := conn.QueryContext(ctx, query(len(part)), args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return err
			}
			vals := make([]codec.Value, len(cols))
			bad := ""
			for i, c := range cols {
				v, err := tc.Columns[c].Canonical(raw[i])
				if err != nil && bad == "" {
					bad = unreadableValue(tc, c, raw[i])
				}
				vals[i], full[c] = v, v
			}
			if bad != "" {
				// The key read (else parseNotedKey refused it), so it names
				// the row.
				key, err := keyOfRaw(tc, cols, raw)
				if err != nil {
					continue
				}
				failed[key] = bad
				continue
			}
			found[tc.KeyOfRow(full)] = vals
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	for _, i := range readable {
		p, key := due[i], keys[i]
		if why, bad := failed[key]; bad {
			out.unreadable = append(out.unreadable, unreadableRow{pendingRow: p, key: key, reason: why})
			continue
		}
		out.sent = append(out.sent, p)
		vals := found[key]
		if vals == nil {
			ch.Deletes = append(ch.Deletes, []byte(key))
			continue
		}
		ch.Upserts = append(ch.Upserts, tc.EncodeRow(nil, vals, nil))
		ch.UpsertKeys = append(ch.UpsertKeys, []byte(key))
	}
	if len(ch.Upserts)+len(ch.Deletes) > 0 {
		out.tables = append(out.tables, ch)
	}
	return nil
}

// keyOfRaw is the canonical key of a row read as raw values of cols.
func keyOfRaw(tc *codec.TableCodec, cols []int, raw []any) (codec.Key, error) {
	vals := make([]codec.Value, len(tc.KeyIndex))
	for i, k := range tc.KeyIndex {
		j := slices.Index(cols, k)
		if j < 0 {
			return "", fmt.Errorf("key column %q is not read", tc.Columns[k].Name)
		}
		v, err := tc.Columns[k].Canonical(raw[j])
		if err != nil {
			return "", err
		}
		vals[i] = v
	}
	return codec.KeyOfValues(vals...), nil
}

// badKey sets apart a noted row whose key does not read: it is unreadable
// while the row exists, and a delete with nothing to send once it is gone.
func (r *Replica) badKey(ctx context.Context, conn *sql.Conn, tc *codec.TableCodec, p pendingRow, raw []any, keyErr error) (*unreadableRow, error) {
	if raw == nil {
		// The note itself does not parse: no trigger of the engine writes
		// such a note.
		return nil, fmt.Errorf("the noted key %s: %w", p.key, keyErr)
	}
	var n int
	if err := conn.QueryRowContext(ctx, countByKey(tc), raw...).Scan(&n); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	named := make([]codec.Value, len(raw))
	reason := ""
	for i, v := range raw {
		// Text that is not UTF-8 would make a key no message can carry.
		named[i] = wire.TextValue(safetext.Text(fmt.Sprint(v), maxNamedKeyValue))
		if c := tc.Columns[tc.KeyIndex[i]]; reason == "" {
			if _, err := c.Canonical(v); err != nil {
				reason = unreadableValue(tc, tc.KeyIndex[i], v)
			}
		}
	}
	if reason == "" {
		reason = "its key does not read: " + keyErr.Error()
	}
	return &unreadableRow{pendingRow: p, key: codec.KeyOfValues(named...), reason: reason}, nil
}

// unreadableValue says why an own row's value at column c cannot be read.
func unreadableValue(tc *codec.TableCodec, c int, v any) string {
	col := tc.Columns[c]
	shown := fmt.Sprintf("%v", v)
	if b, ok := v.([]byte); ok {
		shown = fmt.Sprintf("%q", b)
	} else if s, ok := v.(string); ok {
		shown = fmt.Sprintf("%q", s)
	}
	if len(shown) > 64 {
		shown = shown[:61] + "..."
	}
	return fmt.Sprintf("the engine cannot read this row: column %q holds %s (%T), which is no %v for %s.%s; write the row again with a value of its type, or delete it",
		col.Name, shown, v, col.Kind, tc.Type, col.Field)
}
