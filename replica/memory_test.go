package replica

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
)

// openInMemory opens a database held in memory with the settings p, and
// keeps it until the test ends: a pool of one connection, beside another
// that holds the database while the pool replaces its own (a connection
// whose transaction was cut short is closed, and a database in memory
// goes with its last connection).
func openInMemory(t *testing.T, d sqlitetest.Driver, p sqlitetest.Pragmas) *sql.DB {
	t.Helper()
	_, params, _ := strings.Cut(d.DSN("unused", p), "?")
	name := "mem-" + strings.ReplaceAll(uuid.NewString(), "-", "")
	dsn := "file:" + name + "?mode=memory&cache=shared&" + params
	open := func() *sql.DB {
		db, err := sql.Open(d.Name, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		// One connection: a shared cache's table locks cannot come
		// between two of them.
		db.SetMaxOpenConns(1)
		if err := db.Ping(); err != nil {
			t.Fatal(err)
		}
		return db
	}
	open() // the keeper, closed last
	return open()
}

// Seed 002 refuses a journal that cannot roll back — journal_mode OFF or
// MEMORY — "of a database with a file; one in memory has no crash to
// survive". A database in memory, whose journal is in memory (whatever
// the DSN asks but OFF), is taken by New and by Receive: a message applies
// whole, its bad row left out, and one that fails before its commit
// leaves nothing. The same journal on a file is refused, naming
// journal_mode.
func TestAnInMemoryDatabaseIsExemptFromTheJournalCheck(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		for _, journal := range []string{"", "MEMORY", "WAL"} {
			name := journal
			if name == "" {
				name = "default"
			}
			t.Run("journal "+name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				p := sqlitetest.Safe()
				p.JournalMode = journal
				db := openInMemory(t, d, p)
				var mode string
				if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
					t.Fatal(err)
				}
				if !strings.EqualFold(mode, "memory") {
					t.Fatalf("an in-memory database's journal is %q; want memory", mode)
				}
				mustExec(t, db, shopSchema)
				if err := Install(ctx, db, shopCodecs(t)); err != nil {
					t.Fatal(err)
				}
				r, err := New(ctx, db, shopCodecs(t), Me(register), newRecorder(), quietSettings())
				if err != nil {
					t.Fatalf("New refused an in-memory database: %v", err)
				}
				defer r.Close()
				b := builder{t, r.codecs}
				bad := product(2, -1) // the CHECK refuses a negative price
				got, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(product(1, 100), bad, product(3, 300))))
				if err != nil {
					t.Fatalf("Receive refused an in-memory database: %v", err)
				}
				if got.Rejected != 1 {
					t.Errorf("%d rows left out; want the one the CHECK refuses", got.Rejected)
				}
				if n := count(t, db, "SELECT count(*) FROM products"); n != 2 {
					t.Errorf("%d products; want the 2 good ones of the message", n)
				}
				if n := count(t, db, "SELECT last_applied FROM sync_replica"); n != 1 {
					t.Errorf("last applied %d; want 1", n)
				}
				// A message that fails before its commit leaves nothing: the
				// journal in memory rolls it back.
				failing, cancel := context.WithCancel(ctx)
				r.beforeCommit = func(context.Context) error { cancel(); return context.Canceled }
				if _, err := r.Endpoint().Receive(failing, b.down(2, b.upserts(product(1, 999), product(4, 400)))); err == nil {
					t.Fatal("Receive returned nil though the commit never happened")
				}
				r.beforeCommit = nil
				if n := count(t, db, "SELECT count(*) FROM products"); n != 2 {
					t.Errorf("a message that failed before its commit left %d products; want the 2 there were", n)
				}
				if n := count(t, db, "SELECT price_cents FROM products WHERE id = ?", product(1, 0).ID); n != 100 {
					t.Errorf("a message that failed before its commit changed a price to %d", n)
				}
			})
		}
		t.Run("the same journal on a file", func(t *testing.T) {
			t.Parallel()
			path := sqlitetest.NewPath(t)
			shopDBAt(t, d, path).Close()
			p := sqlitetest.Safe()
			p.JournalMode = "MEMORY"
			db := sqlitetest.OpenPath(t, d, path, p)
			_, err := New(context.Background(), db, shopCodecs(t), Me(register), newRecorder(), quietSettings())
			if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "journal_mode is MEMORY on a database file") {
				t.Fatalf("New on a file with journal_mode MEMORY = %v; want ErrUnsafe naming journal_mode", err)
			}
		})
	})
}

// journal_mode OFF cannot roll back at all, in memory too: SQLite's
// ROLLBACK is then undefined, and a message that failed before its commit
// stayed applied in part. New refuses it, in memory as on a file, saying
// what to use instead.
func TestJournalOffIsRefusedInMemoryToo(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		ctx := context.Background()
		p := sqlitetest.Safe()
		p.JournalMode = "OFF"
		db := openInMemory(t, d, p)
		mustExec(t, db, shopSchema)
		if err := Install(ctx, db, shopCodecs(t)); err != nil {
			t.Fatal(err)
		}
		_, err := New(ctx, db, shopCodecs(t), Me(register), newRecorder(), quietSettings())
		if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "journal_mode is OFF") || !strings.Contains(err.Error(), "MEMORY") {
			t.Fatalf("New in memory with journal_mode OFF = %v; want ErrUnsafe naming journal_mode, and MEMORY to use instead", err)
		}
		// And so does Receive, on a connection set OFF after New took it.
		safe := openInMemory(t, d, sqlitetest.Safe())
		mustExec(t, safe, shopSchema)
		if err := Install(ctx, safe, shopCodecs(t)); err != nil {
			t.Fatal(err)
		}
		r, err := New(ctx, safe, shopCodecs(t), Me(register), newRecorder(), quietSettings())
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		mustExec(t, safe, "PRAGMA journal_mode = OFF")
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(product(1, 100)))); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "journal_mode is OFF") {
			t.Fatalf("Receive with journal_mode OFF = %v; want ErrUnsafe naming journal_mode", err)
		}
		if n := count(t, safe, "SELECT count(*) FROM products"); n != 0 {
			t.Fatalf("a refused message was applied: %d products", n)
		}
	})
}
