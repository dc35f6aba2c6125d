// This file holds the compiled tables (Set, TableCodec, Column) and
// Compile, which builds them from declarations and checks every rule.

package codec

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/magicsync/magicsync/internal/wire"
)

// Column is one mirrored column of a table: a struct field with its name,
// canonical kind and roles.
type Column struct {
	Name         string    // the column's name in both databases
	Field        string    // the Go field path, e.g. "Footer.Text"
	Kind         ValueKind // the canonical kind its values take
	Nullable     bool      // whether it may hold NULL (pointer, sql.Null*, []byte, Valuer)
	Key          bool      // part of the key
	Version      bool      // orders the row's versions: the newer wins
	Created      bool      // set once, on insert
	Generated    bool      // computed by the database; never written by the engine
	ReplicaOwned bool      // a catalog column the replica writes; never sent down
	Desired      bool      // a setting column the server may wish other values

	index []int
	codec fieldCodec
}

// TableCodec is everything the engines know of one declared table.
type TableCodec struct {
	// Table is the declaration, normalised: Schema filled, Key filled,
	// Sync filled for catalogs.
	Table
	// Type is the row's struct type.
	Type reflect.Type
	// Columns are the mirrored columns, in field order.
	Columns []Column
	// KeyIndex, DesiredIndex: positions in Columns.
	KeyIndex     []int
	DesiredIndex []int
	// OriginIndex, VersionIndex, CreatedIndex: positions in Columns, or -1.
	OriginIndex  int
	VersionIndex int
	CreatedIndex int
}

// Set holds the declared tables. The root package's NewCodecs builds it
// with Compile, and the engines share it; it is safe for concurrent use.
type Set struct {
	tables []*TableCodec
	byName map[string]*TableCodec
	byType map[reflect.Type]*TableCodec
}

// Compile checks the row types and builds their codecs. Each row is a value
// (or pointer) of a struct type; declare returns the Table it declares,
// and is called with a non-nil value of the row's type. When anything is
// wrong, Compile returns a nil Set and every problem found, each naming the
// struct and field and saying what to do.
func Compile(rows []any, declare func(row any) Table) (*Set, []Problem) {
	c := &Set{byName: map[string]*TableCodec{}, byType: map[reflect.Type]*TableCodec{}}
	var problems []Problem
	for _, row := range rows {
		tc, ps := compile(row, declare)
		problems = append(problems, ps...)
		if tc == nil {
			continue
		}
		// The type first: a type passed twice also declares its table twice,
		// and "passed twice" is what the caller has to fix.
		if prev, dup := c.byType[tc.Type]; dup {
			problems = append(problems, Problem{Struct: typeName(tc.Type), Msg: fmt.Sprintf(
				"the type is passed twice to NewCodecs (as table %q); pass it once", prev.Name)})
			continue
		}
		if prev, dup := c.byName[tc.Name]; dup {
			problems = append(problems, Problem{Struct: typeName(tc.Type), Field: "Name", Msg: fmt.Sprintf(
				"table %q is declared twice (also by %s); a replica has one table of a name, whatever the schema: declare it once", tc.Name, typeName(prev.Type))})
			continue
		}
		c.byName[tc.Name] = tc
		c.byType[tc.Type] = tc
		c.tables = append(c.tables, tc)
	}
	problems = append(problems, c.checkRoutes()...)
	if len(problems) > 0 {
		return nil, problems
	}
	return c, nil
}

// checkRoutes checks what can only be checked with every table known.
func (c *Set) checkRoutes() []Problem {
	var problems []Problem
	for _, tc := range c.tables {
		if tc.Sync.kind != RouteFollows {
			continue
		}
		// A Follows route needs some catalog to follow; which one is named by
		// the column's foreign key, which the server checks in its schema.
		catalogs := 0
		for _, other := range c.tables {
			if other != tc && other.Mirror == Catalog {
				catalogs++
			}
		}
		if catalogs == 0 {
			problems = append(problems, Problem{Struct: typeName(tc.Type), Field: "Sync",
				Msg: "Follows needs another catalog to follow; declare the catalog its column points at"})
		}
	}
	return problems
}

// Tables lists the declared tables in the order they were given.
func (c *Set) Tables() []*TableCodec { return c.tables }

// Table finds a table by its name (without schema).
func (c *Set) Table(name string) (*TableCodec, error) {
	if tc, ok := c.byName[name]; ok {
		return tc, nil
	}
	return nil, fmt.Errorf("%w: table %q", ErrNotDeclared, name)
}

// Of finds the table of a row (a struct value or pointer to one).
func (c *Set) Of(row any) (*TableCodec, error) {
	t := reflect.TypeOf(row)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if tc, ok := c.byType[t]; ok {
		return tc, nil
	}
	return nil, fmt.Errorf("%w: type %v; pass it to NewCodecs", ErrNotDeclared, t)
}

// TableOf finds the table of the row type T (a struct type or a pointer to
// one).
func TableOf[T any](c *Set) (*TableCodec, error) {
	var zero T
	return c.Of(zero)
}

// typeName names a row type in problems.
func typeName(t reflect.Type) string {
	if t == nil {
		return "<nil>"
	}
	return t.String()
}

// compile builds one table's codec, or says what is wrong with it.
func compile(row any, declare func(row any) Table) (*TableCodec, []Problem) {
	t := reflect.TypeOf(row)
	if t == nil {
		return nil, []Problem{{Struct: "<nil>", Msg: "a nil row; pass a value of the row type, e.g. Product{}"}}
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	name := typeName(t)
	if t.Kind() != reflect.Struct {
		return nil, []Problem{{Struct: name, Msg: "a row type must be a struct; declare SyncTable on a struct type"}}
	}
	if rv := reflect.ValueOf(row); rv.Kind() == reflect.Pointer && rv.IsNil() {
		// (*Product)(nil) names the type; its SyncTable may not take a nil
		// receiver, so ask a zero value.
		row = reflect.New(t).Interface()
	}
	p := &problems{strct: name}
	tc := &TableCodec{Table: declare(row), Type: t, OriginIndex: -1, VersionIndex: -1, CreatedIndex: -1}
	tc.collectColumns(t, nil, "", p)
	tc.checkTable(p)
	tc.checkColumns(p)
	if len(p.list) > 0 {
		return nil, p.list
	}
	return tc, nil
}

// problems gathers the problems of one struct.
type problems struct {
	strct string
	list  []Problem
}

// add records a problem with field, its message formatted.
func (p *problems) add(field, format string, args ...any) {
	p.list = append(p.list, Problem{Struct: p.strct, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// collectColumns walks the struct's fields, flattening embedded structs.
func (tc *TableCodec) collectColumns(t reflect.Type, index []int, prefix string, p *problems) {
	for i := range t.NumField() {
		f := t.Field(i)
		path := prefix + f.Name
		idx := append(slices.Clone(index), i)
		tag, tagged := f.Tag.Lookup("db")
		if tag == "-" {
			continue
		}
		if f.Anonymous && !tagged {
			ft := f.Type
			if ft.Kind() == reflect.Struct {
				if _, scalar := codecFor(ft); !scalar {
					tc.collectColumns(ft, idx, path+".", p)
					continue
				}
			}
		}
		if !f.IsExported() {
			continue
		}
		col := Column{Name: tag, Field: path, index: idx}
		if col.Name == "" {
			col.Name = strings.ToLower(f.Name)
		}
		if err := checkIdentifier(col.Name); err != nil {
			p.add(path, "column name: %v; name the column with a db tag", err)
		}
		fc, ok := codecFor(f.Type)
		if !ok {
			p.add(path, "type %v is not supported; use string, bool, an int, float64, []byte, time.Time, uuid.UUID, a pointer or sql.Null* of one of those, or a driver.Valuer with a Scan method (decimals), or skip it with db:\"-\"", f.Type)
		}
		col.codec, col.Kind, col.Nullable = fc, fc.kind, fc.nullable
		for flag := range strings.SplitSeq(f.Tag.Get("sync"), ",") {
			switch strings.TrimSpace(flag) {
			case "":
			case "key":
				col.Key = true
			case "version":
				col.Version = true
			case "created":
				col.Created = true
			case "generated":
				col.Generated = true
			case "replica_owned":
				col.ReplicaOwned = true
			case "desired":
				col.Desired = true
			default:
				p.add(path, "unknown sync flag %q; use key, version, created, generated, replica_owned or desired", flag)
			}
		}
		tc.Columns = append(tc.Columns, col)
	}
}

// column is the position of the column called name, or -1.
func (tc *TableCodec) column(name string) int {
	for i := range tc.Columns {
		if tc.Columns[i].Name == name {
			return i
		}
	}
	return -1
}

// checkTable checks the table-level declaration and fills its defaults.
func (tc *TableCodec) checkTable(p *problems) {
	switch {
	case tc.Name == "":
		p.add("Name", "no table name: set Name in SyncTable")
	case strings.HasPrefix(strings.ToLower(tc.Name), "sync_"):
		p.add("Name", "table name %q begins sync_, which is the engine's; rename the table", tc.Name)
	default:
		if err := checkIdentifier(tc.Name); err != nil {
			p.add("Name", "table name: %v; rename the table", err)
		}
	}
	if tc.Schema == "" {
		tc.Schema = "public"
	} else if err := checkIdentifier(tc.Schema); err != nil {
		p.add("Schema", "schema: %v; rename the schema", err)
	}
	switch tc.Mirror {
	case Catalog, Record, Setting:
	default:
		p.add("Mirror", "Mirror is not set: set it to magicsync.Catalog, magicsync.Record or magicsync.Setting")
	}
	if tc.Mirror == Catalog {
		if tc.Origin != "" {
			p.add("Origin", "Origin %q on a catalog: the server writes catalogs; drop Origin or make the table a Record", tc.Origin)
		}
		if tc.Sync.kind == RouteDefault {
			tc.Sync = Route{kind: RouteBroadcast}
		}
	} else if tc.Mirror != 0 {
		if tc.Origin == "" {
			p.add("Origin", "a %v needs Origin: set it to the key column holding the writing replica's id", tc.Mirror)
		}
		if tc.Sync.kind != RouteDefault {
			p.add("Sync", "Sync on a %v: only catalogs are routed (a %v goes back to the replica that wrote it); drop Sync", tc.Mirror, tc.Mirror)
		}
		if tc.Active != "" {
			p.add("Active", "Active on a %v: only catalogs have an active view; drop Active", tc.Mirror)
		}
	}
	if tc.Active != "" {
		tc.checkActive(p)
	}
	if tc.Mirror != Setting && tc.Apply != Always {
		p.add("Apply", "Apply on a %v: only settings take wishes; drop Apply", tc.Mirror)
	}
	for _, u := range tc.Unmirrored {
		if tc.column(u) >= 0 {
			p.add("Unmirrored", "Unmirrored names %q, which the struct maps; drop it from Unmirrored", u)
		} else if err := checkIdentifier(u); err != nil {
			p.add("Unmirrored", "Unmirrored: %v; fix or drop the name", err)
		}
	}
}

// checkActive checks that Active names a view, as schema.view or view,
// each part an identifier like the table's own names.
func (tc *TableCodec) checkActive(p *problems) {
	parts := strings.Split(tc.Active, ".")
	if len(parts) > 2 {
		p.add("Active", "Active %q has more than one dot; write schema.view or view", tc.Active)
		return
	}
	what := []string{"view"}
	if len(parts) == 2 {
		what = []string{"schema", "view"}
	}
	for i, part := range parts {
		if err := checkIdentifier(part); err != nil {
			p.add("Active", "Active %q: its %s: %v; write schema.view or view, naming the view that shows the rows replicas hold", tc.Active, what[i], err)
		}
	}
}

// checkColumns checks the columns' roles against each other and the table.
func (tc *TableCodec) checkColumns(p *problems) {
	seen := map[string]string{}
	for i := range tc.Columns {
		c := &tc.Columns[i]
		if prev, dup := seen[c.Name]; dup {
			p.add(c.Field, "column %q is named twice (also by %s); rename one with a db tag or skip it with db:\"-\"", c.Name, prev)
		}
		seen[c.Name] = c.Field
		if c.Version {
			if tc.VersionIndex >= 0 {
				p.add(c.Field, "a second version column (the first is %s); keep one", tc.Columns[tc.VersionIndex].Field)
			} else {
				tc.VersionIndex = i
			}
			if c.Nullable {
				p.add(c.Field, "the version column is nullable; make it a plain (non-pointer) type")
			}
		}
		if c.Created {
			if tc.CreatedIndex >= 0 {
				p.add(c.Field, "a second created column (the first is %s); keep one", tc.Columns[tc.CreatedIndex].Field)
			} else {
				tc.CreatedIndex = i
			}
		}
		if c.Generated && (c.Version || c.Created || c.Desired) {
			p.add(c.Field, "a generated column cannot also be version, created or desired: the engine would have to write it; drop one of the flags")
		}
		if c.Desired {
			if tc.Mirror != Setting && tc.Mirror != 0 {
				p.add(c.Field, "desired on a %v; only a setting's columns may be desired: drop the flag or make the table a Setting", tc.Mirror)
			}
			tc.DesiredIndex = append(tc.DesiredIndex, i)
		}
		if c.ReplicaOwned && tc.Mirror != Catalog && tc.Mirror != 0 {
			p.add(c.Field, "replica_owned on a %v; a %v is the replica's already: drop the flag", tc.Mirror, tc.Mirror)
		}
	}
	tc.checkKey(p)
	if tc.Origin != "" {
		switch i := tc.column(tc.Origin); {
		case i < 0:
			p.add("Origin", "Origin %q is no column of the struct; set Origin to the key column holding the writing replica's id", tc.Origin)
		case !tc.Columns[i].Key:
			p.add(tc.Columns[i].Field, "Origin %q is not a key column; the replica's id must be part of the key: tag it sync:\"key\" or list it in Key", tc.Origin)
		default:
			if tc.Columns[i].Kind != wire.UUID {
				p.add(tc.Columns[i].Field, "Origin %q holds a replica's id: make the field a uuid.UUID", tc.Origin)
			}
			tc.OriginIndex = i
		}
	}
	if tc.Mirror == Setting {
		if len(tc.DesiredIndex) == 0 {
			p.add("", "a setting without desired columns: tag the columns the server may wish with sync:\"desired\"")
		}
		if tc.VersionIndex < 0 {
			p.add("", "a setting without its own version column: tag one with sync:\"version\"")
		}
	}
	tc.checkRoute(p)
	tc.checkActiveReads(p)
}

// checkActiveReads checks the tables ActiveReads names, once the key is
// known: each names as many columns as the key has.
func (tc *TableCodec) checkActiveReads(p *problems) {
	if len(tc.ActiveReads) > 0 && tc.Active == "" {
		p.add("ActiveReads", "ActiveReads without Active: it lists the tables an Active view reads; name the view in Active, or drop ActiveReads")
	}
	for _, r := range tc.ActiveReads {
		parsed, err := ParseReads(r)
		if err != nil {
			p.add("ActiveReads", "ActiveReads: %v", err)
			continue
		}
		if len(parsed.Columns) != len(tc.KeyIndex) {
			p.add("ActiveReads", "ActiveReads %q names %d columns; the table's key has %d (%s): name the columns holding the key, in key order",
				r, len(parsed.Columns), len(tc.KeyIndex), strings.Join(tc.ColumnNames(tc.KeyIndex), ", "))
		}
	}
}

// checkKey fills the key from the tags or the id column when Key is empty,
// and checks each key column's roles.
func (tc *TableCodec) checkKey(p *problems) {
	if len(tc.Key) == 0 {
		for _, c := range tc.Columns {
			if c.Key {
				tc.Key = append(tc.Key, c.Name)
			}
		}
		if len(tc.Key) == 0 {
			if tc.column("id") < 0 {
				p.add("Key", "no key: tag the key fields with sync:\"key\", set Key, or have an id column")
				return
			}
			tc.Key = []string{"id"}
		}
	}
	for _, k := range tc.Key {
		i := tc.column(k)
		if i < 0 {
			p.add("Key", "key column %q is no column of the struct; name a column in Key (or tag the key fields sync:\"key\" and leave Key empty)", k)
			continue
		}
		if slices.Contains(tc.KeyIndex, i) {
			p.add(tc.Columns[i].Field, "key column %q is named twice in Key; list it once", k)
			continue
		}
		c := &tc.Columns[i]
		c.Key = true
		tc.KeyIndex = append(tc.KeyIndex, i)
		var bad []string
		for _, role := range []struct {
			is   bool
			name string
		}{{c.Nullable, "nullable"}, {c.Generated, "generated"}, {c.ReplicaOwned, "replica_owned"},
			{c.Version, "version"}, {c.Created, "created"}, {c.Desired, "desired"}} {
			if role.is {
				bad = append(bad, role.name)
			}
		}
		if len(bad) > 0 {
			p.add(c.Field, "key column %q cannot be %s; a key is set once and never NULL: drop the flag, or make the field a plain (non-pointer, non-Null) type", k, strings.Join(bad, ", "))
		}
	}
	// A field tagged sync:"key" that an explicit Key leaves out would be a
	// Column with Key set that is no part of the key.
	for i := range tc.Columns {
		if c := &tc.Columns[i]; c.Key && !slices.Contains(tc.KeyIndex, i) {
			p.add(c.Field, "column %q is tagged sync:\"key\" but Key (%s) leaves it out; list it in Key or drop the flag", c.Name, strings.Join(tc.Key, ", "))
		}
	}
}

// checkRoute checks the route's column and members, and the Retired column.
func (tc *TableCodec) checkRoute(p *problems) {
	r := tc.Sync
	switch r.kind {
	case RouteAssigned, RouteGrouped, RouteFollows:
		i := tc.column(r.column)
		if i < 0 {
			p.add("Sync", "%v names column %q, which is no column of the struct; name a column of the struct", r.kind, r.column)
			return
		}
		if r.kind == RouteAssigned && tc.Columns[i].Kind != wire.UUID {
			p.add(tc.Columns[i].Field, "Assigned(%q) needs a uuid.UUID column, as it holds the replica's id: make the field a uuid.UUID", r.column)
		}
		if r.kind == RouteGrouped {
			if _, err := ParseMembers(r.members); err != nil {
				p.add("Sync", "Grouped members: %v; write them as schema.table(replica_column, group_column)", err)
			}
		}
	}
	if tc.Retired != "" {
		i := tc.column(tc.Retired)
		switch {
		case i < 0:
			p.add("Retired", "Retired names %q, which is no column of the struct; name a bool column of the struct", tc.Retired)
		case tc.Columns[i].Kind != wire.Bool:
			p.add(tc.Columns[i].Field, "Retired column %q must be a bool: make the field a bool", tc.Retired)
		}
	}
}
