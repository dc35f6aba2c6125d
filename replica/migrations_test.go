package replica

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/magicsync/magicsync/internal/sqlitetest"
)

// engineSchema is the engine's part of a database's schema, normalised: the
// sqlite_master text of every sync_* table, index and trigger with its
// white space collapsed, and the columns of every engine table as SQLite
// reads them.
func engineSchema(t testing.TB, db *sql.DB) []string {
	t.Helper()
	var out []string
	rows, err := db.Query(`SELECT type, name, coalesce(sql, '') FROM sqlite_master WHERE name LIKE 'sync\_%' ESCAPE '\' ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var typ, name, text string
		if err := rows.Scan(&typ, &name, &text); err != nil {
			t.Fatal(err)
		}
		out = append(out, typ+" "+name+": "+strings.Join(strings.Fields(text), " "))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range engineTableNames {
		rows, err := db.Query(`SELECT cid, name, type, "notnull", coalesce(dflt_value, 'NULL'), pk, hidden FROM pragma_table_xinfo(?) ORDER BY cid`, tbl)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var cid, notNull, pk, hidden int
			var name, typ, dflt string
			if err := rows.Scan(&cid, &name, &typ, &notNull, &dflt, &pk, &hidden); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("column %s.%d %s %s notnull=%d default=%s pk=%d hidden=%d", tbl, cid, name, typ, notNull, dflt, pk, hidden))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func sameSchema(t testing.TB, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		return
	}
	have := map[string]bool{}
	for _, g := range got {
		have[g] = true
	}
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w] = true
		if !have[w] {
			t.Errorf("missing: %s", w)
		}
	}
	for _, g := range got {
		if !wanted[g] {
			t.Errorf("unexpected: %s", g)
		}
	}
	t.Fatalf("the schema differs from a new database's (%d entries, want %d)", len(got), len(want))
}

// atVersion sets up the shop's tables and the engine's as the build of
// version v left them: its steps 1..v, recorded as v.
func atVersion(t testing.TB, d sqlitetest.Driver, v int) *sql.DB {
	t.Helper()
	db := sqlitetest.Open(t, d)
	mustExec(t, db, shopSchema)
	for _, s := range steps[:v] {
		mustExec(t, db, s.SQL)
	}
	mustExec(t, db, "UPDATE sync_replica SET schema_version = ?", v)
	return db
}

func TestStepsAreNumberedFromOneWithoutAGap(t *testing.T) {
	t.Parallel()
	for i, s := range steps {
		if s.Number != i+1 || !strings.HasPrefix(s.Name, fmt.Sprintf("%03d_", i+1)) {
			t.Fatalf("step %d is %s", i+1, s.Name)
		}
	}
	if schemaVersion != len(steps) || schemaVersion < 3 {
		t.Fatalf("schemaVersion = %d with %d steps", schemaVersion, len(steps))
	}
	for _, bad := range []fstest.MapFS{
		{"migrations/001_a.sql": {}, "migrations/003_c.sql": {}},
		{"migrations/001_a.sql": {}, "migrations/001_b.sql": {}},
		{"migrations/002_b.sql": {}},
		{"migrations/one.sql": {}},
		{},
	} {
		if _, err := readSteps(bad); err == nil {
			t.Errorf("readSteps took %v", bad)
		}
	}
}

// Install brings a database of every earlier version to the shape a new
// one has: the same tables, columns, indexes and triggers.
func TestInstallUpgradesEveryEarlierVersionToTheNewestShape(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		ctx := context.Background()
		want := engineSchema(t, shopDB(t, d))
		for v := 1; v <= schemaVersion; v++ {
			t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) {
				db := atVersion(t, d, v)
				if v < schemaVersion {
					_, err := New(ctx, db, shopCodecs(t), Me(register), newRecorder(), quietSettings())
					if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("version %d", v)) || !strings.Contains(err.Error(), "replica.Install") {
						t.Fatalf("New on version %d = %v; want a refusal naming the version and Install", v, err)
					}
				}
				if err := Install(ctx, db, shopCodecs(t)); err != nil {
					t.Fatal(err)
				}
				sameSchema(t, engineSchema(t, db), want)
				if n := count(t, db, "SELECT schema_version FROM sync_replica"); n != schemaVersion {
					t.Fatalf("schema_version = %d after Install; want %d", n, schemaVersion)
				}
				// Install again changes nothing.
				if err := Install(ctx, db, shopCodecs(t)); err != nil {
					t.Fatal(err)
				}
				sameSchema(t, engineSchema(t, db), want)
				if _, err := New(ctx, db, shopCodecs(t), Me(register), newRecorder(), quietSettings()); err != nil {
					t.Fatalf("New after the upgrade: %v", err)
				}
			})
		}
	})
}

// A new database records the last step, whatever its number.
func TestInstallRecordsTheLastStep(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		if n := count(t, shopDB(t, d), "SELECT schema_version FROM sync_replica"); n != len(steps) {
			t.Fatalf("schema_version = %d; want %d, the last step", n, len(steps))
		}
	})
}

func TestInstallRefusesADatabaseALaterBuildSetUp(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := shopDB(t, d)
		later := schemaVersion + 1
		asEngine(t, db, "UPDATE sync_replica SET schema_version = ?", later)
		mustExec(t, db, "DROP TRIGGER sync_receipts_note_insert")
		before := engineSchema(t, db)
		err := Install(context.Background(), db, shopCodecs(t))
		if err == nil || !strings.Contains(err.Error(), "later build") || !strings.Contains(err.Error(), fmt.Sprintf("version %d", later)) {
			t.Fatalf("Install on version %d = %v; want a refusal", later, err)
		}
		if n := count(t, db, "SELECT schema_version FROM sync_replica"); n != later {
			t.Fatalf("a refused Install changed the version to %d", n)
		}
		sameSchema(t, engineSchema(t, db), before)
	})
}

// The text for a host's own migrations lists the steps in order, each
// recorded, then the triggers, and sets up what Install does.
func TestTriggersTextIsTheStepsThenTheTriggers(t *testing.T) {
	t.Parallel()
	text := Triggers(shopCodecs(t))
	at := -1
	for _, s := range steps {
		i := strings.Index(text, strings.TrimSpace(s.SQL))
		j := strings.Index(text, stamp(s.Number)+";")
		if i <= at || j <= i {
			t.Fatalf("step %s is not in its place in the text:\n%s", s.Name, text)
		}
		at = j
	}
	for _, tr := range triggers(shopCodecs(t)) {
		if i := strings.Index(text, tr.sql+";"); i <= at {
			t.Fatalf("trigger %s is not after the steps:\n%s", tr.name, text)
		}
	}
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := sqlitetest.Open(t, d)
		mustExec(t, db, shopSchema)
		mustExec(t, db, text)
		sameSchema(t, engineSchema(t, db), engineSchema(t, shopDB(t, d)))
		if n := count(t, db, "SELECT schema_version FROM sync_replica"); n != schemaVersion {
			t.Fatalf("schema_version = %d; want %d", n, schemaVersion)
		}
	})
}
