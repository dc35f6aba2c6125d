// This file holds the declarations as the engines see them: Table and its
// enums, routes, and the parsing of the names a declaration holds.

package codec

import (
	"fmt"
	"strings"

	"github.com/magicsync/magicsync/internal/enum"
)

// Mirror says which side writes a table and how it travels; the host
// names it magicsync.Mirror, where its values are documented.
type Mirror uint8

// The mirrors: magicsync.Catalog, Record and Setting.
const (
	Catalog Mirror = iota + 1
	Record
	Setting
)

var mirrorNames = []string{
	Catalog: "catalog", Record: "record", Setting: "setting",
}

// String names the mirror as it is spelled in declarations.
func (m Mirror) String() string { return enum.Name(mirrorNames, m, "mirror") }

// Strategy says when a replica carries out a wish of a setting; the host
// names it magicsync.Strategy, where its values are documented.
type Strategy uint8

// The strategies: magicsync.Always (the zero value) and IfUnchanged.
const (
	Always Strategy = iota
	IfUnchanged
)

var strategyNames = []string{
	Always: "always", IfUnchanged: "if_unchanged",
}

// String names the strategy.
func (s Strategy) String() string { return enum.Name(strategyNames, s, "strategy") }

// RouteKind says how a catalog's rows are spread over replicas; the host
// names it magicsync.RouteKind, where its values are documented.
type RouteKind uint8

// The route kinds: magicsync.RouteDefault (the zero Route, broadcast),
// RouteBroadcast, RouteAssigned, RouteGrouped and RouteFollows.
const (
	RouteDefault RouteKind = iota
	RouteBroadcast
	RouteAssigned
	RouteGrouped
	RouteFollows
)

var routeKindNames = []string{
	RouteDefault: "default", RouteBroadcast: "broadcast", RouteAssigned: "assigned",
	RouteGrouped: "grouped", RouteFollows: "follows",
}

// String names the route kind.
func (k RouteKind) String() string { return enum.Name(routeKindNames, k, "route") }

// Route says which replicas hold each row of a catalog (magicsync.Route,
// built by magicsync.Broadcast, Assigned, Grouped or Follows, which call
// NewRoute). The zero Route broadcasts.
type Route struct {
	kind    RouteKind
	column  string
	members string
}

// NewRoute is the route of the given kind reading column, with members the
// group-membership table of a Grouped route.
func NewRoute(kind RouteKind, column, members string) Route {
	return Route{kind: kind, column: column, members: members}
}

// Kind says how the route spreads rows.
func (r Route) Kind() RouteKind { return r.kind }

// Column is the column the route reads: the replica id of Assigned, the
// group of Grouped, the reference of Follows. It is empty for Broadcast.
func (r Route) Column() string { return r.column }

// Members is the group-membership table of a Grouped route, as declared.
func (r Route) Members() string { return r.members }

// String writes the route as it would be declared.
func (r Route) String() string {
	switch r.kind {
	case RouteAssigned, RouteFollows:
		return fmt.Sprintf("%s(%q)", r.kind, r.column)
	case RouteGrouped:
		return fmt.Sprintf("grouped(%q, %q)", r.members, r.column)
	}
	return r.kind.String()
}

// Members is a parsed group-membership table of a Grouped route.
type Members struct {
	Schema  string // the table's schema
	Table   string // the table's name
	Replica string // the column holding a replica's id
	Group   string // the column holding the replica's group
}

// Reads is a parsed entry of Table.ActiveReads: a table the Active view
// reads, and its columns holding the catalog's key, in key order.
type Reads struct {
	Schema, Table string
	Columns       []string
}

// ParseReads reads "schema.table(col, ...)", an entry of ActiveReads.
func ParseReads(s string) (Reads, error) {
	open := strings.IndexByte(s, '(')
	if open < 0 || !strings.HasSuffix(s, ")") {
		return Reads{}, fmt.Errorf("%q is not of the form schema.table(key_column, ...)", s)
	}
	schema, table, err := ParseQualified(strings.TrimSpace(s[:open]))
	if err != nil {
		return Reads{}, err
	}
	r := Reads{Schema: schema, Table: table}
	for _, c := range strings.Split(s[open+1:len(s)-1], ",") {
		c = strings.TrimSpace(c)
		if err := checkIdentifier(c); err != nil {
			return Reads{}, fmt.Errorf("%q: %w", s, err)
		}
		r.Columns = append(r.Columns, c)
	}
	return r, nil
}

// ParseMembers reads "schema.table(replica_column, group_column)".
func ParseMembers(s string) (Members, error) {
	open := strings.IndexByte(s, '(')
	if open < 0 || !strings.HasSuffix(s, ")") {
		return Members{}, fmt.Errorf("%q is not of the form schema.table(replica_column, group_column)", s)
	}
	schema, table, err := ParseQualified(strings.TrimSpace(s[:open]))
	if err != nil {
		return Members{}, err
	}
	cols := strings.Split(s[open+1:len(s)-1], ",")
	if len(cols) != 2 {
		return Members{}, fmt.Errorf("%q names %d columns in parentheses; it needs two: (replica_column, group_column)", s, len(cols))
	}
	m := Members{Schema: schema, Table: table, Replica: strings.TrimSpace(cols[0]), Group: strings.TrimSpace(cols[1])}
	for _, c := range []string{m.Replica, m.Group} {
		if err := checkIdentifier(c); err != nil {
			return Members{}, fmt.Errorf("%q: %w", s, err)
		}
	}
	return m, nil
}

// ParseQualified splits "schema.table" (or "table", in schema public) into
// its parts, checking each is a usable identifier.
func ParseQualified(s string) (schema, table string, err error) {
	parts := strings.Split(s, ".")
	switch len(parts) {
	case 1:
		schema, table = "public", parts[0]
	case 2:
		schema, table = parts[0], parts[1]
	default:
		return "", "", fmt.Errorf("%q has more than one dot; write schema.table", s)
	}
	schema, table = strings.TrimSpace(schema), strings.TrimSpace(table)
	if err := checkIdentifier(schema); err != nil {
		return "", "", fmt.Errorf("%q: %w", s, err)
	}
	if err := checkIdentifier(table); err != nil {
		return "", "", fmt.Errorf("%q: %w", s, err)
	}
	return schema, table, nil
}

// Table is what a row type declares of its table (magicsync.Table, an
// alias of this type). Only Name and Mirror are required.
type Table struct {
	// Schema is the table's PostgreSQL schema; empty means "public". The
	// replica's SQLite table has the same Name, without schema.
	Schema string
	// Name is the table's name on both sides. It may not begin "sync_":
	// those names are the engine's.
	Name string
	// Mirror says which side writes the table.
	Mirror Mirror
	// Key lists the key columns in order. Empty means the fields tagged
	// sync:"key", in field order, or else the column "id".
	Key []string
	// Origin names the key column that holds the writing replica's id. A
	// Record or Setting must have one.
	Origin string
	// Sync routes a Catalog's rows to replicas; the zero Route broadcasts.
	Sync Route
	// Active names a view (schema.view, or view in the table's schema)
	// showing the rows replicas should hold; a row leaving it is let go.
	// Catalogs only. Each part is checked as the other names are: not
	// empty, at most 63 bytes, no quote, control character or invalid
	// UTF-8.
	Active string
	// ActiveReads lists the other host tables the Active view reads, each
	// as "schema.table(col, ...)" naming the columns of that table holding
	// this table's key, in key order: e.g. "shop.promotions(product_id)"
	// for a view of the products a promotion puts on sale. The server's
	// triggers on those tables note the keys their writes name, so that a
	// row entering or leaving the view by a change to another table is
	// planned like a change to the row itself. Catalogs with Active only.
	ActiveReads []string
	// Retired names a boolean column: a retired row goes to no replica that
	// lacks it, and is kept only while a replica's row points at it.
	Retired string
	// Unmirrored lists server columns the row type leaves out on purpose,
	// so that the server's schema check does not ask for them.
	Unmirrored []string
	// Apply says when a replica carries out a wish. Settings only.
	Apply Strategy
}
