package e2e

import (
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
)

// copyFile copies a SQLite file whose every connection is closed.
func copyFile(t testing.TB, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// copyDatabase copies a stopped SQLite database: its file and, when the
// last connection's close left one (a checkpoint another reader held
// back), its write-ahead log, without which the file alone may lack what
// was committed. What stood beside the destination is removed first.
func copyDatabase(t testing.TB, from, to string) {
	t.Helper()
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Remove(to + suffix); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	copyFile(t, from, to)
	if _, err := os.Stat(from + "-wal"); err == nil {
		copyFile(t, from+"-wal", to+"-wal")
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

// A register restored from an older copy of its database numbers its
// uploads again from where the copy left off. Nothing it writes after the
// restore may be taken for a repeat, no receipt the server filed is lost,
// and the register ends holding what it should.
func TestReplicaRestoredFromAnOlderCopyLosesNothing(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		h := newHeadOffice(t)
		shop := h.addShop()
		h.addProduct(shop, "bread", 100)
		g := h.addRegister(shop, d)
		g.ring(1)
		settleAll(t, g)
		// A copy of the register's database, taken with it stopped.
		g.stop()
		if err := g.db.Close(); err != nil {
			t.Fatal(err)
		}
		backup := g.path + ".backup"
		copyDatabase(t, g.path, backup)
		g = h.attachAt(g.id, d, g.path, false)
		for i := range 3 {
			g.ring(int64(10 + i))
		}
		h.addProduct(shop, "milk", 200)
		settleAll(t, g)
		// The disk dies; the copy comes back.
		g.stop()
		if err := g.db.Close(); err != nil {
			t.Fatal(err)
		}
		copyDatabase(t, backup, g.path)
		g = h.attachAt(g.id, d, g.path, false)
		var after []uuid.UUID
		for i := range 3 {
			after = append(after, g.ring(int64(100+i)))
		}
		eventually(t, "the restored register's new receipts being filed", func() (bool, string) {
			n := h.count("SELECT count(*) FROM shop.receipts WHERE id = ANY($1)", after)
			return n == len(after), fmt.Sprintf("%d of %d filed", n, len(after))
		})
		if n := h.count("SELECT count(*) FROM shop.receipts WHERE register_id = $1", g.id); n != 7 {
			t.Fatalf("%d receipts filed; want all 7 (1 before the copy, 3 lost with the disk, 3 after)", n)
		}
		eventually(t, "the restored register catching up", func() (bool, string) {
			n := g.count("SELECT count(*) FROM products")
			return n == 2, fmt.Sprintf("%d products", n)
		})
		// The provisioning the restore called for lists no record in its
		// EndSnapshot's own (PROTOCOL.md, section 6): the head office keeps
		// the 3 receipts the register lost, and does not send them back.
		eventually(t, "the restored register sending everything", func() (bool, string) {
			n := g.count("SELECT count(*) FROM sync_pending")
			return n == 0, fmt.Sprintf("%d rows unconfirmed", n)
		})
		if n := h.count("SELECT count(*) FROM shop.receipts WHERE register_id = $1", g.id); n != 7 {
			t.Fatalf("after the provisioning, %d receipts filed; want all 7 still", n)
		}
		if n := g.count("SELECT count(*) FROM receipts"); n != 4 {
			t.Fatalf("the register holds %d receipts; want its 4 (1 before the copy, 3 after the restore)", n)
		}
	})
}
