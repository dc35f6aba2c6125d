package replica

import (
	"context"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// A setting's rows set aside — one the server refused for good, one the
// engine cannot read — are left out of its digest, which goes on going
// up for the rest of the table, as the server leaves them out of what it
// records: one bad row does not switch the table's digest off. While the
// report of the unreadable row is not confirmed, the table waits.
func TestASettingsDigestGoesOnWithoutItsRowsSetAside(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		clock := newFakeClock()
		r, up := newDialShop(t, d, clock)
		ctx := context.Background()
		b := builder{t, r.codecs}
		volume := Dial{RegisterID: register, Name: "volume", Shown: "VOLUME", Level: 7, ChangedAt: t0}
		bright := Dial{RegisterID: register, Name: "brightness", Shown: "BRIGHTNESS", Level: 2, ChangedAt: t0}
		for _, dl := range []Dial{volume, bright} {
			mustExec(t, r.db, "INSERT INTO dials (register_id, name, level, changed_at) VALUES (?, ?, ?, ?)", dl.RegisterID, dl.Name, dl.Level, dl.ChangedAt)
		}
		first := sendDue(t, r, up, clock)
		if _, err := r.Endpoint().Receive(ctx, b.filed(1, "main", first.Sequence)); err != nil {
			t.Fatal(err)
		}
		// The brightness written again and refused for good; a contrast
		// dial written by another program with a level that is no
		// integer.
		mustExec(t, r.db, "UPDATE dials SET level = 3 WHERE name = 'brightness'")
		mustExec(t, r.db, "INSERT INTO dials (register_id, name, level, changed_at) VALUES (?, 'contrast', 'twelve', ?)", register, t0)
		again := sendDue(t, r, up, clock)
		if len(again.Up.Rejected) != 1 {
			t.Fatalf("reported %v; want the contrast dial", again.Up.Rejected)
		}
		if dg := digestOf(again.Up, "dials"); dg != nil {
			t.Fatalf("the dials' digest went up with a row on its way and a report unconfirmed: %v", dg)
		}
		refused := &syncpb.Rejected{Table: "dials", Key: []byte(keyOf(t, r.codecs, bright)), Reason: "value too long"}
		if _, err := r.Endpoint().Receive(ctx, b.filed(2, "main", again.Sequence, refused)); err != nil {
			t.Fatal(err)
		}
		checkDigest(t, digestOf(sendDue(t, r, up, clock).Up, "dials"), upDigest(t, r.codecs, volume), 2)
	})
}

// A catalog row the replica could not take is left out of the catalog's
// digest, once its report is confirmed, while no later message brings it
// again: the server leaves it out too, and compares the rest. A later
// message bringing it again, taken or not, settles it.
func TestACatalogDigestGoesOnWithoutARowTheReplicaCouldNotTake(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		s := quietSettings()
		clock := newFakeClock()
		s.Clock, s.DigestsEvery, s.ResendAfter = clock, time.Hour, 1000*time.Hour
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		b := builder{t, r.codecs}
		p1, p2 := product(1, 100), product(2, 200)
		sum := func(ps ...Product) digest.Sum {
			var s digest.Sum
			for _, p := range ps {
				s.Add(b.upserts(p).Upserts[0])
			}
			return s
		}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(p1, p2))); err != nil {
			t.Fatal(err)
		}
		// A price the replica's CHECK refuses: it keeps the old one.
		if got, err := r.Endpoint().Receive(ctx, b.down(2, b.upserts(product(1, -5)))); err != nil || got.Rejected != 1 {
			t.Fatalf("Received %+v, %v; want the row refused", got, err)
		}
		m := sendDue(t, r, up, clock)
		if len(m.Up.Rejected) != 1 || digestOf(m.Up, "products") != nil {
			t.Fatalf("reported %v, digests %v; want the row refused reported, and no digest of products before the report is confirmed", m.Up.Rejected, m.Up.Digests)
		}
		if _, err := r.Endpoint().Receive(ctx, b.filed(3, "main", m.Sequence)); err != nil {
			t.Fatal(err)
		}
		checkDigest(t, digestOf(sendDue(t, r, up, clock).Up, "products"), sum(p2), 3)

		// Brought again and refused again: still left out.
		if _, err := r.Endpoint().Receive(ctx, b.down(4, b.upserts(product(1, -6)))); err != nil {
			t.Fatal(err)
		}
		m = sendDue(t, r, up, clock)
		if _, err := r.Endpoint().Receive(ctx, b.filed(5, "main", m.Sequence)); err != nil {
			t.Fatal(err)
		}
		checkDigest(t, digestOf(sendDue(t, r, up, clock).Up, "products"), sum(p2), 5)

		// Brought again and taken: counted again.
		p1.PriceCents = 150
		if _, err := r.Endpoint().Receive(ctx, b.down(6, b.upserts(p1))); err != nil {
			t.Fatal(err)
		}
		checkDigest(t, digestOf(sendDue(t, r, up, clock).Up, "products"), sum(p1, p2), 6)

		// Refused again, then replaced by a provisioning, which the
		// server ends by forgetting what the messages before it brought.
		if _, err := r.Endpoint().Receive(ctx, b.down(7, b.upserts(product(1, -7)))); err != nil {
			t.Fatal(err)
		}
		m = sendDue(t, r, up, clock)
		if _, err := r.Endpoint().Receive(ctx, b.filed(8, "main", m.Sequence)); err != nil {
			t.Fatal(err)
		}
		checkDigest(t, digestOf(sendDue(t, r, up, clock).Up, "products"), sum(p2), 8)
		for _, msg := range []*syncpb.ToReplica{
			{Id: 9, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Snapshot: 9, Tables: []*syncpb.TableChanges{b.upserts(p1, p2)}}}},
			{Id: 10, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{Snapshot: 9, Tables: []string{"products", "images"}}}},
		} {
			body, err := wire.EncodeToReplica(msg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Endpoint().Receive(ctx, body); err != nil {
				t.Fatal(err)
			}
		}
		checkDigest(t, digestOf(sendDue(t, r, up, clock).Up, "products"), sum(p1, p2), 10)
	})
}
