package server_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// idBound is the bound of the ids a replica may report having applied
// beyond those the server issued it: 2^62.
const idBound = 1 << 62

// A replica's word that it applied a message at the id bound, or beyond,
// is refused the same way on every path — an upload's last_applied, a
// poll's applied, an acknowledgement — and changes nothing. One just
// below it is taken (the server was restored from an older backup): the
// server provisions the replica under ids from the bound on, and every
// path takes them, so the replica is never stuck. (Before, an upload
// reporting 2^62 was taken and moved the replica's next id past the
// bound, and every later acknowledgement and upload of it was refused.)
func TestAnIdAtTheBoundIsRefusedOnEveryPathAndTheReplicaGoesOn(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "apple", 1)
	sh.pass()
	r.sync()
	poll := func(applied uint64) error {
		ctx, cancel := context.WithTimeout(sh.ctx, 100*time.Millisecond)
		defer cancel()
		_, _, err := sh.s.Endpoint().Next(ctx, r.id, server.Applied{ID: applied})
		return err
	}
	paths := map[string]func(id uint64) error{
		"upload":          func(id uint64) error { return r.send(&syncpb.Up{LastApplied: id}) },
		"poll":            poll,
		"acknowledgement": func(id uint64) error { return sh.s.Endpoint().Ack(sh.ctx, r.id, id) },
	}
	before := engineState(t, sh, r.id)
	for _, id := range []uint64{idBound, idBound + 1, math.MaxInt64, math.MaxUint64} {
		for path, say := range paths {
			if err := say(id); !errors.Is(err, server.ErrNotIssued) {
				t.Errorf("%s of message %d = %v; want a refusal wrapping ErrNotIssued", path, id, err)
			}
			if after := engineState(t, sh, r.id); after != before {
				t.Fatalf("%s of message %d, refused, changed the server's record of the replica:\n%s\nwas\n%s", path, id, after, before)
			}
		}
	}

	// Just below the bound: the server was restored; the replica is
	// provisioned under ids from the bound on.
	if err := r.send(&syncpb.Up{LastApplied: idBound - 1}); err != nil {
		t.Fatalf("upload of last_applied 2^62-1 = %v; want it taken", err)
	}
	if st := statusOf(t, sh, r.id); !st.Provisioning {
		t.Fatalf("status %+v; want a provisioning after the report", st)
	}
	r.applied = idBound - 1
	sh.product(sh.shopA, "pear", 2)
	sh.pass()
	if n := r.sync(); n < 2 {
		t.Fatalf("%d messages after the report; want the provisioning's, at least 2", n)
	}
	if r.applied < idBound {
		t.Fatalf("the last message came under id %d; want one at or past the bound", r.applied)
	}
	r.expect("products", "apple", "pear")
	// Every path takes the ids issued past the bound, and provisions
	// nothing more.
	sh.product(sh.shopA, "plum", 3)
	sh.pass()
	r.sold(t, 7)
	if err := poll(r.applied); err != nil {
		t.Fatalf("a poll saying it applied message %d (issued) = %v", r.applied, err)
	}
	filed := len(r.filed)
	if n := r.sync(); n == 0 {
		t.Fatal("no message after the plum and the sale")
	}
	if len(r.filed) == filed {
		t.Fatal("the sale's confirmation never came")
	}
	if err := r.send(&syncpb.Up{LastApplied: r.applied}); err != nil {
		t.Fatalf("upload of last_applied %d (issued) = %v", r.applied, err)
	}
	if err := poll(r.applied); err != nil {
		t.Fatalf("a poll saying it applied message %d (issued) = %v", r.applied, err)
	}
	r.expect("products", "apple", "pear", "plum")
	if st := statusOf(t, sh, r.id); st.Provisioning || st.LastApplied != r.applied {
		t.Fatalf("status %+v; want no provisioning, last applied %d", st, r.applied)
	}
}
