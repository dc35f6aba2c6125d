package replica

import (
	"context"
	"testing"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
)

// Shelved is a catalog row whose shelf the register keeps for itself.
type Shelved struct {
	ID    string `db:"id" sync:"key"`
	Name  string `db:"name"`
	Shelf string `db:"shelf" sync:"replica_owned"`
}

func (Shelved) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "shelved", Mirror: magicsync.Catalog}
}

// A catalog's replica_owned column is the replica's: the host writes it
// (the catalog's other columns it may not), the server's changes to the
// row leave it as it is, and the digest leaves it out, so that the
// replica's own value never makes it disagree with the server.
func TestAReplicaOwnedColumnIsKeptThroughTheServersChangesAndLeftOutOfTheDigest(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		ctx := context.Background()
		codecs, err := magicsync.NewCodecs(Shelved{})
		if err != nil {
			t.Fatal(err)
		}
		db := sqlitetest.Open(t, d)
		mustExec(t, db, `CREATE TABLE shelved (id TEXT PRIMARY KEY, name TEXT NOT NULL, shelf TEXT NOT NULL DEFAULT '')`)
		if err := Install(ctx, db, codecs); err != nil {
			t.Fatal(err)
		}
		settings := quietSettings()
		settings.Wishes = nil // no setting here
		r, err := New(ctx, db, codecs, Me(register), newRecorder(), settings)
		if err != nil {
			t.Fatal(err)
		}
		b := builder{t, codecs}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(Shelved{ID: "a", Name: "soap"}))); err != nil {
			t.Fatal(err)
		}
		mustExec(t, db, `UPDATE shelved SET shelf = 'B3' WHERE id = 'a'`)
		if _, err := db.Exec(`UPDATE shelved SET name = 'not mine' WHERE id = 'a'`); err == nil {
			t.Error("the host wrote a catalog column that is not its own")
		}
		if _, err := r.Endpoint().Receive(ctx, b.down(2, b.upserts(Shelved{ID: "a", Name: "soap, new"}))); err != nil {
			t.Fatal(err)
		}
		var name, shelf string
		if err := db.QueryRow(`SELECT name, shelf FROM shelved WHERE id = 'a'`).Scan(&name, &shelf); err != nil {
			t.Fatal(err)
		}
		if name != "soap, new" || shelf != "B3" {
			t.Errorf("after the server's change the row holds name %q, shelf %q; want the new name and the register's shelf", name, shelf)
		}

		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ds, err := r.digests(ctx, conn, 2)
		if err != nil {
			t.Fatal(err)
		}
		var want digest.Sum
		want.Add(wire.AppendTuple(nil, []codec.Value{{Kind: wire.Text, S: "a"}, {Kind: wire.Text, S: "soap, new"}}))
		var got []byte
		for _, dg := range ds {
			if dg.Table == "shelved" {
				got = dg.Sum
			}
		}
		if string(got) != string(want.Bytes()) {
			t.Errorf("the digest of shelved %x; want the sum of the row without its shelf, %x", got, want.Bytes())
		}
	})
}
