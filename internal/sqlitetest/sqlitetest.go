// Package sqlitetest opens SQLite databases for tests, through either of the
// drivers the replica engine is tested on: modernc.org/sqlite (pure Go,
// driver name "sqlite", the default) and github.com/mattn/go-sqlite3 (cgo,
// driver name "sqlite3").
//
// Connection settings go in the DSN, never in a statement run after opening,
// because database/sql opens connections whenever it likes and each one must
// have them. [Safe] is what the replica engine requires; tests that check the
// engine refuses less build other [Pragmas]:
//
//	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
//		db := sqlitetest.Open(t, d) // WAL, synchronous FULL, foreign keys, recursive triggers
//		p := sqlitetest.Safe()
//		p.Synchronous = "NORMAL"
//		unsafe := sqlitetest.OpenPath(t, d, sqlitetest.NewPath(t), p)
//		...
//	})
package sqlitetest

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // registers "sqlite3"
	_ "modernc.org/sqlite"          // registers "sqlite"
)

// Pragmas are the connection settings a DSN gives every connection of a pool.
type Pragmas struct {
	// JournalMode is PRAGMA journal_mode: "WAL", "DELETE", "TRUNCATE",
	// "PERSIST", "MEMORY" or "OFF"; empty leaves SQLite's default (DELETE).
	JournalMode string
	// Synchronous is PRAGMA synchronous: "OFF", "NORMAL", "FULL" or
	// "EXTRA"; empty leaves the default.
	Synchronous string
	// ForeignKeys is PRAGMA foreign_keys.
	ForeignKeys bool
	// RecursiveTriggers is PRAGMA recursive_triggers.
	RecursiveTriggers bool
	// BusyTimeout is PRAGMA busy_timeout, in whole milliseconds; zero leaves
	// the driver's default (modernc: none; mattn: 5 s).
	BusyTimeout time.Duration
	// TxLock is how the driver begins transactions: "deferred",
	// "immediate" or "exclusive"; empty leaves the default (deferred).
	TxLock string
}

// Safe returns the settings the replica engine requires: WAL, synchronous
// FULL, foreign keys and recursive triggers on, and a busy timeout of 5 s.
func Safe() Pragmas {
	return Pragmas{
		JournalMode:       "WAL",
		Synchronous:       "FULL",
		ForeignKeys:       true,
		RecursiveTriggers: true,
		BusyTimeout:       5 * time.Second,
	}
}

// Driver is a database/sql driver for SQLite.
type Driver struct {
	// Name is the name the driver registered with database/sql: "sqlite"
	// for modernc.org/sqlite, "sqlite3" for github.com/mattn/go-sqlite3.
	Name string
	// Label is a short name for subtests and messages: "modernc" or "mattn".
	Label string
}

// Modernc returns modernc.org/sqlite, the pure Go driver.
func Modernc() Driver { return Driver{Name: "sqlite", Label: "modernc"} }

// Mattn returns github.com/mattn/go-sqlite3, the cgo driver.
func Mattn() Driver { return Driver{Name: "sqlite3", Label: "mattn"} }

// Drivers returns every driver tests run on, the default (modernc) first.
func Drivers() []Driver { return []Driver{Modernc(), Mattn()} }

// DSN returns the data source name that opens the file at path with the
// settings p on every connection. The values of p are written as they are:
// they are keywords and numbers, which need no escaping.
func (d Driver) DSN(path string, p Pragmas) string {
	// mattn takes each setting as a parameter of its own (_journal_mode=…),
	// modernc as a PRAGMA run on each connection (_pragma=journal_mode(…));
	// both take _txlock as it is.
	q := make([]string, 0, 6)
	set := func(name, value string) { q = append(q, "_pragma="+name+"("+value+")") }
	if d.Name == "sqlite3" {
		set = func(name, value string) { q = append(q, "_"+name+"="+value) }
	}
	if p.JournalMode != "" {
		set("journal_mode", p.JournalMode)
	}
	if p.Synchronous != "" {
		set("synchronous", p.Synchronous)
	}
	set("foreign_keys", bit(p.ForeignKeys))
	set("recursive_triggers", bit(p.RecursiveTriggers))
	if p.BusyTimeout > 0 {
		set("busy_timeout", strconv.FormatInt(p.BusyTimeout.Milliseconds(), 10))
	}
	if p.TxLock != "" {
		q = append(q, "_txlock="+p.TxLock)
	}
	// A file: URI, so that both drivers keep the parameters apart from the
	// path; the path is escaped for '?', '#', '%' and spaces.
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + strings.Join(q, "&")
}

func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// NewPath returns the path of a database file, not yet created, in a
// directory of the test's own that is removed when the test ends.
func NewPath(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "replica.db")
}

// Open opens a new database file with [Safe] settings, closed when the test
// ends.
func Open(t testing.TB, d Driver) *sql.DB {
	t.Helper()
	return OpenPath(t, d, NewPath(t), Safe())
}

// OpenPath opens the database file at path (created when missing) with the
// settings p, checks that a connection opens, and closes the pool when the
// test ends. Opening the same path again, with either driver, reopens the
// same database.
func OpenPath(t testing.TB, d Driver, path string, p Pragmas) *sql.DB {
	t.Helper()
	db, err := sql.Open(d.Name, d.DSN(path, p))
	if err != nil {
		t.Fatalf("sqlitetest: opening %s with %s: %v", path, d.Label, err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("sqlitetest: closing %s: %v", path, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("sqlitetest: opening %s with %s: %v", path, d.Label, err)
	}
	return db
}

// ForEach runs f as a subtest for each driver of [Drivers], named by the
// driver's Label.
func ForEach(t *testing.T, f func(t *testing.T, d Driver)) {
	t.Helper()
	for _, d := range Drivers() {
		t.Run(d.Label, func(t *testing.T) { f(t, d) })
	}
}
