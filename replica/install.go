package replica

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/wire"
)

// schemaVersion is the version of the engine's own tables on a replica.
const schemaVersion = 3

// upgrades are the steps that bring the engine's tables of a database at
// version i+1 to version i+2; Install runs those a database lacks.
var upgrades = [][]string{
	// 2: a report of a row the replica could not take is sent again when
	// not confirmed in time, and set aside when refused for good.
	{
		"ALTER TABLE sync_rejected ADD COLUMN reported_at INTEGER",
		"ALTER TABLE sync_rejected ADD COLUMN held TEXT",
	},
	// 3: an own row the engine cannot read is set aside until it is
	// written again or deleted, and reported; so is its clearing.
	{
		"ALTER TABLE sync_pending ADD COLUMN unreadable INTEGER",
		"ALTER TABLE sync_rejected ADD COLUMN note TEXT",
		"ALTER TABLE sync_rejected ADD COLUMN cleared INTEGER NOT NULL DEFAULT 0",
	},
}

// engineTables is the DDL of the engine's own tables, every name sync_*.
var engineTables = []string{
	`CREATE TABLE IF NOT EXISTS sync_replica (
	one INTEGER PRIMARY KEY CHECK (one = 1),
	schema_version INTEGER NOT NULL,
	id TEXT,
	known INTEGER NOT NULL DEFAULT 0,
	applying INTEGER NOT NULL DEFAULT 0,
	last_applied INTEGER NOT NULL DEFAULT 0,
	reported_applied INTEGER NOT NULL DEFAULT 0,
	build TEXT NOT NULL DEFAULT '',
	digests_at INTEGER NOT NULL DEFAULT 0
)`,
	`INSERT INTO sync_replica (one, schema_version) VALUES (1, 3) ON CONFLICT (one) DO NOTHING`,
	`CREATE TABLE IF NOT EXISTS sync_lanes (
	lane TEXT PRIMARY KEY,
	next_seq INTEGER NOT NULL DEFAULT 1
)`,
	// sync_pending notes every write to the replica's own tables by key.
	// row_id is the rowid the row had when noted, NULL once it is deleted;
	// the engine reads rows by key, never by it (a rebuilt table numbers
	// its rows anew).
	// change counts writes; sent_change is the count a send carried, so a
	// row written again after it was sent is sent again.
	`CREATE TABLE IF NOT EXISTS sync_pending (
	tbl TEXT NOT NULL,
	key TEXT NOT NULL,
	row_id INTEGER,
	change INTEGER NOT NULL DEFAULT 1,
	sent_lane TEXT,
	sent_seq INTEGER,
	sent_change INTEGER,
	sent_at INTEGER,
	resent INTEGER NOT NULL DEFAULT 0,
	held TEXT,
	held_reason TEXT,
	unreadable INTEGER,
	PRIMARY KEY (tbl, key)
) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS sync_pending_sent ON sync_pending (sent_lane, sent_seq)`,
	// sync_rejected keeps the rows this replica could not take, with why.
	// reported_seq and reported_at say which message of the main lane
	// reported one, and when; filed, that the server confirmed it; held,
	// the build that set the report aside after the server refused its
	// message for good. note is the key as the note triggers wrote it, for
	// an own row the engine could not read (message 0); cleared, that the
	// row was written again or deleted since, which is reported in turn
	// and forgotten once the server confirms it.
	`CREATE TABLE IF NOT EXISTS sync_rejected (
	id INTEGER PRIMARY KEY,
	tbl TEXT NOT NULL,
	key BLOB,
	reason TEXT NOT NULL,
	message INTEGER NOT NULL,
	at INTEGER NOT NULL,
	reported_seq INTEGER,
	filed INTEGER NOT NULL DEFAULT 0,
	reported_at INTEGER,
	held TEXT,
	note TEXT,
	cleared INTEGER NOT NULL DEFAULT 0
)`,
	// sync_staged holds the parts of a provisioning until its EndSnapshot.
	`CREATE TABLE IF NOT EXISTS sync_staged (
	snapshot INTEGER NOT NULL,
	tbl TEXT NOT NULL,
	key BLOB NOT NULL,
	columns TEXT NOT NULL,
	row BLOB NOT NULL,
	message INTEGER NOT NULL,
	PRIMARY KEY (snapshot, tbl, key)
) WITHOUT ROWID`,
}

// engineTableNames are the engine's own tables, which Install may find.
var engineTableNames = []string{"sync_replica", "sync_lanes", "sync_pending", "sync_rejected", "sync_staged"}

// Install creates the engine's tables and the triggers the database lacks,
// upgrades engine tables an earlier build made, and replaces triggers that
// are out of date. It is idempotent. It refuses a database a later build
// of the engine set up, and it refuses,
// saying what to do, when a declared table or column is missing from the
// database, when a catalog's key has no unique index, or when a table of
// the host's is named sync_*.
func Install(ctx context.Context, db *sql.DB, codecs *magicsync.Codecs) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("magicsync: install: %w", err)
	}
	defer conn.Close()
	if err := checkHostSchema(ctx, conn, codecs); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("magicsync: install: %w", err)
	}
	if err := install(ctx, conn, codecs); err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return fmt.Errorf("magicsync: install: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("magicsync: install: %w", err)
	}
	return nil
}

func install(ctx context.Context, conn *sql.Conn, codecs *magicsync.Codecs) error {
	for _, stmt := range engineTables {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", firstLine(stmt), err)
		}
	}
	var version int
	if err := conn.QueryRowContext(ctx, "SELECT schema_version FROM sync_replica").Scan(&version); err != nil {
		return err
	}
	if version > schemaVersion {
		return fmt.Errorf("the engine tables are at version %d, set up by a later build; this build knows version %d: run that build", version, schemaVersion)
	}
	for ; version < schemaVersion; version++ {
		for _, stmt := range upgrades[version-1] {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("upgrading the engine tables to version %d: %s: %w", version+1, stmt, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "UPDATE sync_replica SET schema_version = ?", version+1); err != nil {
			return err
		}
	}
	existing := map[string]string{}
	rows, err := conn.QueryContext(ctx, `SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'sync\_%' ESCAPE '\'`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name, sqlText string
		if err := rows.Scan(&name, &sqlText); err != nil {
			rows.Close()
			return err
		}
		existing[name] = sqlText
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	want := triggers(codecs)
	for _, t := range want {
		if existing[t.name] == t.sql {
			continue
		}
		if _, ok := existing[t.name]; ok {
			if _, err := conn.ExecContext(ctx, "DROP TRIGGER "+magicsync.QuoteIdent(t.name)); err != nil {
				return err
			}
		}
		if _, err := conn.ExecContext(ctx, t.sql); err != nil {
			return fmt.Errorf("trigger %s: %w", t.name, err)
		}
	}
	// Triggers of tables no longer declared would refuse or note writes
	// nobody asked for.
	for name := range existing {
		if !slices.ContainsFunc(want, func(t trigger) bool { return t.name == name }) {
			if _, err := conn.ExecContext(ctx, "DROP TRIGGER "+magicsync.QuoteIdent(name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Triggers returns the DDL Install runs on a new database — engine tables
// and triggers — as text, for hosts that keep their own migrations. A
// database set up at an earlier version needs the upgrade steps the text
// lists in comments first (or Install, which runs them).
func Triggers(codecs *magicsync.Codecs) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- magicsync replica schema, version %d\n", schemaVersion)
	for i, steps := range upgrades {
		fmt.Fprintf(&b, "-- from version %d to %d:\n", i+1, i+2)
		for _, stmt := range steps {
			b.WriteString("--   " + stmt + ";\n")
		}
		fmt.Fprintf(&b, "--   UPDATE sync_replica SET schema_version = %d;\n", i+2)
	}
	for _, stmt := range engineTables {
		b.WriteString(stmt)
		b.WriteString(";\n")
	}
	for _, t := range triggers(codecs) {
		b.WriteString(t.sql)
		b.WriteString(";\n")
	}
	return b.String()
}

type trigger struct{ name, sql string }

// triggers builds the triggers of every declared table: catalogs refuse the
// host's writes once the replica knows its id, while the engine's own
// applying passes; own tables note every write by key.
func triggers(codecs *magicsync.Codecs) []trigger {
	var out []trigger
	for _, tc := range codecs.Tables() {
		q := magicsync.QuoteIdent(tc.Name)
		if tc.Mirror == magicsync.Catalog {
			refuse := fmt.Sprintf("SELECT RAISE(ABORT, '%s')", sqlString(fmt.Sprintf(
				"magicsync: %s is the server's table (a catalog) and this replica holds it read-only; write it on the server", tc.Name)))
			guard := "WHEN (SELECT known = 1 AND applying = 0 FROM sync_replica)"
			update := "UPDATE"
			if owned := ownedColumns(tc); len(owned) > 0 {
				update = "UPDATE OF " + strings.Join(quoteAll(notOwnedColumns(tc)), ", ")
			}
			for _, op := range []struct{ suffix, event string }{{"insert", "INSERT"}, {"update", update}, {"delete", "DELETE"}} {
				name := "sync_" + tc.Name + "_refuse_" + op.suffix
				out = append(out, trigger{name, fmt.Sprintf("CREATE TRIGGER %s BEFORE %s ON %s %s BEGIN %s; END",
					magicsync.QuoteIdent(name), op.event, q, guard, refuse)})
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
				magicsync.QuoteIdent("sync_"+tc.Name+"_note_insert"), q, note(keyOf("NEW"), "NEW.rowid"))},
			trigger{"sync_" + tc.Name + "_note_update", fmt.Sprintf(
				"CREATE TRIGGER %s AFTER UPDATE ON %s BEGIN "+
					"INSERT INTO sync_pending (tbl, key, row_id) SELECT '%s', %s, NULL WHERE (%s) IS NOT (%s) "+
					"ON CONFLICT (tbl, key) DO UPDATE SET row_id = NULL, change = change + 1; %s; END",
				magicsync.QuoteIdent("sync_"+tc.Name+"_note_update"), q, name, keyOf("OLD"), keyOf("OLD"), keyOf("NEW"), note(keyOf("NEW"), "NEW.rowid"))},
			trigger{"sync_" + tc.Name + "_note_delete", fmt.Sprintf("CREATE TRIGGER %s AFTER DELETE ON %s BEGIN %s; END",
				magicsync.QuoteIdent("sync_"+tc.Name+"_note_delete"), q, note(keyOf("OLD"), "NULL"))},
		)
	}
	return out
}

// notedKey is the SQL expression of the key the triggers note for a row of
// tc named rec (NEW, OLD, or the quoted table): SQLite quote() of each key
// column, joined by commas. The same row gives the same text whichever
// expression reads it, so a note can be matched with its row exactly.
func notedKey(tc *magicsync.TableCodec, rec string) string {
	parts := make([]string, len(tc.KeyIndex))
	for i, k := range tc.KeyIndex {
		parts[i] = fmt.Sprintf("quote(%s.%s)", rec, magicsync.QuoteIdent(tc.Columns[k].Name))
	}
	return strings.Join(parts, " || ',' || ")
}

func ownedColumns(tc *magicsync.TableCodec) []string {
	var out []string
	for _, c := range tc.Columns {
		if c.ReplicaOwned {
			out = append(out, c.Name)
		}
	}
	return out
}

func notOwnedColumns(tc *magicsync.TableCodec) []string {
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
		out[i] = magicsync.QuoteIdent(n)
	}
	return out
}

func sqlString(s string) string { return strings.ReplaceAll(s, "'", "''") }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// checkHostSchema says what the host's database lacks before Install
// changes anything.
func checkHostSchema(ctx context.Context, conn *sql.Conn, codecs *magicsync.Codecs) error {
	var problems []string
	rows, err := conn.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name LIKE 'sync\_%' ESCAPE '\'`)
	if err != nil {
		return fmt.Errorf("magicsync: install: %w", err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return err
		}
		if !slices.Contains(engineTableNames, name) {
			problems = append(problems, fmt.Sprintf("table %q is named sync_*, a prefix the engine keeps for its own tables: rename it", name))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, tc := range codecs.Tables() {
		ps, err := checkTable(ctx, conn, tc)
		if err != nil {
			return err
		}
		problems = append(problems, ps...)
	}
	if len(problems) > 0 {
		return fmt.Errorf("magicsync: install: the SQLite database does not fit the declarations:\n  - %s", strings.Join(problems, "\n  - "))
	}
	return nil
}

func checkTable(ctx context.Context, conn *sql.Conn, tc *magicsync.TableCodec) ([]string, error) {
	cols := map[string]bool{}
	types := map[string]string{}
	rows, err := conn.QueryContext(ctx, "SELECT name, type FROM pragma_table_xinfo(?)", tc.Name)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			rows.Close()
			return nil, err
		}
		cols[name] = true
		types[name] = typ
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return []string{fmt.Sprintf("table %q (%v) does not exist: create it before Install", tc.Name, tc.Type)}, nil
	}
	var problems []string
	for _, c := range tc.Columns {
		switch {
		case !cols[c.Name]:
			problems = append(problems, fmt.Sprintf("table %q has no column %q (%v.%s): add it", tc.Name, c.Name, tc.Type, c.Field))
		case c.Kind == wire.Decimal && affinity(types[c.Name]) != "TEXT":
			// A NUMERIC column would store "12.50" as the number 12.5: the
			// value would read back changed, and its fingerprint with it.
			problems = append(problems, fmt.Sprintf("column %q of table %q holds decimals (%v.%s) but is declared %q: declare it TEXT so they keep their spelling",
				c.Name, tc.Name, tc.Type, c.Field, types[c.Name]))
		}
	}
	if len(problems) > 0 {
		return problems, nil
	}
	unique, err := hasUniqueKey(ctx, conn, tc)
	if err != nil {
		return nil, err
	}
	if !unique {
		problems = append(problems, fmt.Sprintf("table %q has no primary key or unique index on its key (%s): add one",
			tc.Name, strings.Join(tc.ColumnNames(tc.KeyIndex), ", ")))
	}
	if tc.Mirror != magicsync.Catalog {
		var withoutRowid bool
		if err := conn.QueryRowContext(ctx, "SELECT wr FROM pragma_table_list WHERE name = ? AND schema = 'main'", tc.Name).Scan(&withoutRowid); err != nil {
			return nil, err
		}
		if withoutRowid {
			problems = append(problems, fmt.Sprintf("table %q is WITHOUT ROWID; the engine notes a %v's writes by rowid: drop WITHOUT ROWID", tc.Name, tc.Mirror))
		}
	}
	return problems, nil
}

// hasUniqueKey reports whether the table has a primary key or unique index
// on exactly its key columns, which the engine's upserts need.
func hasUniqueKey(ctx context.Context, conn *sql.Conn, tc *magicsync.TableCodec) (bool, error) {
	want := slices.Sorted(slices.Values(tc.ColumnNames(tc.KeyIndex)))
	rows, err := conn.QueryContext(ctx, `SELECT il.name, ii.name FROM pragma_index_list(?) il, pragma_index_info(il.name) ii WHERE il."unique" = 1 ORDER BY il.name`, tc.Name)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	indexes := map[string][]string{}
	for rows.Next() {
		var idx string
		var col sql.NullString
		if err := rows.Scan(&idx, &col); err != nil {
			return false, err
		}
		indexes[idx] = append(indexes[idx], col.String)
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	for _, cols := range indexes {
		slices.Sort(cols)
		if slices.Equal(cols, want) {
			return true, nil
		}
	}
	// An INTEGER PRIMARY KEY is the rowid and has no index of its own.
	if len(want) == 1 {
		var pk int
		err := conn.QueryRowContext(ctx, "SELECT pk FROM pragma_table_info(?) WHERE name = ?", tc.Name, want[0]).Scan(&pk)
		if err == nil && pk == 1 {
			return true, nil
		}
	}
	return false, nil
}

// affinity is SQLite's type affinity of a declared column type.
func affinity(declared string) string {
	t := strings.ToUpper(declared)
	switch {
	case strings.Contains(t, "INT"):
		return "INTEGER"
	case strings.Contains(t, "CHAR"), strings.Contains(t, "CLOB"), strings.Contains(t, "TEXT"):
		return "TEXT"
	case t == "" || strings.Contains(t, "BLOB"):
		return "BLOB"
	case strings.Contains(t, "REAL"), strings.Contains(t, "FLOA"), strings.Contains(t, "DOUB"):
		return "REAL"
	}
	return "NUMERIC"
}
