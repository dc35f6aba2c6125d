package replica

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/magicsync/magicsync/internal/sqlitetest"
)

// DSN opens a file, on either driver, whose every pooled connection has
// what New requires and what the engine counts on beside: WAL, synchronous
// FULL, recursive triggers, foreign keys and a busy timeout of 5 s — in a
// path with characters a URI escapes.
func TestDSNGivesEveryConnectionTheSettingsTheEngineRequires(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		ctx := context.Background()
		path := filepath.Join(t.TempDir(), "a register?#% 1.db")
		dsn, err := DSN(d.Name, path)
		if err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open(d.Name, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		db.SetMaxOpenConns(3)
		// Three connections at once, each asked what it has.
		var conns []*sql.Conn
		for range 3 {
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conns = append(conns, c)
		}
		for i, c := range conns {
			p, err := checkConn(ctx, c)
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			if p.file != path {
				t.Errorf("connection %d is on %q; want %q", i, p.file, path)
			}
			var fk, busy int
			if err := c.QueryRowContext(ctx, "SELECT foreign_keys FROM pragma_foreign_keys").Scan(&fk); err != nil {
				t.Fatal(err)
			}
			if err := c.QueryRowContext(ctx, "SELECT timeout FROM pragma_busy_timeout").Scan(&busy); err != nil {
				t.Fatal(err)
			}
			if fk != 1 || busy != 5000 || p.journal != "wal" || p.synchronous != 2 || p.recursive != 1 {
				t.Errorf("connection %d: foreign_keys %d, busy_timeout %d, %+v; want 1, 5000, WAL, FULL, recursive triggers", i, fk, busy, p)
			}
		}
	})
}

// An empty driver is the one registered (both are, in the tests: modernc
// first); another name is refused, naming the two.
func TestDSNOfADriverItDoesNotKnowIsRefused(t *testing.T) {
	t.Parallel()
	if d, err := SQLiteDriver(); err != nil || d != DriverModernc {
		t.Fatalf("SQLiteDriver() = %q, %v; want %q with both registered", d, err, DriverModernc)
	}
	got, err := DSN("", "r.db")
	want, _ := DSN(DriverModernc, "r.db")
	if err != nil || got != want {
		t.Fatalf("DSN(\"\") = %q, %v; want modernc's, %q", got, err, want)
	}
	if _, err := DSN("postgres", "r.db"); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("DSN(postgres) = %v; want ErrNoDriver", err)
	}
}
