package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// A replica's report of a message it cannot decode drops that message and
// provisions the replica again under new ids: it is never handed the
// message again, and comes to hold what the message brought. The same
// report sent again after the provisioning, or one of a message the
// replica acknowledged or the server never issued, changes nothing.
// (Before, the server had no word of such a message and handed it out
// for ever.)
func TestAMessageTheReplicaCannotDecodeIsDroppedAndTheReplicaProvisionedAgain(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "apple", 1)
	sh.pass()
	r.sync()
	for _, id := range []uint64{r.applied, r.applied + 100} {
		if err := r.send(&syncpb.Up{Undecodable: []*syncpb.Undecodable{{Message: id, Reason: "unexpected EOF"}}}); err != nil {
			t.Fatalf("a report of message %d: %v", id, err)
		}
		if st := statusOf(t, sh, r.id); st.Provisioning {
			t.Fatalf("a report of message %d (acknowledged, or never issued) provisioned the replica: %+v", id, st)
		}
	}
	r.sync() // the reports' confirmations

	sh.product(sh.shopA, "pear", 2)
	sh.pass()
	bad, ok := r.next(time.Second)
	if !ok {
		t.Fatal("no message after the pear")
	}
	report := &syncpb.Up{LastApplied: r.applied, Undecodable: []*syncpb.Undecodable{{Message: bad.Id, Reason: "proto: cannot parse invalid wire-format data\x00"}}}
	if err := r.send(report); err != nil {
		t.Fatalf("the report of message %d: %v", bad.Id, err)
	}
	st := statusOf(t, sh, r.id)
	if !st.Provisioning || !strings.Contains(st.ProvisionReason, "cannot decode message") || !strings.Contains(st.ProvisionReason, "invalid wire-format") {
		t.Fatalf("status %+v; want a provisioning saying the replica cannot decode message %d", st, bad.Id)
	}
	n := len(r.msgs)
	r.sync()
	for _, m := range r.msgs[n:] {
		if m.Id <= bad.Id {
			t.Fatalf("message %d handed out after the replica said it cannot decode message %d", m.Id, bad.Id)
		}
	}
	if !hasEnd(r.msgs[n:]) {
		t.Fatalf("no provisioning ended after the report: %v", r.msgs[n:])
	}
	r.expect("products", "apple", "pear")
	if st := statusOf(t, sh, r.id); st.Provisioning {
		t.Fatalf("still provisioning: %+v", st)
	}
	// The report again (not confirmed in time, say): nothing more.
	if err := r.send(report); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, sh, r.id); st.Provisioning {
		t.Fatalf("the same report, after the provisioning it caused, provisioned the replica again: %+v", st)
	}
}

func hasEnd(msgs []*syncpb.ToReplica) bool {
	for _, m := range msgs {
		if m.GetEndSnapshot() != nil {
			return true
		}
	}
	return false
}
