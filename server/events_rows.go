package server

import (
	"context"
	"fmt"

	"github.com/magicsync/magicsync"
)

// events_rows.go holds RowsOf, which reads the rows an event names.

// RowsOf reads the rows of type T (a declared table's) with the given keys
// (an event's Keys, or magicsync.KeyOf's) from the host's table, through
// q (a pool, a connection or a transaction), in the order of keys; a key
// whose row is gone, or holds a value T cannot, is left out. It reads them
// all in one statement: a host following RecordsFiled reads the rows of
// each event so, in the transaction that applies it.
func RowsOf[T magicsync.Declarer](ctx context.Context, s *Server, q Querier, keys []magicsync.Key) ([]T, error) {
	var zero T
	tc, err := s.m.codecs.Of(zero)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: RowsOf: %w", err)
	}
	t := s.m.byName[tc.Name]
	if t == nil {
		return nil, fmt.Errorf("magicsync/server: RowsOf: %T's table %q is not one this server syncs", zero, tc.Name)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	raw := make([][]byte, len(keys))
	for i, k := range keys {
		raw[i] = []byte(k)
	}
	held, err := t.readValuesByKeys(ctx, q, raw)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: RowsOf: %w", err)
	}
	out := make([]T, 0, len(held))
	for _, k := range keys {
		vals, ok := held[string(k)]
		if !ok {
			continue
		}
		var row T
		if err := tc.Fill(&row, vals); err != nil {
			return nil, fmt.Errorf("magicsync/server: RowsOf: the row of %v: %w", k, err)
		}
		out = append(out, row)
	}
	return out, nil
}
