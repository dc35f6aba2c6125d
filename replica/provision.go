// Provisioning: staging a snapshot's parts until its EndSnapshot, switching
// the staged rows in, letting go of the rows the snapshot did not stage,
// and noting the replica's own rows to go up again.

package replica

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// stage keeps one part of a provisioning until its EndSnapshot.
func (a *applier) stage(ctx context.Context, d *syncpb.Down) error {
	// Many rows a statement: a statement a row cost as much again.
	query := func(n int) string {
		return stageRows + valuesList(n, 6) + stageRowsConflict
	}
	one, err := a.stmt(ctx, query(1))
	if err != nil {
		return err
	}
	per := rowsPerInsert(6)
	// A new provisioning may begin before an earlier one ended: what the
	// earlier one staged will never be switched in. (Two ranges of the
	// primary key: "snapshot <> ?" scanned every row staged so far, once
	// per part, quadratic in the snapshot.)
	for _, q := range []string{deleteStagedBefore, deleteStagedAfter, deleteStagedWishesBefore, deleteStagedWishesAfter,
		deleteStagedCommandsBefore, deleteStagedCommandsAfter} {
		if _, err := a.exec(ctx, q, d.GetSnapshot()); err != nil {
			return err
		}
	}
	if err := a.recordWishes(ctx, d.GetWishes(), d.GetSnapshot()); err != nil {
		return err
	}
	if err := a.recordCommands(ctx, d.GetCommands(), d.GetSnapshot()); err != nil {
		return err
	}
	rctx := rowContext(ctx)
	var args []any
	for _, t := range d.GetTables() {
		_, ok, err := a.catalogOf(ctx, t)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		cols := strings.Join(t.Columns, "\x1f")
		for i := 0; i < len(t.Upserts); {
			if err := ctx.Err(); err != nil {
				return err
			}
			s, n := one, 1
			if len(t.Upserts)-i >= per {
				if s, err = a.stmt(ctx, query(per)); err != nil {
					return err
				}
				n = per
			}
			args = args[:0]
			for j := i; j < i+n; j++ {
				args = append(args, d.GetSnapshot(), t.GetTable(), t.UpsertKeys[j], cols, t.Upserts[j], a.msg)
			}
			if _, err := s.ExecContext(rctx, args...); err != nil {
				return err
			}
			i += n
		}
	}
	return nil
}

// endSnapshot switches a provisioning in: staged rows replace what the
// replica holds of the server's tables; own settings the server records but
// the replica no longer holds are deleted as the replica's own writes;
// every own row is sent again; staged wishes replace the wishes held, and
// every answer held is sent again.
func (a *applier) endSnapshot(ctx context.Context, e *syncpb.EndSnapshot) error {
	covered := map[string]bool{}
	for _, t := range e.GetTables() {
		covered[t] = true
	}
	// A table that held nothing before the switch holds only staged rows
	// after it: it has nothing to let go (a new replica's provisioning).
	held := map[string]bool{}
	for _, tc := range a.r.catalogs {
		if covered[tc.Name] {
			var any bool
			if err := a.tx.QueryRowContext(ctx, anyRow(tc)).Scan(&any); err != nil {
				return fmt.Errorf("provisioning %q: %w", tc.Name, err)
			}
			held[tc.Name] = any
		}
	}
	for _, tc := range a.r.catalogs {
		if covered[tc.Name] {
			if err := a.switchIn(ctx, e.GetSnapshot(), tc); err != nil {
				return fmt.Errorf("provisioning %q: %w", tc.Name, err)
			}
		}
	}
	for _, tc := range slices.Backward(a.r.catalogs) {
		if covered[tc.Name] && held[tc.Name] {
			if err := a.letGo(ctx, e.GetSnapshot(), tc); err != nil {
				return fmt.Errorf("provisioning %q: %w", tc.Name, err)
			}
		}
	}
	for _, own := range e.GetOwn() {
		tc, err := a.r.codecs.Table(own.GetTable())
		if err != nil || tc.Mirror == codec.Catalog {
			continue
		}
		if err := a.forgetOwn(ctx, tc, own.GetKeys()); err != nil {
			return err
		}
	}
	for _, tc := range a.r.own {
		q := fmt.Sprintf(resendOwnFormat, keyExpr(tc, ""), codec.QuoteIdent(tc.Name))
		if _, err := a.exec(ctx, q, tc.Name); err != nil {
			return fmt.Errorf("sending %q again: %w", tc.Name, err)
		}
	}
	if err := a.switchInWishes(ctx, e.GetSnapshot()); err != nil {
		return err
	}
	if err := a.switchInCommands(ctx, e.GetSnapshot()); err != nil {
		return err
	}
	// What the messages before the provisioning brought is replaced: the
	// rows the replica could not take from them are settled, as the
	// server forgets them when the provisioning ends. (Those it could not
	// take from the provisioning's own parts stay.)
	if _, err := a.exec(ctx, settleBeforeSnapshot, e.GetSnapshot()); err != nil {
		return fmt.Errorf("settling the rows not taken before: %w", err)
	}
	// Staged parts of a later snapshot stay; with none, the whole table
	// goes, which SQLite does without visiting its rows.
	var later bool
	if err := a.tx.QueryRowContext(ctx, selectStagedLater, e.GetSnapshot()).Scan(&later); err != nil {
		return err
	}
	discard, discardWishes, discardCommands, args := deleteStaged, deleteStagedWishes, deleteStagedCommands, []any(nil)
	if later {
		discard, discardWishes, discardCommands, args = deleteStagedUpTo, deleteStagedWishesUpTo, deleteStagedCommandsUpTo, []any{e.GetSnapshot()}
	}
	for _, q := range []string{discard, discardWishes, discardCommands} {
		if _, err := a.exec(ctx, q, args...); err != nil {
			return err
		}
	}
	a.got.Provisioned = true
	return nil
}

// switchIn upserts a snapshot's staged rows of one table, in pages.
func (a *applier) switchIn(ctx context.Context, snapshot uint64, tc *codec.TableCodec) error {
	const page = 2000
	var after []byte
	plans := map[string]*upsertPlan{}
	for {
		// The first page has no lower bound (a nil key would bind as NULL,
		// which no key is greater than); the others start past the last
		// key, as an index range: "(? IS NULL OR key > ?)" scanned every
		// staged row before the page again, quadratic in the snapshot.
		q, args := selectStagedFirst, []any{snapshot, tc.Name, page}
		if after != nil {
			q, args = selectStagedAfter, []any{snapshot, tc.Name, after, page}
		}
		rows, err := a.tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		byCols := map[string]*stagedRows{}
		var order []string
		n := 0
		var raw sql.RawBytes
		var g *stagedRows
		var cols string
		for rows.Next() {
			var key, row []byte
			if err := rows.Scan(&key, &raw, &row); err != nil {
				rows.Close()
				return err
			}
			// The columns are nearly always those of the row before.
			if g == nil || string(raw) != cols {
				cols = string(raw)
				g = byCols[cols]
				if g == nil {
					g = &stagedRows{}
					byCols[cols] = g
					order = append(order, cols)
				}
			}
			g.keys = append(g.keys, key)
			g.rows = append(g.rows, row)
			after = key
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, cols := range order {
			p := plans[cols]
			if p == nil {
				if p, err = a.plan(ctx, tc, strings.Split(cols, "\x1f")); err != nil {
					return err
				}
				plans[cols] = p
			}
			// A provisioning names no row as applied: it switched them all.
			a.unlisted = true
			err := a.upsert(ctx, p, byCols[cols].rows, byCols[cols].keys, a.msg, nil)
			a.unlisted = false
			if err != nil {
				return err
			}
		}
		delete(a.got.Applied, tc.Name)
		if n < page {
			return nil
		}
	}
}

type stagedRows struct{ keys, rows [][]byte }

// letGo deletes the rows of one table that the snapshot did not stage.
func (a *applier) letGo(ctx context.Context, snapshot uint64, tc *codec.TableCodec) error {
	if _, err := a.exec(ctx, createHeld); err != nil {
		return err
	}
	if _, err := a.exec(ctx, clearHeld); err != nil {
		return err
	}
	ins, err := a.stmt(ctx, insertHeld)
	if err != nil {
		return err
	}
	// Page through the table by key, noting each row's canonical key.
	const page = 2000
	var after []any
	for {
		q := selectKeysPage(tc, after != nil, page)
		rows, err := a.tx.QueryContext(ctx, q, after...)
		if err != nil {
			return err
		}
		var keys [][]byte
		var last []any
		for rows.Next() {
			raw := make([]any, len(tc.KeyIndex))
			ptrs := make([]any, len(raw))
			for i := range raw {
				ptrs[i] = &raw[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return err
			}
			vals := make([]codec.Value, len(raw))
			for i, src := range raw {
				v, err := tc.Columns[tc.KeyIndex[i]].Canonical(src)
				if err != nil {
					rows.Close()
					return err
				}
				vals[i] = v
			}
			keys = append(keys, []byte(codec.KeyOfValues(vals...)))
			last = raw
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, k := range keys {
			if _, err := ins.ExecContext(ctx, k); err != nil {
				return err
			}
		}
		if len(keys) < page {
			break
		}
		after = last
	}
	rows, err := a.tx.QueryContext(ctx, selectHeldNotStaged, snapshot, tc.Name)
	if err != nil {
		return err
	}
	var gone [][]byte
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return err
		}
		gone = append(gone, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if err := a.deleteKeys(ctx, tc, gone); err != nil {
		return err
	}
	delete(a.got.Applied, tc.Name)
	_, err = a.exec(ctx, clearHeld)
	return err
}

// forgetOwn notes, as the replica's own deletes, the rows the server records
// it holding that it no longer holds.
func (a *applier) forgetOwn(ctx context.Context, tc *codec.TableCodec, keys [][]byte) error {
	exists, err := a.stmt(ctx, countByKey(tc))
	if err != nil {
		return err
	}
	note, err := a.stmt(ctx, fmt.Sprintf(noteOwnDeleteFormat, keyExpr(tc, "?")))
	if err != nil {
		return err
	}
	for _, k := range keys {
		args, err := keyArgs(tc, k)
		if err != nil {
			if err := a.reject(ctx, tc.Name, k, "the key does not decode: "+err.Error()); err != nil {
				return err
			}
			continue
		}
		var n int
		if err := exists.QueryRowContext(ctx, args...).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			if _, err := note.ExecContext(ctx, append([]any{tc.Name}, args...)...); err != nil {
				return err
			}
		}
	}
	return nil
}
