package replica

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
)

// Seed 002: until the replica first runs knowing its id — built with it,
// or sending or applying a message once its Identity answers — its
// database refuses none of the host's writes; from then on, the server's
// tables are the server's. Each of the three ways makes them read-only on
// its own, and nothing before it does: not an Identity that answers while
// the replica has not yet sent or applied anything.
func TestServerTablesBecomeReadOnlyByEachWayTheIDBecomesKnown(t *testing.T) {
	t.Parallel()
	ways := []struct {
		name string
		// known has the replica over db run knowing its id, its Identity
		// who answering it from then on.
		known func(t *testing.T, db *sql.DB, who *identity) *Replica
	}{
		{"the id built in", func(t *testing.T, db *sql.DB, _ *identity) *Replica {
			r, err := New(context.Background(), db, shopCodecs(t), Me(register), newRecorder(), quietSettings())
			if err != nil {
				t.Fatal(err)
			}
			return r
		}},
		{"the id known at send", func(t *testing.T, db *sql.DB, who *identity) *Replica {
			r := replicaNotKnowingItsID(t, db, who)
			who.id.Store(&register)
			hostWritesCatalogs(t, db, "once the Identity answers, before the replica sent or applied anything")
			if _, err := r.sendOnce(context.Background(), r.lane("main")); err != nil {
				t.Fatal(err)
			}
			return r
		}},
		{"the id known at apply", func(t *testing.T, db *sql.DB, who *identity) *Replica {
			r := replicaNotKnowingItsID(t, db, who)
			who.id.Store(&register)
			hostWritesCatalogs(t, db, "once the Identity answers, before the replica sent or applied anything")
			b := builder{t, shopCodecs(t)}
			if _, err := r.Endpoint().Receive(context.Background(), b.down(1, b.upserts(product(7, 700)))); err != nil {
				t.Fatal(err)
			}
			return r
		}},
	}
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		for _, way := range ways {
			t.Run(way.name, func(t *testing.T) {
				t.Parallel()
				db := shopDB(t, d)
				hostWritesCatalogs(t, db, "before the replica starts")
				r := way.known(t, db, &identity{})
				defer r.Close()
				catalogsAreReadOnly(t, db)
				// The engine's own applying passes.
				b := builder{t, shopCodecs(t)}
				if _, err := r.Endpoint().Receive(context.Background(), b.down(2, b.upserts(product(1, 250)))); err != nil {
					t.Fatal(err)
				}
				if n := count(t, db, "SELECT price_cents FROM products WHERE id = ?", product(1, 0).ID); n != 250 {
					t.Fatalf("the engine's write of a catalog was refused: price %d", n)
				}
			})
		}
	})
}

// replicaNotKnowingItsID starts a replica over db whose Identity, who,
// does not know its id yet; the host's writes during setup all pass.
func replicaNotKnowingItsID(t *testing.T, db *sql.DB, who *identity) *Replica {
	t.Helper()
	r, err := New(context.Background(), db, shopCodecs(t), who, newRecorder(), quietSettings())
	if err != nil {
		t.Fatal(err)
	}
	hostWritesCatalogs(t, db, "while the Identity answers not known")
	if _, err := r.sendOnce(context.Background(), r.lane("main")); err != nil {
		t.Fatal(err)
	}
	hostWritesCatalogs(t, db, "after a send while the Identity answers not known")
	return r
}

// hostWritesCatalogs writes the server's tables as a host setting the
// database up does — insert, update, delete — and fails the test, saying
// when, if any write is refused.
func hostWritesCatalogs(t *testing.T, db *sql.DB, when string) {
	t.Helper()
	p, img := product(1, 100), uuid.New()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"INSERT OR REPLACE INTO products VALUES (?, ?, ?, ?)", []any{p.ID, p.Name, p.PriceCents, p.UpdatedAt}},
		{"UPDATE products SET price_cents = price_cents + 1 WHERE id = ?", []any{p.ID}},
		{"INSERT INTO images VALUES (?, ?, 'placeholder.png')", []any{img, p.ID}},
		{"DELETE FROM images WHERE id = ?", []any{img}},
	} {
		if _, err := db.Exec(q.sql, q.args...); err != nil {
			t.Fatalf("%s: the host's write %q was refused: %v", when, q.sql, err)
		}
	}
}

// catalogsAreReadOnly checks that every write of the host to the server's
// tables is refused, naming the table, and changes nothing.
func catalogsAreReadOnly(t *testing.T, db *sql.DB) {
	t.Helper()
	p := product(1, 0)
	before := count(t, db, "SELECT price_cents FROM products WHERE id = ?", p.ID)
	rows := count(t, db, "SELECT count(*) FROM products")
	for _, q := range []struct {
		sql, table string
		args       []any
	}{
		{"UPDATE products SET price_cents = 1", "products", nil},
		{"DELETE FROM products", "products", nil},
		{"INSERT INTO products VALUES ('x', 'x', 1, '2026-01-01')", "products", nil},
		{"INSERT INTO images VALUES ('i', ?, 'x.png')", "images", []any{p.ID}},
	} {
		_, err := db.Exec(q.sql, q.args...)
		if err == nil || !strings.Contains(err.Error(), q.table+" is the server's table") {
			t.Errorf("once the id is known, the host's %q = %v; want a refusal naming %s", q.sql, err, q.table)
		}
	}
	if n := count(t, db, "SELECT count(*) FROM products"); n != rows {
		t.Errorf("%d products after the refused writes; want the %d there were", n, rows)
	}
	if n := count(t, db, "SELECT price_cents FROM products WHERE id = ?", p.ID); n != before {
		t.Errorf("the refused update changed the price to %d, was %d", n, before)
	}
}
