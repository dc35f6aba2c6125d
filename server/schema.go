package server

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// schemaMessage is Endpoint.Schema.
func (s *Server) schemaMessage() []byte {
	s.schemaOnce.Do(func() {
		sc := s.codecs.Schema()
		for _, ts := range sc.Tables {
			ts.ForeignKeys = s.foreignKeys[ts.Name]
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(sc)
		if err != nil {
			// A message of strings, booleans and enums cannot fail to
			// encode; were it to, the replica is told there is none.
			s.log.Error("magicsync/server: encoding the schema", "err", err)
		}
		s.schema = b
	})
	return s.schema
}

// foreignKeys are foreign keys among the declared tables, by the name on
// the replica of the table holding each.
type foreignKeys map[string][]*syncpb.ForeignKey

// readForeignKeys reads, from the host's catalog, the foreign keys among
// the declared tables, by the replica's name of the table holding each: a
// replica needs them to order its tables and to keep retired rows (the
// Schema carries them). A key on a column a declaration leaves out, which
// the replica's table lacks, is left out.
func (s *Server) readForeignKeys(ctx context.Context) (foreignKeys, error) {
	names := make([]string, len(s.m.tables))
	for i, t := range s.m.tables {
		names[i] = t.qname
	}
	rows, err := s.pool.Query(ctx, qForeignKeys, names)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: reading the foreign keys among the declared tables: %w", err)
	}
	defer rows.Close()
	declared := func(schema, name string) *table {
		for _, t := range s.m.tables {
			if t.tc.Schema == schema && t.tc.Name == name {
				return t
			}
		}
		return nil
	}
	has := func(t *table, cols []string) bool {
		for _, c := range cols {
			if !slices.Contains(t.tc.ColumnNames(nil), c) {
				return false
			}
		}
		return len(cols) > 0
	}
	out := foreignKeys{}
	for rows.Next() {
		var schema, name, refSchema, refName string
		var cols, refCols []string
		if err := rows.Scan(&schema, &name, &cols, &refSchema, &refName, &refCols); err != nil {
			return nil, fmt.Errorf("magicsync/server: reading the foreign keys among the declared tables: %w", err)
		}
		child, parent := declared(schema, name), declared(refSchema, refName)
		if child == nil || parent == nil || len(cols) != len(refCols) || !has(child, cols) || !has(parent, refCols) {
			continue
		}
		out[child.tc.Name] = append(out[child.tc.Name], &syncpb.ForeignKey{Columns: cols, Table: parent.tc.Name, References: refCols})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("magicsync/server: reading the foreign keys among the declared tables: %w", err)
	}
	return out, nil
}
