package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/magicsync/magicsync/examples/shop/shopcheck"
	"github.com/magicsync/magicsync/internal/pgtest"
)

// copyFile copies the file at from to to, if it exists.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRegisterRestored restores register 1's database from a backup taken
// before some of its sales were filed — or replaces it with a fresh one
// under the same id — and checks that a sale rung up afterwards reaches
// the head office, and that the register again holds the shop's products.
// (A restored register numbers its uploads again from where its copy left
// off; the head office once took them for repeats of uploads it had
// filed, confirmed them, and the register forgot sales never filed.)
func TestRegisterRestored(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		name := "from an older backup"
		if fresh {
			name = "as a fresh database"
		}
		t.Run(name, func(t *testing.T) {
			dbURL, data := pgtest.NewDatabase(t), t.TempDir()
			backup := t.TempDir()
			file := filepath.Join(data, "register-1.db")
			rnd := seeded(t)
			n := len(productNames)

			s := openShop(t, dbURL, data, true)
			s.waitHoldings(all(n, n))
			s.sell(s.regs[0], rnd)
			waitFor(t, "the first sale filed", s.converged)
			s.stop()
			for _, suffix := range []string{"", "-wal", "-shm"} {
				copyFile(t, file+suffix, filepath.Join(backup, "register-1.db"+suffix))
			}

			s = openShop(t, dbURL, data, true)
			s.sell(s.regs[0], rnd)
			s.sell(s.regs[0], rnd)
			waitFor(t, "two more sales filed", s.converged)
			s.stop()
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if err := os.Remove(file + suffix); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
				if !fresh {
					copyFile(t, filepath.Join(backup, "register-1.db"+suffix), file+suffix)
				}
			}

			s = openShop(t, dbURL, data, true)
			r := s.regs[0]
			// The head office's view may lag behind the restore: wait for
			// the products on the register itself.
			waitFor(t, "register 1 holds the products", func() error {
				if got := localCount(t, r, "products"); got != n {
					return fmt.Errorf("register 1 holds %d products", got)
				}
				return nil
			})
			s.sell(r, rnd)
			waitFor(t, "register 1 has nothing left to send", func() error {
				left, err := unconfirmed(s.ctx, r)
				if err == nil && left != "" {
					err = errors.New(left)
				}
				return err
			})
			// Every receipt the register holds is filed; the head office
			// also keeps those the restore lost.
			got, err := shopcheck.SQLiteRows(s.ctx, r.db, "SELECT register_id, id, total_cents, rung_at FROM receipts")
			if err != nil {
				t.Fatal(err)
			}
			want, err := shopcheck.PoolRows(s.ctx, s.ho.pool, "SELECT register_id, id, total_cents, rung_at FROM shop.receipts WHERE register_id = $1", r.id)
			if err != nil {
				t.Fatal(err)
			}
			if lost := shopcheck.Missing(got, want); len(lost) > 0 {
				t.Errorf("receipts of register 1, confirmed to it, that the head office never filed: %q", lost)
			}
			if len(want) != 4 {
				t.Errorf("the head office filed %d receipts of register 1; 4 were rung up", len(want))
			}
			s.waitHoldings(all(n, n))
		})
	}
}
