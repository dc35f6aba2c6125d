package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// The record of a filed upload is forgotten once the replica applied its
// Filed and the grace period passed, the newest of each lane kept; a kept
// sequence is still a repeat, and an upload at a forgotten sequence is
// taken for a replica restored from an older copy, once.
func TestFiledUploadsAreForgottenOnceConfirmed(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	settle(t, sh, r)
	kept := func() []int64 {
		t.Helper()
		rows, err := sh.pool.Query(sh.ctx, `SELECT sequence FROM public.sync_filed WHERE replica = $1 ORDER BY sequence`, r.id)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []int64
		for rows.Next() {
			var n int64
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			out = append(out, n)
		}
		return out
	}
	ups := make([]*syncpb.Up, 3)
	for i := range ups {
		rec := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: int64(100 + i), ChangedAt: time.Now()}
		ups[i] = &syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, rec)}}
		if err := r.send(ups[i]); err != nil {
			t.Fatal(err)
		}
	}
	// Not yet confirmed to the replica: kept, whatever their age.
	if err := sh.s.TrimFiled(sh.ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got := kept(); len(got) != 3 {
		t.Fatalf("before the replica applied the Filed: kept %v, want all 3", got)
	}
	settle(t, sh, r)
	// Confirmed, but within the grace period: kept.
	if err := sh.s.TrimFiled(sh.ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := kept(); len(got) != 3 {
		t.Fatalf("within the grace period: kept %v, want all 3", got)
	}
	if err := sh.s.TrimFiled(sh.ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got := kept(); len(got) != 1 || got[0] != 3 {
		t.Fatalf("after: kept %v, want the newest, 3", got)
	}
	filedCount := func() int {
		for _, ts := range statusOf(t, sh, r.id).Tables {
			if ts.Table == "receipts" {
				return ts.Filed
			}
		}
		return 0
	}
	// The newest, sent again, is still a repeat.
	if err := r.sendSeq(3, ups[2]); err != nil {
		t.Fatal(err)
	}
	if n := filedCount(); n != 3 {
		t.Errorf("after a repeat of upload 3: %d receipts filed, want 3", n)
	}
	if st := statusOf(t, sh, r.id); st.Provisioning {
		t.Fatalf("a repeat provisions the replica: %s", st.ProvisionReason)
	}
	settle(t, sh, r)
	// Upload 2 again, with rows: the replica numbers its uploads again
	// from an older copy. Filed, and provisioned.
	again := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: 7, ChangedAt: time.Now()}
	if err := r.sendSeq(2, &syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, again)}}); err != nil {
		t.Fatal(err)
	}
	if total, ok := sh.total(r.id, again.ID); !ok || total != 7 {
		t.Errorf("the upload at a forgotten sequence was not filed")
	}
	if st := statusOf(t, sh, r.id); !st.Provisioning || !strings.Contains(st.ProvisionReason, "restored from an older copy") {
		t.Fatalf("after an upload at a forgotten sequence: provisioning %v, %q", st.Provisioning, st.ProvisionReason)
	}
	settle(t, sh, r)
	// Its next uploads are new ones, not a restore again.
	next := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: 8, ChangedAt: time.Now()}
	if err := r.sendSeq(3, &syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, next)}}); err != nil {
		t.Fatal(err)
	}
	if total, ok := sh.total(r.id, next.ID); !ok || total != 8 {
		t.Errorf("the upload after the restore was not filed")
	}
	if st := statusOf(t, sh, r.id); st.Provisioning {
		t.Errorf("provisioned again after the restore was handled: %s", st.ProvisionReason)
	}
}

// A row a replica reported it could not take is forgotten once it applied
// a later message carrying the row, or once a provisioning replaced what it
// held; not before, and what it could not take of that provisioning stays.
func TestRejectedRowsGoOnceAppliedOrProvisioned(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	apple := sh.product(sh.shopA, "apple", 1)
	sh.pass()
	settle(t, sh, r)
	appleKey := []byte(codec.KeyOfValues(wire.UUIDValue(apple)))
	rejected := func() int {
		t.Helper()
		n := 0
		for _, j := range statusOf(t, sh, r.id).Rejected {
			if j.Side == "replica" && j.Table == "products" && string(j.Key) == string(appleKey) {
				n++
			}
		}
		return n
	}
	report := func(msg uint64) {
		t.Helper()
		if err := r.send(&syncpb.Up{LastApplied: r.applied, Rejected: []*syncpb.Rejected{
			{Table: "products", Key: appleKey, Reason: "CHECK constraint failed", Message: msg}}}); err != nil {
			t.Fatal(err)
		}
		settle(t, sh, r) // its Filed
	}
	report(r.applied)
	if rejected() != 1 {
		t.Fatal("the rejected row was not recorded")
	}
	// A change of another row leaves it.
	sh.product(sh.shopA, "avocado", 2)
	sh.pass()
	settle(t, sh, r)
	if rejected() != 1 {
		t.Fatal("a message not carrying the row cleared it")
	}
	// A later message carrying the row, applied: gone.
	sh.exec(`UPDATE shop.products SET price_cents = 2 WHERE id = $1`, apple)
	sh.pass()
	settle(t, sh, r)
	if rejected() != 0 {
		t.Fatal("the row was applied later, and is still recorded as rejected")
	}
	// Rejected by the message that carried it, reported with its
	// acknowledgement: kept.
	sh.exec(`UPDATE shop.products SET price_cents = 3 WHERE id = $1`, apple)
	sh.pass()
	m, ok := r.next(time.Second)
	if !ok || m.GetDown() == nil {
		t.Fatalf("want the apple's change, got %v", m)
	}
	r.apply(m)
	report(m.Id)
	if rejected() != 1 {
		t.Fatal("a row rejected by the last message was not kept")
	}
	// A provisioning replaces it...
	sh.exec(`UPDATE shop.registers SET shop_id = $1 WHERE id = $2`, sh.shopB, r.id)
	sh.pass()
	settle(t, sh, r)
	if rejected() != 0 {
		t.Fatal("a provisioning ended, and the row is still recorded as rejected")
	}
	// ... but what the replica could not take of the provisioning stays.
	sh.exec(`UPDATE shop.registers SET shop_id = $1 WHERE id = $2`, sh.shopA, r.id)
	sh.pass()
	m, ok = r.next(time.Second)
	if !ok || m.GetDown().GetSnapshot() == 0 {
		t.Fatalf("want the first part of a provisioning, got %v", m)
	}
	r.apply(m)
	report(m.Id)
	settle(t, sh, r)
	if _, ok := r.msgs[len(r.msgs)-1].Body.(*syncpb.ToReplica_EndSnapshot); !ok {
		t.Fatalf("the provisioning did not end: %v", r.msgs[len(r.msgs)-1])
	}
	if rejected() != 1 {
		t.Fatal("a row rejected by the provisioning's own part was forgotten at its end")
	}
}

// A report of a row the replica could not take from a message older than
// its last provisioning, arriving once that provisioning ended (a report
// sent again, an upload delivered late), is not recorded: the provisioning
// replaced what that message brought, and a record of it would never go,
// and would keep the table's digests from ever being compared again. A
// report of a message of the provisioning or after it is recorded.
func TestRejectionReportedOfAMessageBeforeTheLastProvisioningIsNotRecorded(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	apple := sh.product(sh.shopA, "apple", 1)
	sh.product(sh.shopB, "banana", 2)
	sh.pass()
	settle(t, sh, r)
	old := r.applied // the message that brought the apple, or a later one
	appleKey := []byte(codec.KeyOfValues(wire.UUIDValue(apple)))
	rejected := func() int {
		t.Helper()
		n := 0
		for _, j := range statusOf(t, sh, r.id).Rejected {
			if j.Side == "replica" && j.Table == "products" {
				n++
			}
		}
		return n
	}
	report := func(msg uint64) {
		t.Helper()
		if err := r.send(&syncpb.Up{LastApplied: r.applied, Rejected: []*syncpb.Rejected{
			{Table: "products", Key: appleKey, Reason: "CHECK constraint failed", Message: msg}}}); err != nil {
			t.Fatal(err)
		}
		settle(t, sh, r) // its Filed
	}
	// Provisioned into shop B, to the end.
	sh.exec(`UPDATE shop.registers SET shop_id = $1 WHERE id = $2`, sh.shopB, r.id)
	sh.pass()
	settle(t, sh, r)
	if st := statusOf(t, sh, r.id); st.Provisioning {
		t.Fatalf("the provisioning did not end: %s", st.ProvisionReason)
	}
	report(old)
	if n := rejected(); n != 0 {
		t.Fatalf("a report of message %d, before the provisioning that ended, left %d records", old, n)
	}
	// The table's digests are compared: a replica that lost its banana is
	// provisioned again.
	clear(r.held["products"])
	if err := r.send(&syncpb.Up{LastApplied: r.applied, Digests: []*syncpb.Digest{r.digest("products")}}); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, sh, r.id); !st.Provisioning {
		t.Fatal("a disagreeing digest of products was not compared")
	}
	settle(t, sh, r)
	// A report of a message since is recorded.
	report(r.applied)
	if n := rejected(); n != 1 {
		t.Fatalf("a report of message %d, after the provisioning, left %d records; want 1", r.applied, n)
	}
}

// Forgetting filed uploads never waits for the lock a build holds on the
// replica's row: the first record a lane forgets points at the replica (a
// foreign key), and the check of it passes that lock — a trim meeting
// many replicas in any order cannot deadlock with a batch of builds.
func TestForgettingFiledUploadsNeverWaitsForABuild(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	settle(t, sh, r)
	for i := range 2 {
		rec := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: int64(100 + i), ChangedAt: time.Now()}
		if err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, rec)}}); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, sh, r)
	sh.exec(`UPDATE public.sync_replicas SET provision_needed = true, provision_reason = 'test' WHERE id = $1`, r.id)
	reached, release := holdProvisioning(sh.s, r.id)
	defer release()
	built := nextAsync(sh.ctx, sh.s, r.id, 30*time.Second)
	<-reached

	done := make(chan error, 1)
	go func() { done <- sh.s.TrimFiled(sh.ctx, 0) }()
	finished, err := blockedOrDone(t, sh, done)
	release()
	if !finished {
		<-done
		t.Fatal("forgetting filed uploads waited for the lock a build holds on the replica's row")
	}
	if err != nil {
		t.Fatal(err)
	}
	if res := <-built; res.err != nil || !res.ok {
		t.Fatalf("the build held meanwhile: ok %v, %v", res.ok, res.err)
	}
	var upto int64
	if err := sh.pool.QueryRow(sh.ctx, `SELECT upto FROM public.sync_filed_trimmed WHERE replica = $1`, r.id).Scan(&upto); err != nil || upto != 1 {
		t.Fatalf("the lane's forgotten sequences reach %d (%v), want 1", upto, err)
	}
}
