// Rows set aside, left out of digests: the catalog rows the replica could
// not take, while no later message brought them again, and the own rows
// set aside (see settingDigest). The server leaves the same rows out of
// what it expects, so that one row set aside does not switch its table's
// digest off.

package replica

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// refusedCatalogRows reads the catalog rows the replica could not take and
// that no later message brought again (unsettled): by table, the keys a
// digest leaves out. A table in wait has one whose report the server has
// not confirmed yet, or one without a key: the server may not record it
// as the replica does, and the table goes without a digest until then.
func (r *Replica) refusedCatalogRows(ctx context.Context, conn *sql.Conn) (without map[string]map[string]bool, wait map[string]bool, err error) {
	if len(r.catalogs) == 0 {
		return nil, nil, nil
	}
	names := make([]any, len(r.catalogs))
	for i, tc := range r.catalogs {
		names[i] = tc.Name
	}
	rows, err := conn.QueryContext(ctx, fmt.Sprintf(selectUnsettledFormat, placeholders(len(names))), names...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var tbl string
		var key []byte
		var filed bool
		if err := rows.Scan(&tbl, &key, &filed); err != nil {
			return nil, nil, err
		}
		if !filed || len(key) == 0 {
			if wait == nil {
				wait = map[string]bool{}
			}
			wait[tbl] = true
			continue
		}
		if without == nil {
			without = map[string]map[string]bool{}
		}
		if without[tbl] == nil {
			without[tbl] = map[string]bool{}
		}
		without[tbl][string(key)] = true
	}
	return without, wait, rows.Err()
}

// settleCarried settles the records of the catalog rows the replica could
// not take from an earlier message that this message carries again, as an
// upsert or a delete (parts, by table), whether it takes them now or not:
// the server forgets such a record once the replica acknowledges the
// message (and keeps the new one, of this message, if it still cannot
// take the row). Most messages find no record to settle, in one read.
func (a *applier) settleCarried(ctx context.Context, parts map[string][]*syncpb.TableChanges) error {
	if len(parts) == 0 {
		return nil
	}
	args := []any{a.msg}
	for tbl := range parts {
		args = append(args, tbl)
	}
	rows, err := a.tx.QueryContext(ctx, fmt.Sprintf(selectUnsettledBeforeFormat, placeholders(len(parts))), args...)
	if err != nil {
		return fmt.Errorf("reading the rows not taken before: %w", err)
	}
	type record struct {
		id       int64
		tbl, key string
	}
	var records []record
	for rows.Next() {
		var rc record
		var key []byte
		if err := rows.Scan(&rc.id, &rc.tbl, &key); err != nil {
			rows.Close()
			return fmt.Errorf("reading the rows not taken before: %w", err)
		}
		rc.key = string(key)
		records = append(records, rc)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(records) == 0 {
		return err
	}
	carried := map[string]map[string]bool{}
	for tbl, ts := range parts {
		carried[tbl] = map[string]bool{}
		for _, t := range ts {
			for _, ks := range [][][]byte{t.UpsertKeys, t.Deletes} {
				for _, k := range ks {
					carried[tbl][string(k)] = true
				}
			}
		}
	}
	var ids []any
	for _, rc := range records {
		if carried[rc.tbl][rc.key] {
			ids = append(ids, rc.id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := a.exec(ctx, fmt.Sprintf(settleFormat, placeholders(len(ids))), ids...); err != nil {
		return fmt.Errorf("settling the rows not taken before: %w", err)
	}
	return nil
}
