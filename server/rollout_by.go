package server

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
)

// rollout_by.go holds rollouts that find each replica's row by columns'
// values (RolloutOptions.By) rather than by its key: a setting keyed by an
// id of each replica's own, found by its name.

// byColumns returns the positions of the columns by names in tc, or why
// they cannot find a row: a column tc lacks, named twice, or the origin
// (each replica's row holds its own id there).
func byColumns(tc *codec.TableCodec, by []string) ([]int, error) {
	var out []int
	for _, name := range by {
		i := slices.IndexFunc(tc.Columns, func(c codec.Column) bool { return c.Name == name })
		switch {
		case i < 0:
			return nil, fmt.Errorf("magicsync/server: roll: RolloutOptions.By names %q, which is no column of %s (its columns: %s)",
				name, tc.Name, strings.Join(tc.ColumnNames(nil), ", "))
		case i == tc.OriginIndex:
			return nil, fmt.Errorf("magicsync/server: roll: RolloutOptions.By names %q, the origin of %s: each replica's row holds its own id there; name the columns that tell its rows apart", name, tc.Name)
		case slices.Contains(out, i):
			return nil, fmt.Errorf("magicsync/server: roll: RolloutOptions.By names %q twice", name)
		}
		out = append(out, i)
	}
	return out, nil
}

// matchRows finds, in tx, the row of each of replicas (of rollout id)
// whose columns by hold the values the rollout's template (vals) holds,
// among the rows the replicas filed; records the keys found, and the
// replicas of no such row or of several (unmatched, not wished), and
// returns the replicas found with the keys of their rows (hex), in the
// order of replicas.
func (s *Server) matchRows(ctx context.Context, tx pgx.Tx, id int64, tc *codec.TableCodec, by []string, vals []codec.Value, replicas []uuid.UUID) ([]uuid.UUID, []string, error) {
	t := s.m.byName[tc.Name]
	cols, err := byColumns(tc, by)
	if err != nil || t == nil {
		return nil, nil, fmt.Errorf("magicsync/server: rollout %d: %s is no setting this server syncs, or its columns changed (%w): abort the rollout", id, tc.Name, err)
	}
	args := []any{replicas}
	null := make([]bool, len(cols))
	for n, i := range cols {
		text, ok := pgText(vals[i])
		if !ok {
			null[n] = true
			continue
		}
		args = append(args, text)
	}
	rows, err := tx.Query(ctx, t.selectMatching(cols, null), args...)
	if err != nil {
		return nil, nil, fmt.Errorf("magicsync/server: rollout %d: finding the rows of %s by %s: %w", id, tc.Name, strings.Join(by, ", "), err)
	}
	found := map[uuid.UUID][]string{}
	row := make([]codec.Value, len(tc.Columns))
	for rows.Next() {
		if err := t.scanRow(rows, tc.KeyIndex, row); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("magicsync/server: rollout %d: %w", id, err)
		}
		if o := row[tc.OriginIndex]; o.Kind == wire.UUID {
			found[uuid.UUID(o.U)] = append(found[uuid.UUID(o.U)], hex.EncodeToString([]byte(tc.KeyOfRow(row))))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("magicsync/server: rollout %d: %w", id, err)
	}
	keys := make([]string, len(replicas))
	var matched []uuid.UUID
	var hexes []string
	for i, r := range replicas {
		if len(found[r]) == 1 {
			keys[i] = found[r][0]
			matched, hexes = append(matched, r), append(hexes, keys[i])
		}
	}
	if _, err := tx.Exec(ctx, s.sql.of(qRolloutMatched), id, replicas, keys); err != nil {
		return nil, nil, fmt.Errorf("magicsync/server: rollout %d: %w", id, err)
	}
	return matched, hexes, nil
}
