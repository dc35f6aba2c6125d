package server

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
)

// model.go holds the engine's model of the declarations: the replicas
// table, the membership tables, the tables and the groups of their rows.

// replicasTable is the host table whose rows are the replicas.
type replicasTable struct {
	schema, table, column string
}

// qname is the replicas table's quoted, qualified name.
func (r replicasTable) qname() string {
	return codec.QuoteIdent(r.schema) + "." + codec.QuoteIdent(r.table)
}

// parseReplicas reads Options.Replicas: "schema.table(id_column)".
func parseReplicas(s string) (replicasTable, error) {
	open := strings.IndexByte(s, '(')
	if s == "" {
		return replicasTable{}, fmt.Errorf("magicsync/server: Options.Replicas is empty: name the host table whose rows are the replicas, as \"schema.table(id_column)\", e.g. \"shop.registers(id)\"")
	}
	if open < 0 || !strings.HasSuffix(s, ")") {
		return replicasTable{}, fmt.Errorf("magicsync/server: Options.Replicas %q is not of the form schema.table(id_column)", s)
	}
	schema, table, err := codec.ParseQualified(strings.TrimSpace(s[:open]))
	if err != nil {
		return replicasTable{}, fmt.Errorf("magicsync/server: Options.Replicas: %w", err)
	}
	col := strings.TrimSpace(s[open+1 : len(s)-1])
	if col == "" || strings.ContainsAny(col, ",\"") {
		return replicasTable{}, fmt.Errorf("magicsync/server: Options.Replicas %q must name one id column in parentheses", s)
	}
	return replicasTable{schema: schema, table: table, column: col}, nil
}

// members is a parsed members table of Grouped routes, with the name its
// groups carry.
type members struct {
	codec.Members
	spec string // normalised "schema.table(replica,group)"
}

// qname is the members table's quoted, qualified name.
func (m members) qname() string {
	return codec.QuoteIdent(m.Schema) + "." + codec.QuoteIdent(m.Table)
}

// table is what the server knows of one declared table.
type table struct {
	tc      *codec.TableCodec
	name    string
	qname   string
	catalog bool
	route   codec.RouteKind
	// routeCol is the column of Assigned and Grouped routes.
	routeCol string
	members  *members
	// down are the positions (in tc.Columns) of the columns that travel
	// down; up those that travel up (every non-generated column).
	down, up  []int
	downNames []string
	// pgType is each column's PostgreSQL type (format_type), filled by New.
	pgType []string
	// shape names the layout of the down tuples (columns and kinds), as
	// sync_rows keeps it beside each tuple.
	shape int64
	// active is the schema and name of the Active view; empty without one.
	// reads are the other tables it reads (ActiveReads).
	active [2]string
	reads  []codec.Reads
	// retired names the Retired column; "" without one.
	retired string
	// followCol is the position of a Follows route's column in tc.Columns;
	// parent is the catalog it points at and followers the catalogs
	// following this one, both resolved by New from foreign keys.
	followCol int
	parent    *table
	followers []*table
}

// tupleShape names a layout of down tuples: the first 8 bytes of the
// SHA-256 of each column's name and kind.
func tupleShape(tc *codec.TableCodec, down []int) int64 {
	h := sha256.New()
	for _, i := range down {
		c := tc.Columns[i]
		fmt.Fprintf(h, "%s\x00%s\x00", c.Name, c.Kind)
	}
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

// model is the server's view of the declarations and options.
type model struct {
	codecs   *magicsync.Codecs
	engine   engineSchema // Options.Schema
	replicas replicasTable
	tables   []*table
	byName   map[string]*table
	members  []*members
	// groupNames: whether any catalog is broadcast or assigned.
	broadcast, assigned bool
	// order lists the catalogs as the planner plans them (planOrder),
	// once New resolved the Follows routes.
	order []*table
	// wishes is the engine's table of wishes, planned as a catalog
	// assigned to each setting's replica; nil when no setting is declared.
	wishes *table
	// commands is the engine's table of commands under way, planned as a
	// catalog assigned to each command's replica; nil unless
	// Options.Commands.
	commands *table
}

// engineTable reports whether t is one of the engine's own tables the
// planner plans (wishes, commands): not the host's, never digested as a
// replica's catalog.
func (m *model) engineTable(t *table) bool {
	return t != nil && (t == m.wishes || t == m.commands)
}

// newModel checks what the server supports of the declarations.
func newModel(codecs *magicsync.Codecs, opts Options) (*model, error) {
	if codecs == nil {
		return nil, fmt.Errorf("magicsync/server: nil Codecs: build them with magicsync.NewCodecs")
	}
	engine, err := parseSchema(opts.Schema)
	if err != nil {
		return nil, err
	}
	rt, err := parseReplicas(opts.Replicas)
	if err != nil {
		return nil, err
	}
	m := &model{codecs: codecs, engine: engine, replicas: rt, byName: map[string]*table{}}
	var problems []string
	for _, tc := range codecs.Tables() {
		t := &table{tc: tc, name: tc.Name, qname: tc.QualifiedName(), catalog: tc.Mirror == codec.Catalog}
		if tc.Active != "" {
			schema, view, ok := strings.Cut(tc.Active, ".")
			if !ok {
				schema, view = tc.Schema, tc.Active
			}
			t.active = [2]string{schema, view}
		}
		for _, r := range tc.ActiveReads {
			parsed, err := codec.ParseReads(r)
			if err != nil {
				problems = append(problems, fmt.Sprintf("table %q: ActiveReads: %v", tc.Name, err))
				continue
			}
			t.reads = append(t.reads, parsed)
		}
		t.retired = tc.Retired
		for i, c := range tc.Columns {
			if !c.Generated {
				t.up = append(t.up, i)
				if !c.ReplicaOwned {
					t.down = append(t.down, i)
					t.downNames = append(t.downNames, c.Name)
				}
			}
		}
		t.shape = tupleShape(tc, t.down)
		if t.catalog {
			t.route = tc.Sync.Kind()
			t.routeCol = tc.Sync.Column()
			switch t.route {
			case codec.RouteBroadcast, codec.RouteDefault:
				t.route = codec.RouteBroadcast
				m.broadcast = true
			case codec.RouteAssigned:
				m.assigned = true
			case codec.RouteGrouped:
				pm, err := codec.ParseMembers(tc.Sync.Members())
				if err != nil {
					problems = append(problems, fmt.Sprintf("table %q: %v", tc.Name, err))
					break
				}
				spec := fmt.Sprintf("%s.%s(%s,%s)", pm.Schema, pm.Table, pm.Replica, pm.Group)
				for _, have := range m.members {
					if have.spec == spec {
						t.members = have
					}
				}
				if t.members == nil {
					t.members = &members{Members: pm, spec: spec}
					m.members = append(m.members, t.members)
				}
			case codec.RouteFollows:
				// The row it follows is resolved by New, from the column's
				// foreign key (resolveFollows).
				t.followCol = slices.IndexFunc(tc.Columns, func(c codec.Column) bool { return c.Name == t.routeCol })
				if t.followCol < 0 {
					problems = append(problems, fmt.Sprintf("table %q: Follows(%q) names no column of the declaration", tc.Name, t.routeCol))
				}
			}
		}
		m.tables = append(m.tables, t)
		m.byName[t.name] = t
	}
	for _, t := range m.tables {
		if t.tc.Mirror == codec.Setting {
			w, err := wishesTable(engine)
			if err != nil {
				return nil, err
			}
			m.wishes = w
			m.byName[w.name] = w
			m.assigned = true
			break
		}
	}
	if opts.Commands {
		c, err := commandsTable(engine)
		if err != nil {
			return nil, err
		}
		m.commands = c
		m.byName[c.name] = c
		m.assigned = true
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("magicsync/server: %s", strings.Join(problems, "; "))
	}
	return m, nil
}

// catalogs lists the tables the planner plans: the declared catalogs,
// then the wishes table when a setting is declared, then the commands
// table when commands are on.
func (m *model) catalogs() []*table {
	var out []*table
	for _, t := range m.tables {
		if t.catalog {
			out = append(out, t)
		}
	}
	if m.wishes != nil {
		out = append(out, m.wishes)
	}
	if m.commands != nil {
		out = append(out, m.commands)
	}
	return out
}

// Group names. A row's group, and a replica's groups, are named so:
//
//	b                          every broadcast row
//	a:<replica uuid>           the rows assigned to one replica
//	g:<members spec>:<value>   the rows of one group of a members table
const groupBroadcast = "b"

// groupAssigned names the group of the rows assigned to a replica.
func groupAssigned(replica string) string { return "a:" + replica }

// groupGrouped names the group of the rows of one value of a members
// table's group column.
func groupGrouped(m *members, value string) string { return "g:" + m.spec + ":" + value }

// groupOfRow names the group of a row whose route value (as text) is v;
// "" when the row goes to no replica (a NULL route value).
func (t *table) groupOfRow(v *string) string {
	switch t.route {
	case codec.RouteBroadcast:
		return groupBroadcast
	case codec.RouteAssigned:
		if v == nil {
			return ""
		}
		return groupAssigned(*v)
	case codec.RouteGrouped:
		if v == nil {
			return ""
		}
		return groupGrouped(t.members, *v)
	}
	return ""
}
