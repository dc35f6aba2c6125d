// Installing: the engine's numbered schema steps (embedded from
// migrations/), Install and Triggers, the triggers that note own rows'
// writes and refuse the host's writes to catalogs, the check that a
// database is installed, and the check that the host's schema fits the
// declarations.

package replica

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/migrate"
	"github.com/magicsync/magicsync/internal/wire"
)

//go:embed migrations/*.sql
var migrations embed.FS

// steps are the steps of the engine's own tables, numbered 1, 2, … in
// order: a new database runs them all, one an earlier build set up those
// after the version it records.
var steps = mustReadSteps(migrations)

// schemaVersion is the version of the engine's own tables on a replica: the
// number of the last step, which a database brought up to date records in
// sync_replica.schema_version.
var schemaVersion = steps[len(steps)-1].Number

// readSteps reads the steps of dir migrations (migrate.Read).
func readSteps(fsys fs.FS) ([]migrate.Step, error) {
	s, err := migrate.Read(fsys, "migrations")
	if err != nil {
		return nil, fmt.Errorf("magicsync/replica: %w", err)
	}
	return s, nil
}

// mustReadSteps reads the embedded steps, which are part of the build: a
// misnamed one is a bug of the build, which every test shows.
func mustReadSteps(fsys fs.FS) []migrate.Step {
	s, err := readSteps(fsys)
	if err != nil {
		panic(err)
	}
	return s
}

// stamp is the statement that records in a database that step n ran.
func stamp(n int) string {
	return fmt.Sprintf(stampFormat, n)
}

// guardedFrom is the step from which the engine's tables refuse the
// host's writes.
const guardedFrom = 6

// engineTableNames are the engine's own tables, which Install may find.
var engineTableNames = []string{"sync_replica", "sync_lanes", "sync_pending", "sync_rejected", "sync_staged", "sync_wishes", "sync_staged_wishes", "sync_retained",
	"sync_commands", "sync_staged_commands"}

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
		return fmt.Errorf("magicsync/replica: install: %w", err)
	}
	defer conn.Close()
	if err := checkHostSchema(ctx, conn, codecs); err != nil {
		return err
	}
	// Not engineWrite: the engine's tables, and the mark, may not exist
	// yet; the steps mark their own writes (sqliteSteps).
	err = immediate(ctx, conn, func() (bool, error) {
		return true, install(ctx, conn, codecs)
	})
	if err != nil {
		return fmt.Errorf("magicsync/replica: install: %w", err)
	}
	return nil
}

func install(ctx context.Context, conn *sql.Conn, codecs *magicsync.Codecs) error {
	if err := migrateTables(ctx, conn); err != nil {
		return err
	}
	existing := map[string]string{}
	rows, err := conn.QueryContext(ctx, selectEngineTriggers)
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
	replaced := map[string]bool{}
	for _, t := range want {
		if existing[t.name] == t.sql {
			continue
		}
		if _, ok := existing[t.name]; ok {
			if _, err := conn.ExecContext(ctx, dropTrigger+codec.QuoteIdent(t.name)); err != nil {
				return err
			}
			replaced[t.name] = true
		}
		if _, err := conn.ExecContext(ctx, t.sql); err != nil {
			return fmt.Errorf("trigger %s: %w", t.name, err)
		}
	}
	if err := noteCutKeys(ctx, conn, codecs, replaced); err != nil {
		return err
	}
	// Triggers of tables no longer declared would refuse or note writes
	// nobody asked for.
	for name := range existing {
		if !slices.ContainsFunc(want, func(t trigger) bool { return t.name == name }) {
			if _, err := conn.ExecContext(ctx, dropTrigger+codec.QuoteIdent(name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// noteCutKeys notes again, under their whole key, the rows of own tables
// whose note triggers were replaced (replaced names them) and whose key
// holds a text with a NUL: an earlier build's triggers noted such a row
// under a key cut at the NUL, which named no row, so that the row was
// never sent. Noted now, it goes up — to be refused by a server that
// cannot hold it, and reported so — rather than stay unseen.
func noteCutKeys(ctx context.Context, conn *sql.Conn, codecs *magicsync.Codecs, replaced map[string]bool) error {
	for _, tc := range codecs.Tables() {
		if tc.Mirror == codec.Catalog || !replaced["sync_"+tc.Name+"_note_insert"] {
			continue
		}
		q := codec.QuoteIdent(tc.Name)
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(noteCutKeysFormat, notedKey(tc, q), q, holdsNUL(tc, q)), tc.Name); err != nil {
			return fmt.Errorf("noting the rows of %q whose key holds a NUL: %w", tc.Name, err)
		}
	}
	return nil
}

// migrate runs the steps the engine's own tables lack: all of them on a
// database without them, those after the version it records on one an
// earlier build set up. Each step is recorded as it runs, in the caller's
// transaction. A database a later build set up is refused, unchanged.
func migrateTables(ctx context.Context, conn *sql.Conn) error {
	st := &sqliteSteps{conn: conn}
	_, err := migrate.Up(ctx, steps, st, false)
	var ahead *migrate.AheadError
	if errors.As(err, &ahead) {
		return fmt.Errorf("the engine tables are at version %d, set up by a later build; this build knows version %d: run that build", ahead.Done, ahead.Latest)
	}
	if err != nil {
		return fmt.Errorf("upgrading the engine tables: %w", err)
	}
	if st.guarded {
		if _, err := conn.ExecContext(ctx, unmarkWriting); err != nil {
			return err
		}
	}
	return nil
}

// sqliteSteps is the record of the engine's steps in
// sync_replica.schema_version, in Install's transaction.
type sqliteSteps struct {
	conn *sql.Conn
	// guarded is set once the steps' writes are marked the engine's: the
	// engine's tables refuse all writes but its own, from the step that
	// guards them on.
	guarded bool
}

func (s *sqliteSteps) Done(ctx context.Context) (int, error) {
	var exists int
	if err := s.conn.QueryRowContext(ctx, countReplicaTable).Scan(&exists); err != nil {
		return 0, err
	}
	if exists == 0 {
		return 0, nil
	}
	var version int
	if err := s.conn.QueryRowContext(ctx, selectSchemaVersion).Scan(&version); err != nil {
		return 0, fmt.Errorf("reading the version of the engine tables: %w", err)
	}
	return version, nil
}

func (s *sqliteSteps) Apply(ctx context.Context, st migrate.Step) error {
	if !s.guarded && st.Number > guardedFrom {
		if _, err := s.conn.ExecContext(ctx, markWriting); err != nil {
			return err
		}
		s.guarded = true
	}
	if _, err := s.conn.ExecContext(ctx, st.SQL); err != nil {
		return err
	}
	if _, err := s.conn.ExecContext(ctx, stamp(st.Number)); err != nil {
		return fmt.Errorf("recording it: %w", err)
	}
	return nil
}

// Triggers returns the DDL Install runs on a new database, as text, for
// hosts that keep their own migrations: the engine's steps in order, each
// followed by the statement recording it, then the triggers. A database
// set up at an earlier version (its sync_replica.schema_version) needs only
// the steps after that version, then the triggers; Install runs just those.
func Triggers(codecs *magicsync.Codecs) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- magicsync replica schema, version %d: steps 1 to %d, then the triggers.\n", schemaVersion, schemaVersion)
	for _, s := range steps {
		fmt.Fprintf(&b, "\n-- step %d (%s)\n", s.Number, s.Name)
		b.WriteString(strings.TrimRight(s.SQL, "\n"))
		b.WriteString("\n")
		b.WriteString(stamp(s.Number))
		b.WriteString(";\n")
	}
	b.WriteString("\n-- the triggers\n")
	for _, t := range triggers(codecs) {
		b.WriteString(t.sql)
		b.WriteString(";\n")
	}
	return b.String()
}

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
	rows, err := conn.QueryContext(ctx, selectSyncTables)
	if err != nil {
		return fmt.Errorf("magicsync/replica: install: %w", err)
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
		return fmt.Errorf("magicsync/replica: install: the SQLite database does not fit the declarations:\n  - %s", strings.Join(problems, "\n  - "))
	}
	return nil
}

func checkTable(ctx context.Context, conn *sql.Conn, tc *codec.TableCodec) ([]string, error) {
	cols := map[string]bool{}
	types := map[string]string{}
	rows, err := conn.QueryContext(ctx, selectColumnTypes, tc.Name)
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
	if tc.Mirror != codec.Catalog {
		var withoutRowid bool
		if err := conn.QueryRowContext(ctx, selectWithoutRowid, tc.Name).Scan(&withoutRowid); err != nil {
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
func hasUniqueKey(ctx context.Context, conn *sql.Conn, tc *codec.TableCodec) (bool, error) {
	want := slices.Sorted(slices.Values(tc.ColumnNames(tc.KeyIndex)))
	rows, err := conn.QueryContext(ctx, selectUniqueIndexes, tc.Name)
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
		err := conn.QueryRowContext(ctx, selectPrimaryKey, tc.Name, want[0]).Scan(&pk)
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

// checkInstalled refuses a database whose engine tables or triggers are
// missing or out of date.
func (r *Replica) checkInstalled(ctx context.Context) error {
	var version int
	err := r.db.QueryRowContext(ctx, selectSchemaVersion).Scan(&version)
	if err != nil {
		return fmt.Errorf("magicsync/replica: the database has no engine tables (%v): run replica.Install first", err)
	}
	if version != schemaVersion {
		return fmt.Errorf("magicsync/replica: the engine tables are at version %d, this build uses %d: run replica.Install", version, schemaVersion)
	}
	rows, err := r.db.QueryContext(ctx, selectEngineTriggers)
	if err != nil {
		return err
	}
	defer rows.Close()
	have := map[string]string{}
	for rows.Next() {
		var name, text string
		if err := rows.Scan(&name, &text); err != nil {
			return err
		}
		have[name] = text
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, t := range triggers(r.codecs) {
		if have[t.name] != t.sql {
			return fmt.Errorf("magicsync/replica: trigger %s is missing or out of date: run replica.Install (or apply replica.Triggers)", t.name)
		}
	}
	return nil
}
