package replica

import (
	"fmt"
	"strings"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// sqlgen.go builds the SQL generated for the host's tables, from their
// declarations: the triggers that note an own table's writes and refuse
// the host's writes to catalogs (and to the engine's own tables), the
// statements that read, upsert and delete rows by key, and the tables
// CreateTables makes. The engine's fixed statements are in queries.go.

type trigger struct{ name, sql string }

// triggers builds the triggers of every declared table: catalogs refuse the
// host's writes once the replica knows its id, while the engine's own
// applying passes; own tables note every write by key. Then those of the
// engine's own tables, which refuse the host's writes (guardTriggers).
func triggers(codecs *magicsync.Codecs) []trigger {
	out := guardTriggers()
	for _, tc := range codecs.Tables() {
		q := codec.QuoteIdent(tc.Name)
		if tc.Mirror == codec.Catalog {
			refuse := fmt.Sprintf("SELECT RAISE(ABORT, '%s')", sqlString(fmt.Sprintf(
				"magicsync/replica: %s is the server's table (a catalog) and this replica holds it read-only; write it on the server", tc.Name)))
			guard := "WHEN (SELECT known = 1 AND applying = 0 FROM sync_replica)"
			update := "UPDATE"
			if owned := ownedColumns(tc); len(owned) > 0 {
				update = "UPDATE OF " + strings.Join(quoteAll(notOwnedColumns(tc)), ", ")
			}
			for _, op := range []struct{ suffix, event string }{{"insert", "INSERT"}, {"update", update}, {"delete", "DELETE"}} {
				name := "sync_" + tc.Name + "_refuse_" + op.suffix
				out = append(out, trigger{name, fmt.Sprintf("CREATE TRIGGER %s BEFORE %s ON %s %s BEGIN %s; END",
					codec.QuoteIdent(name), op.event, q, guard, refuse)})
			}
			continue
		}
		keyOf := func(rec string) string { return notedKey(tc, rec) }
		name := sqlString(tc.Name)
		note := func(key, rowID string) string {
			return fmt.Sprintf("INSERT INTO sync_pending (tbl, key, row_id) VALUES ('%s', %s, %s) "+
				"ON CONFLICT (tbl, key) DO UPDATE SET row_id = excluded.row_id, change = change + 1", name, key, rowID)
		}
		out = append(out,
			trigger{"sync_" + tc.Name + "_note_insert", fmt.Sprintf("CREATE TRIGGER %s AFTER INSERT ON %s BEGIN %s; END",
				codec.QuoteIdent("sync_"+tc.Name+"_note_insert"), q, note(keyOf("NEW"), "NEW.rowid"))},
			trigger{"sync_" + tc.Name + "_note_update", fmt.Sprintf(
				"CREATE TRIGGER %s AFTER UPDATE ON %s BEGIN "+
					"INSERT INTO sync_pending (tbl, key, row_id) SELECT '%s', %s, NULL WHERE (%s) IS NOT (%s) "+
					"ON CONFLICT (tbl, key) DO UPDATE SET row_id = NULL, change = change + 1; %s; END",
				codec.QuoteIdent("sync_"+tc.Name+"_note_update"), q, name, keyOf("OLD"), keyOf("OLD"), keyOf("NEW"), note(keyOf("NEW"), "NEW.rowid"))},
			trigger{"sync_" + tc.Name + "_note_delete", fmt.Sprintf("CREATE TRIGGER %s AFTER DELETE ON %s BEGIN %s; END",
				codec.QuoteIdent("sync_"+tc.Name+"_note_delete"), q, note(keyOf("OLD"), "NULL"))},
		)
	}
	return out
}

// notedKey is the SQL expression of the key the triggers note for a row of
// tc named rec (NEW, OLD, or the quoted table): each key column's value
// as notedValue writes it, joined by commas. The same row gives the same
// text whichever expression reads it, so a note can be matched with its
// row exactly.
func notedKey(tc *codec.TableCodec, rec string) string {
	parts := make([]string, len(tc.KeyIndex))
	for i, k := range tc.KeyIndex {
		parts[i] = notedValue(rec + "." + codec.QuoteIdent(tc.Columns[k].Name))
	}
	return strings.Join(parts, " || ',' || ")
}

// notedValue is the SQL expression of one key value in a note: SQLite's
// quote() of it, but for a text holding a NUL, which quote() cuts at the
// NUL — 'foot' for 'foot'||char(0)||'er', naming another row or none —
// and which is noted as T followed by the quote() of its bytes as a blob
// (TX'666f6f74006572'). Every other value is noted as quote() has it, so
// the notes an earlier build wrote still name their rows.
func notedValue(e string) string {
	return fmt.Sprintf("CASE WHEN typeof(%[1]s) = 'text' AND instr(CAST(%[1]s AS BLOB), X'00') > 0 "+
		"THEN 'T' || quote(CAST(%[1]s AS BLOB)) ELSE quote(%[1]s) END", e)
}

// holdsNUL is the SQL condition that a key column of the row named rec
// holds a text with a NUL: a row an earlier build's triggers noted under
// a key cut at the NUL.
func holdsNUL(tc *codec.TableCodec, rec string) string {
	parts := make([]string, len(tc.KeyIndex))
	for i, k := range tc.KeyIndex {
		e := rec + "." + codec.QuoteIdent(tc.Columns[k].Name)
		parts[i] = fmt.Sprintf("(typeof(%[1]s) = 'text' AND instr(CAST(%[1]s AS BLOB), X'00') > 0)", e)
	}
	return strings.Join(parts, " OR ")
}

func ownedColumns(tc *codec.TableCodec) []string {
	var out []string
	for _, c := range tc.Columns {
		if c.ReplicaOwned {
			out = append(out, c.Name)
		}
	}
	return out
}

func notOwnedColumns(tc *codec.TableCodec) []string {
	var out []string
	for _, c := range tc.Columns {
		if !c.ReplicaOwned && !c.Generated {
			out = append(out, c.Name)
		}
	}
	return out
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = codec.QuoteIdent(n)
	}
	return out
}

func sqlString(s string) string { return strings.ReplaceAll(s, "'", "''") }

// keyExpr is the SQL expression the note triggers use for a row's key,
// over columns qualified by prefix (or bound parameters when prefix is "?":
// each bound once, in key order).
func keyExpr(tc *codec.TableCodec, prefix string) string {
	parts := make([]string, len(tc.KeyIndex))
	for i, k := range tc.KeyIndex {
		if prefix == "?" {
			parts[i] = "(SELECT " + notedValue("v") + " FROM (SELECT ? AS v))"
			continue
		}
		parts[i] = notedValue(prefix + codec.QuoteIdent(tc.Columns[k].Name))
	}
	return strings.Join(parts, " || ',' || ")
}

// notOwnTable is true for a note of a table that is no own table of the
// file: one missing, or a catalog (which carries the triggers refusing the
// host's writes). It reads the file, not the declarations, so that every
// build installs the same guards.
const notOwnTable = "(NOT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = NEW.tbl) " +
	"OR EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'sync_' || NEW.tbl || '_refuse_insert'))"

// pendingColumns are the columns of sync_pending the note triggers leave
// alone: the host's writes to its own tables set row_id and change only.
var pendingColumns = []string{"tbl", "key", "sent_lane", "sent_seq", "sent_change", "sent_at", "resent", "held", "held_reason", "unreadable"}

// guardTriggers builds the triggers that refuse the host's writes to the
// engine's own tables. sync_pending takes the notes the triggers of own
// tables write on the host's writes (a new note, or change counted up on
// one held), and nothing else; sync_replica takes the engine's mark.
//
// The guards name no declared table, so that they are the same for every
// build: a build that declares other tables starts over the same file
// without installing them anew (a note of a table no build declares is
// only ever reported, never filed).
func guardTriggers() []trigger {
	var out []trigger
	for _, tbl := range engineTableNames {
		refuse := fmt.Sprintf("SELECT RAISE(ABORT, '%s')", sqlString(fmt.Sprintf(
			"magicsync/replica: %s is the engine's own table: the engine writes it, and refuses the host's writes to it; read it, or use the replica's API (Status, Inspect, ReleaseBacklog)", tbl)))
		when := map[string]string{"insert": "NOT " + engineWriting, "update": "NOT " + engineWriting, "delete": "NOT " + engineWriting}
		update := "UPDATE"
		switch tbl {
		case "sync_replica":
			// The engine's mark is itself an update of sync_replica.
			when["update"] = "OLD.writing = 0 AND NEW.writing = 0 AND OLD.applying = 0 AND NEW.applying = 0"
		case "sync_pending":
			when["insert"] = "(NEW.change <> 1 OR NEW.sent_lane IS NOT NULL OR NEW.sent_seq IS NOT NULL OR NEW.sent_change IS NOT NULL " +
				"OR NEW.sent_at IS NOT NULL OR NEW.resent <> 0 OR NEW.held IS NOT NULL OR NEW.held_reason IS NOT NULL " +
				"OR NEW.unreadable IS NOT NULL OR " + notOwnTable + ") AND " + when["insert"]
			update = "UPDATE OF " + strings.Join(pendingColumns, ", ")
		}
		for _, op := range []struct{ suffix, event string }{{"insert", "INSERT"}, {"update", update}, {"delete", "DELETE"}} {
			name := "sync_guard_" + tbl + "_" + op.suffix
			out = append(out, trigger{name, fmt.Sprintf("CREATE TRIGGER %s BEFORE %s ON %s WHEN %s BEGIN %s; END",
				codec.QuoteIdent(name), op.event, tbl, when[op.suffix], refuse)})
		}
	}
	return out
}

// valuesList is n lists of columns placeholders: "(?, ?), (?, ?)".
func valuesList(n, columns int) string {
	one := "(" + placeholders(columns) + ")"
	return strings.TrimSuffix(strings.Repeat(one+", ", n), ", ")
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func keyWhere(tc *codec.TableCodec) string {
	parts := make([]string, len(tc.KeyIndex))
	for i, k := range tc.KeyIndex {
		parts[i] = codec.QuoteIdent(tc.Columns[k].Name) + " = ?"
	}
	return strings.Join(parts, " AND ")
}

// deleteByKey is the statement deleting a row of tc by key (keyWhere).
func deleteByKey(tc *codec.TableCodec) string {
	return fmt.Sprintf("DELETE FROM %s WHERE %s", codec.QuoteIdent(tc.Name), keyWhere(tc))
}

// upsertRows returns the statement upserting n rows of tc's columns
// cols, in their order: an insert whose conflict on the key updates the
// columns neither key nor Created (or does nothing when there are none).
func upsertRows(tc *codec.TableCodec, cols []codec.Column) func(n int) string {
	names := make([]string, len(cols))
	var set []string
	for i, c := range cols {
		names[i] = codec.QuoteIdent(c.Name)
		if !c.Key && !c.Created {
			set = append(set, names[i]+" = excluded."+names[i])
		}
	}
	conflict := "DO NOTHING"
	if len(set) > 0 {
		conflict = "DO UPDATE SET " + strings.Join(set, ", ")
	}
	head := fmt.Sprintf("INSERT INTO %s (%s) VALUES ", codec.QuoteIdent(tc.Name), strings.Join(names, ", "))
	tail := fmt.Sprintf(" ON CONFLICT (%s) %s", strings.Join(quoteAll(tc.ColumnNames(tc.KeyIndex)), ", "), conflict)
	return func(n int) string {
		return head + valuesList(n, len(names)) + tail
	}
}

// markRetiredByKey is the statement marking a row of tc retired, by key
// (keyWhere).
func markRetiredByKey(tc *codec.TableCodec) string {
	return fmt.Sprintf("UPDATE %s SET %s = 1 WHERE %s", codec.QuoteIdent(tc.Name), codec.QuoteIdent(tc.Retired), keyWhere(tc))
}

// selectRetiredByKey is the statement reading whether a row of tc is
// marked retired, by key (keyWhere).
func selectRetiredByKey(tc *codec.TableCodec) string {
	return fmt.Sprintf("SELECT coalesce(%s, 0) <> 0 FROM %s WHERE %s", codec.QuoteIdent(tc.Retired), codec.QuoteIdent(tc.Name), keyWhere(tc))
}

// referencedQuery is the query saying whether a row of tc, bound by key
// (keyWhere), is pointed at by a row of refs' tables: "" when refs is
// empty. A row of tc's own table pointing at itself does not count.
func referencedQuery(tc *codec.TableCodec, refs []fkReference) string {
	if len(refs) == 0 {
		return ""
	}
	var same []string
	for _, k := range tc.KeyIndex {
		n := codec.QuoteIdent(tc.Columns[k].Name)
		same = append(same, "c."+n+" IS p."+n)
	}
	parts := make([]string, len(refs))
	for i, ref := range refs {
		on := make([]string, len(ref.from))
		for j := range ref.from {
			on[j] = "c." + codec.QuoteIdent(ref.from[j]) + " = p." + codec.QuoteIdent(ref.to[j])
		}
		if strings.EqualFold(ref.child, tc.Name) {
			on = append(on, "NOT ("+strings.Join(same, " AND ")+")")
		}
		parts[i] = fmt.Sprintf("EXISTS (SELECT 1 FROM %s c WHERE %s)", codec.QuoteIdent(ref.child), strings.Join(on, " AND "))
	}
	return fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s p WHERE %s AND (%s))",
		codec.QuoteIdent(tc.Name), keyWhere(tc), strings.Join(parts, " OR "))
}

// selectByKeys returns the statement reading tc's columns cols of n rows
// by key: WHERE key IN (?, …), or (k1, k2) IN (VALUES (?, ?), …).
func selectByKeys(tc *codec.TableCodec, cols []int) func(n int) string {
	nk := len(tc.KeyIndex)
	keyCols := strings.Join(quoteAll(tc.ColumnNames(tc.KeyIndex)), ", ")
	row := "?"
	if nk > 1 {
		keyCols = "(" + keyCols + ")"
		row = "(" + placeholders(nk) + ")"
	}
	head := fmt.Sprintf("SELECT %s FROM %s WHERE %s IN (", strings.Join(quoteAll(tc.ColumnNames(cols)), ", "), codec.QuoteIdent(tc.Name), keyCols)
	return func(n int) string {
		list := strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
		if nk > 1 {
			list = "VALUES " + list
		}
		return head + list + ")"
	}
}

// selectByKey is the statement reading every column of a row of tc, by
// key (keyWhere).
func selectByKey(tc *codec.TableCodec) string {
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s", strings.Join(quoteAll(tc.ColumnNames(nil)), ", "), codec.QuoteIdent(tc.Name), keyWhere(tc))
}

// countByKey is the statement counting the rows of tc of a key (keyWhere).
func countByKey(tc *codec.TableCodec) string {
	return fmt.Sprintf("SELECT count(*) FROM %s WHERE %s", codec.QuoteIdent(tc.Name), keyWhere(tc))
}

// updateByKey is the statement setting columns cols (by index) of a row
// of tc, by key: their values bound first, then the key's (keyWhere).
func updateByKey(tc *codec.TableCodec, cols []int) string {
	set := make([]string, len(cols))
	for i, c := range cols {
		set[i] = codec.QuoteIdent(tc.Columns[c].Name) + " = ?"
	}
	return fmt.Sprintf("UPDATE %s SET %s WHERE %s", codec.QuoteIdent(tc.Name), strings.Join(set, ", "), keyWhere(tc))
}

// selectColumns is the statement reading tc's columns cols (by index) of
// every row; the caller may add a WHERE.
func selectColumns(tc *codec.TableCodec, cols []int) string {
	return fmt.Sprintf("SELECT %s FROM %s", strings.Join(quoteAll(tc.ColumnNames(cols)), ", "), codec.QuoteIdent(tc.Name))
}

// anyRow is the statement reading whether tc holds any row.
func anyRow(tc *codec.TableCodec) string {
	return "SELECT EXISTS (SELECT 1 FROM " + codec.QuoteIdent(tc.Name) + ")"
}

// selectKeysPage is the statement reading a page of tc's keys in key
// order: the first page, or, after, the page after the key bound.
func selectKeysPage(tc *codec.TableCodec, after bool, page int) string {
	keyCols := strings.Join(quoteAll(tc.ColumnNames(tc.KeyIndex)), ", ")
	q := fmt.Sprintf("SELECT %s FROM %s", keyCols, codec.QuoteIdent(tc.Name))
	if after {
		q += fmt.Sprintf(" WHERE (%s) > (%s)", keyCols, placeholders(len(tc.KeyIndex)))
	}
	return q + fmt.Sprintf(" ORDER BY %s LIMIT %d", keyCols, page)
}

// selectAtRowid is the statement reading columns (quoted already) of
// table's row by rowid.
func selectAtRowid(table string, columns []string) string {
	return fmt.Sprintf("SELECT %s FROM %s WHERE rowid = ?", strings.Join(columns, ", "), codec.QuoteIdent(table))
}

// sqliteTypes are the column types a table CreateTables makes gives each
// kind: those the drivers read the kind back from.
var sqliteTypes = map[codec.ValueKind]string{
	wire.UUID: "TEXT", wire.Text: "TEXT", wire.Decimal: "TEXT",
	wire.Int: "INTEGER", wire.Bool: "INTEGER", wire.Float: "REAL",
	wire.Bytes: "BLOB", wire.Time: "TIMESTAMP",
}

// createTableSQL is the CREATE TABLE of tc, with the foreign keys fks
// whose columns and referenced table this build declares.
func createTableSQL(tc *codec.TableCodec, fks []*syncpb.ForeignKey, codecs *magicsync.Codecs) string {
	var lines []string
	has := map[string]bool{}
	for _, c := range tc.Columns {
		has[c.Name] = true
		line := codec.QuoteIdent(c.Name) + " " + sqliteTypes[c.Kind]
		if !c.Nullable && !c.ReplicaOwned {
			line += " NOT NULL"
		}
		lines = append(lines, line)
	}
	key := tc.ColumnNames(tc.KeyIndex)
	lines = append(lines, "PRIMARY KEY ("+strings.Join(quoteAll(key), ", ")+")")
	for _, fk := range fks {
		if !referencesDeclared(fk, has, codecs) {
			continue
		}
		lines = append(lines, "FOREIGN KEY ("+strings.Join(quoteAll(fk.Columns), ", ")+") REFERENCES "+codec.QuoteIdent(fk.Table)+" ("+strings.Join(quoteAll(fk.References), ", ")+")")
	}
	return "CREATE TABLE " + codec.QuoteIdent(tc.Name) + " (\n\t" + strings.Join(lines, ",\n\t") + "\n)"
}

// createIndexSQL is the statement that indexes a foreign key's columns.
func createIndexSQL(ref fkReference) string {
	name := codec.QuoteIdent(ref.child + "_" + strings.Join(ref.from, "_"))
	return fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON %s (%s)", name, codec.QuoteIdent(ref.child), strings.Join(quoteAll(ref.from), ", "))
}
