package codec

import (
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Schema describes the declared tables as the protocol's Schema message
// carries them, for a replica written in another language to create and
// check its tables from (PROTOCOL.md, section 13).
func (c *Set) Schema() *syncpb.Schema {
	s := &syncpb.Schema{Protocol: wire.Protocol}
	for _, tc := range c.tables {
		s.Tables = append(s.Tables, tc.schema())
	}
	return s
}

// schema describes one table.
func (tc *TableCodec) schema() *syncpb.TableSchema {
	ts := &syncpb.TableSchema{
		Name:        tc.Name,
		Key:         tc.ColumnNames(tc.KeyIndex),
		Retired:     tc.Retired,
		IfUnchanged: tc.Mirror == Setting && tc.Apply == IfUnchanged,
	}
	switch tc.Mirror {
	case Catalog:
		ts.Mirror = syncpb.Mirror_MIRROR_CATALOG
	case Record:
		ts.Mirror = syncpb.Mirror_MIRROR_RECORD
	case Setting:
		ts.Mirror = syncpb.Mirror_MIRROR_SETTING
	}
	if tc.OriginIndex >= 0 {
		ts.Origin = tc.Columns[tc.OriginIndex].Name
	}
	for _, c := range tc.Columns {
		ts.Columns = append(ts.Columns, &syncpb.ColumnSchema{
			Name:         c.Name,
			Kind:         c.Kind.String(),
			Nullable:     c.Nullable,
			Version:      c.Version,
			Created:      c.Created,
			Desired:      c.Desired,
			Generated:    c.Generated,
			ReplicaOwned: c.ReplicaOwned,
		})
	}
	return ts
}
