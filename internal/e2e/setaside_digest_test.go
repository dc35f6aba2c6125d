package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
)

// A register's setting the head office refused for good waits in its
// backlog, set aside; the table's digest goes on without it, so a real
// disagreement in the rest of the table — the head office's copy of
// another setting changed behind the engine's back, as a restore of an
// older copy would — is found and healed by a provisioning, and the row
// set aside does not have the register provisioned again and again.
func TestASettingsTableWithARowSetAsideStillHealsADisagreement(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		h := newSettingsOffice(t, &printer{})
		tune := h.tune
		h.tune = func(s *replica.Settings) {
			tune(s)
			s.DigestsEvery = 50 * time.Millisecond
		}
		g := h.addRegister(h.addShop(), d)
		g.setLocally("footer", "Thank you", time.Now().Add(-time.Hour))
		g.setLocally("volume", "7", time.Now().Add(-time.Hour))
		h.filedOnce(g, "footer", "Thank you")
		h.filedOnce(g, "volume", "7")
		// PostgreSQL's text cannot hold a NUL: refused for good.
		g.setLocally("volume", "loud\x00er", time.Now())
		eventuallyWithin(t, wishWait, "the volume set aside", func() (bool, string) {
			in, err := replica.Inspect(context.Background(), g.db)
			return err == nil && in.Backlog == 1, fmt.Sprintf("backlog %d (%v)", in.Backlog, err)
		})
		// A provisioning's end sends the register's settings up again:
		// the first one's, later than the change below under load, would
		// heal it without a digest.
		eventuallyWithin(t, wishWait, "the register provisioned, every row but the one set aside confirmed", func() (bool, string) {
			if st := statusOf(t, h, g.id); st.Provisioning {
				return false, "provisioning"
			}
			in, err := replica.Inspect(context.Background(), g.db)
			if err != nil {
				return false, err.Error()
			}
			for _, l := range in.Lanes {
				if l.Unconfirmed > 0 {
					return false, fmt.Sprintf("lane %s: %d rows unconfirmed", l.Name, l.Unconfirmed)
				}
			}
			return true, ""
		})

		h.exec(`UPDATE shop.settings SET value = 'lost' WHERE register_id = $1 AND name = 'footer'`, g.id)
		h.filedOnce(g, "footer", "Thank you")
		// The server counts a disagreement once the upload that carried it
		// commits; the provisioning that commit sets off, and the healing,
		// can be seen before the count is.
		var mismatches uint64
		eventuallyWithin(t, wishWait, "the healing's digest disagreement counted", func() (bool, string) {
			mismatches = h.s.Stats().DigestMismatches
			return mismatches > 0, fmt.Sprintf("%d digests disagreed", mismatches)
		})
		// Two more rounds of digests: none disagrees.
		since := time.Now()
		eventuallyWithin(t, wishWait, "two rounds of digests after the healing", func() (bool, string) {
			in, err := replica.Inspect(context.Background(), g.db)
			if err != nil {
				return false, err.Error()
			}
			return in.DigestsAt.After(since.Add(100*time.Millisecond)) && in.Backlog == 1, fmt.Sprintf("digests sent %v, backlog %d", in.DigestsAt, in.Backlog)
		})
		if n := h.s.Stats().DigestMismatches; n != mismatches {
			t.Errorf("%d digests disagreed after the healing; the row set aside has the register provisioned again", n-mismatches)
		}
	})
}

// A product the register could not take (a trigger of its own refuses a
// free one) leaves the products' digest on without it: the register's copy
// of another product changed behind the engine's back is found and
// healed, and the product refused does not have it provisioned again and
// again.
func TestACatalogWithARowTheRegisterCouldNotTakeStillHealsADisagreement(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		h := newHeadOfficeWith(t, shopCodecs(t), "",
			"CREATE TRIGGER no_free BEFORE INSERT ON products WHEN NEW.price_cents = 0 BEGIN SELECT RAISE(ABORT, 'no free products here'); END;")
		h.tune = func(s *replica.Settings) { s.DigestsEvery = 50 * time.Millisecond }
		shop := h.addShop()
		pear := h.addProduct(shop, "pear", 200)
		h.addProduct(shop, "gift", 0)
		g := h.addRegister(shop, d)
		eventuallyWithin(t, wishWait, "the gift refused and the pear held", func() (bool, string) {
			in, err := replica.Inspect(context.Background(), g.db)
			return err == nil && in.RejectedTotal > 0 && g.count("SELECT count(*) FROM products") == 1,
				fmt.Sprintf("rejected %d, products %d (%v)", in.RejectedTotal, g.count("SELECT count(*) FROM products"), err)
		})

		// The register's copy of the pear changed behind the engine's back.
		g.asEngine(t, "UPDATE products SET price_cents = 999 WHERE id = ?", pear.String())
		eventuallyWithin(t, wishWait, "the pear healed", func() (bool, string) {
			n := g.count("SELECT count(*) FROM products WHERE price_cents = 200")
			return n == 1, fmt.Sprintf("%d pears at 200", n)
		})
		// Counted once the upload that carried it commits: possibly after
		// the healing it set off is seen.
		var mismatches uint64
		eventuallyWithin(t, wishWait, "the healing's digest disagreement counted", func() (bool, string) {
			mismatches = h.s.Stats().DigestMismatches
			return mismatches > 0, fmt.Sprintf("%d digests disagreed", mismatches)
		})
		since := time.Now()
		eventuallyWithin(t, wishWait, "two rounds of digests after the healing", func() (bool, string) {
			in, err := replica.Inspect(context.Background(), g.db)
			if err != nil {
				return false, err.Error()
			}
			return in.DigestsAt.After(since.Add(100 * time.Millisecond)), fmt.Sprintf("digests sent %v", in.DigestsAt)
		})
		if n := h.s.Stats().DigestMismatches; n != mismatches {
			t.Errorf("%d digests disagreed after the healing; the row not taken has the register provisioned again", n-mismatches)
		}
	})
}

// asEngine writes the register's file as the engine would, past the
// triggers that keep catalogs read-only: a change behind the engine's
// back, as a file restored from an older copy holds one.
func (g *register) asEngine(t testing.TB, query string, args ...any) {
	t.Helper()
	tx, err := g.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	for _, q := range []string{"UPDATE sync_replica SET applying = 1", query, "UPDATE sync_replica SET applying = 0"} {
		a := args
		if q != query {
			a = nil
		}
		if _, err := tx.Exec(q, a...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
