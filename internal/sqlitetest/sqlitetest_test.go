package sqlitetest_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/sqlitetest"
)

// settings is what PRAGMAs report on one connection.
type settings struct {
	journalMode       string
	synchronous       int // 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA
	foreignKeys       int
	recursiveTriggers int
	busyTimeout       int
}

func readSettings(t *testing.T, c *sql.Conn) settings {
	t.Helper()
	ctx := t.Context()
	var s settings
	for _, q := range []struct {
		pragma string
		into   any
	}{
		{"journal_mode", &s.journalMode},
		{"synchronous", &s.synchronous},
		{"foreign_keys", &s.foreignKeys},
		{"recursive_triggers", &s.recursiveTriggers},
		{"busy_timeout", &s.busyTimeout},
	} {
		if err := c.QueryRowContext(ctx, "PRAGMA "+q.pragma).Scan(q.into); err != nil {
			t.Fatalf("PRAGMA %s: %v", q.pragma, err)
		}
	}
	s.journalMode = strings.ToLower(s.journalMode)
	return s
}

func TestDrivers(t *testing.T) {
	var names, labels []string
	for _, d := range sqlitetest.Drivers() {
		names = append(names, d.Name)
		labels = append(labels, d.Label)
	}
	if !slices.Equal(names, []string{"sqlite", "sqlite3"}) || !slices.Equal(labels, []string{"modernc", "mattn"}) {
		t.Fatalf("Drivers() = %v %v, want modernc (sqlite) then mattn (sqlite3)", names, labels)
	}
	for _, name := range names {
		if !slices.Contains(sql.Drivers(), name) {
			t.Errorf("driver %q is not registered with database/sql (registered: %v)", name, sql.Drivers())
		}
	}
}

func TestSafeDSN(t *testing.T) {
	const path = "/tmp/x/replica.db"
	for d, want := range map[sqlitetest.Driver]string{
		sqlitetest.Modernc(): "file:/tmp/x/replica.db?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)&_pragma=recursive_triggers(1)&_pragma=busy_timeout(5000)",
		sqlitetest.Mattn():   "file:/tmp/x/replica.db?_journal_mode=WAL&_synchronous=FULL&_foreign_keys=1&_recursive_triggers=1&_busy_timeout=5000",
	} {
		if got := d.DSN(path, sqlitetest.Safe()); got != want {
			t.Errorf("%s DSN:\n got %s\nwant %s", d.Label, got, want)
		}
	}
}

// TestOpenSetsEveryConnection checks the settings on two connections of the
// same pool, open at once, so the second is one database/sql opened itself.
func TestOpenSetsEveryConnection(t *testing.T) {
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := sqlitetest.Open(t, d)
		ctx := t.Context()
		c1, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close()
		c2, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		if n := db.Stats().OpenConnections; n != 2 {
			t.Fatalf("%d connections open, want 2", n)
		}
		want := settings{journalMode: "wal", synchronous: 2, foreignKeys: 1, recursiveTriggers: 1, busyTimeout: 5000}
		for i, c := range []*sql.Conn{c1, c2} {
			if got := readSettings(t, c); got != want {
				t.Errorf("connection %d: %+v, want %+v", i+1, got, want)
			}
		}
	})
}

// TestOpenPathUnsafe opens databases with the settings the replica engine
// must refuse, and checks that they are what the connections really have.
func TestOpenPathUnsafe(t *testing.T) {
	cases := []struct {
		name   string
		change func(*sqlitetest.Pragmas)
		check  func(settings) bool
	}{
		{"synchronous NORMAL", func(p *sqlitetest.Pragmas) { p.Synchronous = "NORMAL" }, func(s settings) bool { return s.synchronous == 1 }},
		{"synchronous OFF", func(p *sqlitetest.Pragmas) { p.Synchronous = "OFF" }, func(s settings) bool { return s.synchronous == 0 }},
		{"journal MEMORY", func(p *sqlitetest.Pragmas) { p.JournalMode = "MEMORY" }, func(s settings) bool { return s.journalMode == "memory" }},
		{"journal OFF", func(p *sqlitetest.Pragmas) { p.JournalMode = "OFF" }, func(s settings) bool { return s.journalMode == "off" }},
		{"journal DELETE", func(p *sqlitetest.Pragmas) { p.JournalMode = "DELETE" }, func(s settings) bool { return s.journalMode == "delete" }},
		{"no recursive triggers", func(p *sqlitetest.Pragmas) { p.RecursiveTriggers = false }, func(s settings) bool { return s.recursiveTriggers == 0 }},
		{"no foreign keys", func(p *sqlitetest.Pragmas) { p.ForeignKeys = false }, func(s settings) bool { return s.foreignKeys == 0 }},
	}
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				p := sqlitetest.Safe()
				tc.change(&p)
				db := sqlitetest.OpenPath(t, d, sqlitetest.NewPath(t), p)
				c, err := db.Conn(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if s := readSettings(t, c); !tc.check(s) {
					t.Errorf("settings %+v do not show %s", s, tc.name)
				}
			})
		}
	})
}

func TestForeignKeysEnforced(t *testing.T) {
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := sqlitetest.Open(t, d)
		ctx := t.Context()
		mustExec(t, db, `CREATE TABLE parent (id INTEGER PRIMARY KEY)`)
		mustExec(t, db, `CREATE TABLE child (id INTEGER PRIMARY KEY, parent_id INTEGER NOT NULL REFERENCES parent(id))`)
		mustExec(t, db, `INSERT INTO parent (id) VALUES (1)`)
		mustExec(t, db, `INSERT INTO child (id, parent_id) VALUES (1, 1)`)
		if _, err := db.ExecContext(ctx, `INSERT INTO child (id, parent_id) VALUES (2, 99)`); err == nil ||
			!strings.Contains(strings.ToLower(err.Error()), "foreign key") {
			t.Fatalf("inserting an orphan: err = %v, want a FOREIGN KEY constraint failure", err)
		}
	})
}

// TestRecursiveTriggers shows the setting at work: a trigger that inserts
// the next smaller number fires for its own inserts only when recursive
// triggers are on.
func TestRecursiveTriggers(t *testing.T) {
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		for _, on := range []bool{true, false} {
			p := sqlitetest.Safe()
			p.RecursiveTriggers = on
			db := sqlitetest.OpenPath(t, d, sqlitetest.NewPath(t), p)
			mustExec(t, db, `CREATE TABLE n (v INTEGER PRIMARY KEY)`)
			mustExec(t, db, `CREATE TRIGGER down AFTER INSERT ON n WHEN NEW.v > 0 BEGIN INSERT INTO n (v) VALUES (NEW.v - 1); END`)
			mustExec(t, db, `INSERT INTO n (v) VALUES (3)`)
			var count int
			if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM n`).Scan(&count); err != nil {
				t.Fatal(err)
			}
			want := 2 // 3, then 2 from the trigger, whose own insert fires nothing
			if on {
				want = 4 // 3, 2, 1, 0
			}
			if count != want {
				t.Errorf("recursive_triggers %v: %d rows, want %d", on, count, want)
			}
		}
	})
}

// TestTxLock checks that TxLock reaches the driver: an immediate transaction
// takes the write lock at BEGIN, so a second one cannot begin, while deferred
// transactions both begin.
func TestTxLock(t *testing.T) {
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		for _, mode := range []string{"immediate", "deferred"} {
			p := sqlitetest.Safe()
			p.TxLock = mode
			p.BusyTimeout = time.Millisecond // give up at once instead of waiting
			db := sqlitetest.OpenPath(t, d, sqlitetest.NewPath(t), p)
			ctx := t.Context()
			tx1, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			tx2, err := db.BeginTx(ctx, nil)
			if mode == "immediate" && err == nil {
				t.Errorf("a second immediate transaction began beside the first")
			}
			if mode == "deferred" && err != nil {
				t.Errorf("a second deferred transaction could not begin: %v", err)
			}
			if tx2 != nil {
				_ = tx2.Rollback()
			}
			_ = tx1.Rollback()
		}
	})
}

// TestDriversShareFiles writes a file with one driver and reads it with the
// other: OpenPath reopens the same database.
func TestDriversShareFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared name with spaces?.db")
	w := sqlitetest.OpenPath(t, sqlitetest.Modernc(), path, sqlitetest.Safe())
	mustExec(t, w, `CREATE TABLE t (v TEXT)`)
	mustExec(t, w, `INSERT INTO t (v) VALUES ('written by modernc')`)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r := sqlitetest.OpenPath(t, sqlitetest.Mattn(), path, sqlitetest.Safe())
	var v string
	if err := r.QueryRowContext(t.Context(), `SELECT v FROM t`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != "written by modernc" {
		t.Fatalf("read %q", v)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.db")); len(m) != 1 || m[0] != path {
		t.Fatalf("database files %q, want just %q", m, path)
	}
}

func TestForEachRunsEveryDriver(t *testing.T) {
	var ran []string
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		ran = append(ran, d.Label)
		if !strings.HasSuffix(t.Name(), "/"+d.Label) {
			t.Errorf("subtest %q is not named after driver %s", t.Name(), d.Label)
		}
	})
	if !slices.Equal(ran, []string{"modernc", "mattn"}) {
		t.Fatalf("ForEach ran %v", ran)
	}
}

func mustExec(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}
