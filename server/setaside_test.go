package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// A setting row the server refused for good waits in the replica's
// backlog, set aside, and the replica leaves it out of its table's
// digest: so does the server, which goes on comparing the rest of the
// table — a disagreement there still provisions the replica — and counts
// the row again once it files it.
func TestASettingRowSetAsideLeavesItsTableComparedWithoutIt(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	now := time.Now()
	footer := w.setting(r, "footer", "Thank you", now)
	volume := w.setting(r, "volume", "7", now)
	w.drain(r)

	// The footer written again, with a value PostgreSQL cannot hold:
	// refused for good, and set aside on the replica.
	w.setting(r, "footer", "bad\x00byte", now.Add(time.Second))
	w.drain(r)
	w.upload(r, &syncpb.Up{LastApplied: w.applied[r], Digests: []*syncpb.Digest{w.settingsDigest(volume)}})
	if why := w.provisionReason(r); why != "" {
		t.Fatalf("a digest leaving out the row set aside, agreeing on the rest, provisioned the register: %s", why)
	}

	// Filed at last: the row counts again.
	footer.Value, footer.ChangedAt = "Merci", now.Add(2*time.Second).UTC().Truncate(time.Microsecond)
	w.setting(r, "footer", footer.Value, footer.ChangedAt)
	w.drain(r)
	w.upload(r, &syncpb.Up{LastApplied: w.applied[r], Digests: []*syncpb.Digest{w.settingsDigest(volume)}})
	if why := w.provisionReason(r); !strings.Contains(why, "digest of settings disagrees") {
		t.Fatalf("a digest leaving out a row filed since: provisioning reason %q", why)
	}
}

// The same table, its row set aside, still tells a real disagreement:
// the register holds another value of a row than the server records (a
// copy of either restored).
func TestASettingsTableWithARowSetAsideStillFindsADisagreement(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	now := time.Now()
	w.setting(r, "footer", "Thank you", now)
	volume := w.setting(r, "volume", "7", now)
	w.drain(r)
	w.setting(r, "footer", "bad\x00byte", now.Add(time.Second))
	w.drain(r)
	volume.Value = "8"
	w.upload(r, &syncpb.Up{LastApplied: w.applied[r], Digests: []*syncpb.Digest{w.settingsDigest(volume)}})
	if why := w.provisionReason(r); !strings.Contains(why, "digest of settings disagrees") {
		t.Fatalf("a disagreeing digest of a table with a row set aside: provisioning reason %q", why)
	}
}

// A catalog row the replica could not take it leaves out of the table's
// digest while no later message brings it again; so does the server,
// which goes on comparing the rest of the table: a disagreement there
// still provisions the replica, which ends holding every row.
func TestACatalogRowTheReplicaCouldNotTakeLeavesItsTableCompared(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "apple", 1)
	sh.product(sh.shopA, "pear", 2)
	sh.pass()
	r.sync()
	key, msg := heldNamed(t, r, "apple")
	delete(r.held["products"], key)
	if err := r.send(&syncpb.Up{LastApplied: r.applied, Rejected: []*syncpb.Rejected{
		{Table: "products", Key: []byte(key), Reason: "CHECK constraint failed", Message: msg}}}); err != nil {
		t.Fatal(err)
	}
	r.sync()
	if err := r.send(&syncpb.Up{LastApplied: r.applied, Digests: []*syncpb.Digest{r.digest("products")}}); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, sh, r.id); st.Provisioning {
		t.Fatalf("a digest leaving out the row not taken, agreeing on the rest, provisioned the replica: %s", st.ProvisionReason)
	}
	// The replica's copy of the pear is lost (its file restored, say).
	pear, _ := heldNamed(t, r, "pear")
	delete(r.held["products"], pear)
	if err := r.send(&syncpb.Up{LastApplied: r.applied, Digests: []*syncpb.Digest{r.digest("products")}}); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, sh, r.id); !st.Provisioning || !strings.Contains(st.ProvisionReason, "digest of products disagrees") {
		t.Fatalf("a disagreeing digest of a table with a row not taken: %+v", st)
	}
	r.sync()
	r.expect("products", "apple", "pear")
	if err := r.send(&syncpb.Up{LastApplied: r.applied, Digests: []*syncpb.Digest{r.digest("products")}}); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, sh, r.id); st.Provisioning {
		t.Errorf("provisioned again after the provisioning: %s", st.ProvisionReason)
	}
}

// heldNamed finds the product called name the fake replica holds: its key
// and the message that brought it.
func heldNamed(t testing.TB, f *fake, name string) (magicsync.Key, uint64) {
	t.Helper()
	for k, tuple := range f.held["products"] {
		vals, err := wire.DecodeTuple(tuple, nil)
		if err != nil {
			t.Fatal(err)
		}
		if vals[2].S != name {
			continue
		}
		for _, m := range f.msgs {
			for _, tc := range m.GetDown().GetTables() {
				for _, uk := range tc.UpsertKeys {
					if string(uk) == string(k) {
						return k, m.Id
					}
				}
			}
		}
		t.Fatalf("no message brought %s", name)
	}
	t.Fatalf("the replica holds no %s", name)
	return "", 0
}
