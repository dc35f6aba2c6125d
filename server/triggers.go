package server

import (
	"strings"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
)

// triggers.go holds the triggers the engine installs on the host's tables,
// which note changed keys in sync_touched: what each notes of which
// table, and Triggers. Their SQL is built in sqlgen.go.

// wakeChannel carries what one process's work means for the waiters of
// the others: "g:<nonce>:<ids>" (groups whose logs grew), "r:<uuid>" (a
// replica's outbox grew), "r:<nonce>:<uuid>,<uuid>..." (replicas whose plan
// a pass changed), "*" (everything); nonce names the sending process.
//
// Engines in other schemas of the database (Options.Schema) use channels of
// their own: engineSchema.wakeChannel.
const wakeChannel = "magicsync_wake"

// Labels of the touched keys that are not a table's: a replica added or
// removed, a replica's groups changed.
const (
	touchedReplicas = "@replicas"
	touchedMembers  = "@members"
)

// note is one kind of key a trigger notes of a row.
type note struct {
	label string   // sync_touched.tbl
	cols  []string // jsonb keys, column names
	as    []string // jsonb key names
	// someKey skips rows with a NULL in cols: they name no key (a row
	// of a table an Active view reads that points at no row).
	someKey bool
}

// triggerSet is everything noted of one host table.
type triggerSet struct {
	schema, table string
	notes         []note
	engine        engineSchema // where the function and sync_touched live
}

// qname is the table's quoted, qualified name.
func (ts *triggerSet) qname() string {
	return codec.QuoteIdent(ts.schema) + "." + codec.QuoteIdent(ts.table)
}

// triggerSets lists the host tables that need triggers, in a stable order.
func (m *model) triggerSets() []*triggerSet {
	var sets []*triggerSet
	get := func(schema, tbl string) *triggerSet {
		for _, s := range sets {
			if s.schema == schema && s.table == tbl {
				return s
			}
		}
		s := &triggerSet{schema: schema, table: tbl, engine: m.engine}
		sets = append(sets, s)
		return s
	}
	for _, t := range m.catalogs() {
		s := get(t.tc.Schema, t.tc.Name)
		keys := t.tc.ColumnNames(t.tc.KeyIndex)
		s.notes = append(s.notes, note{label: t.name, cols: keys, as: keys})
	}
	for _, t := range m.catalogs() {
		keys := t.tc.ColumnNames(t.tc.KeyIndex)
		for _, r := range t.reads {
			s := get(r.Schema, r.Table)
			s.notes = append(s.notes, note{label: t.name, cols: r.Columns, as: keys, someKey: true})
		}
	}
	r := get(m.replicas.schema, m.replicas.table)
	r.notes = append(r.notes, note{label: touchedReplicas, cols: []string{m.replicas.column}, as: []string{"r"}})
	for _, mb := range m.members {
		s := get(mb.Schema, mb.Table)
		dup := false
		for _, n := range s.notes {
			dup = dup || (n.label == touchedMembers && n.cols[0] == mb.Replica)
		}
		if !dup {
			s.notes = append(s.notes, note{label: touchedMembers, cols: []string{mb.Replica}, as: []string{"r"}})
		}
	}
	return sets
}

// funcSource is the current trigger function's source (pg_proc.prosrc)
// with every run of white space made one space and none at either end, so
// that a migration tool changing line endings or indentation does not make
// it look outdated. White space is ASCII's (space, tab, line feed,
// carriage return, form feed, vertical tab) and nothing else, as in
// checkSchema's regular expression: an identifier's no-break space, say,
// is kept on both sides.
func (ts *triggerSet) funcSource() string {
	body, _ := ts.body()
	return strings.Join(strings.FieldsFunc(body, asciiSpace), " ")
}

// asciiSpace reports whether r is ASCII white space.
func asciiSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\f', '\v':
		return true
	}
	return false
}

// triggerNames names the table's triggers of version hash h.
func (ts *triggerSet) triggerNames(h string) []string {
	return []string{"sync_i_" + h, "sync_u_" + h, "sync_d_" + h, "sync_t_" + h}
}

// Triggers returns the SQL that installs, or brings up to date, the
// triggers the server needs on the host's tables: on every catalog table
// (noting the keys of the rows written), on the replicas table of
// opts.Replicas (noting replicas added and removed), on every members
// table of a Grouped route (noting replicas changing group) and on every
// table an Active view reads (ActiveReads: noting the catalog keys its
// rows name, before and after). Each trigger
// notes keys in sync_touched, in the engine's schema (opts.Schema), in the
// writing transaction, and notifies the planner once per transaction; they
// are statement-level, so a bulk UPDATE costs one INSERT ... SELECT, not
// one per row. Their functions live in the engine's schema too.
//
// The SQL is idempotent and replaces triggers of earlier versions. Add it
// to the host's migrations after the tables it names exist and after
// Migrate (MigrateSchema); New refuses to start while a trigger is missing or outdated,
// printing it.
//
// It differs from DESIGN's Triggers(codecs) in taking the Options: the
// replicas table is named there.
func Triggers(codecs *magicsync.Codecs, opts Options) (string, error) {
	m, err := newModel(codecs, opts)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, ts := range m.triggerSets() {
		s, _ := ts.sql()
		b.WriteString(s)
		b.WriteString("\n")
	}
	b.WriteString(m.engine.render(dropOrphans))
	return b.String(), nil
}
