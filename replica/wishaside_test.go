package replica

import (
	"context"
	"strings"
	"testing"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// A wish this build carries out none of is set aside however it came: in
// a provisioning, switched in at its EndSnapshot; and recorded, not yet
// answered, by an earlier build that handled its table, once this one
// starts. Either way it waits, saying why, rather than stand pending for
// ever: no handler would ever answer it.
func TestWishesOfATableWithoutAHandlerAreSetAsideAtAProvisioningAndAtStart(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		ctx := context.Background()
		w := newWishShop(t, d, nil, nil, nil)
		mustExec(t, w.r.db, "INSERT INTO knobs VALUES (?, 'volume', 3, 1)", register)
		// A provisioning staging a wish of a table this build does not
		// declare.
		drawer := wire.AppendTuple(nil, []codec.Value{wire.TextValue("d1")})
		w.receive(t, &syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Snapshot: 5, Wishes: []*syncpb.Wish{
			{Table: "drawers", Key: drawer, Wish: 7, Columns: []string{"open"}, Wanted: wire.AppendTuple(nil, []codec.Value{wire.BoolValue(true)})},
		}}}})
		if got := w.receive(t, &syncpb.ToReplica{Id: 2, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{Snapshot: 5}}}); !got.Provisioned {
			t.Fatalf("EndSnapshot = %+v", got)
		}
		var state WishState
		var reason string
		if err := w.r.db.QueryRow("SELECT state, reason FROM sync_wishes WHERE tbl = 'drawers'").Scan(&state, &reason); err != nil {
			t.Fatal(err)
		}
		if state != WishWaiting || !strings.Contains(reason, `"drawers", which this build of the replica does not declare`) {
			t.Errorf("the provisioning's wish of drawers stands %v %q; want waiting, saying why", state, reason)
		}

		// A wish of knobs, recorded by this build, not offered yet.
		w.down(t, 3, w.wish(t, knob("volume"), 1, integer(5), nil))
		if _, state, _ := w.held(t, knob("volume")); state != WishPending {
			t.Fatalf("the wish of knobs stands %v before any offer", state)
		}
		if err := w.r.Close(); err != nil {
			t.Fatal(err)
		}
		// The next build does not declare knobs; a build of other
		// declarations brings the triggers up to date first.
		if err := Install(ctx, w.r.db, shopCodecs(t)); err != nil {
			t.Fatal(err)
		}
		next, err := New(ctx, w.r.db, shopCodecs(t), Me(register), newRecorder(), quietSettings())
		if err != nil {
			t.Fatal(err)
		}
		defer next.Close()
		if _, state, reason := w.held(t, knob("volume")); state != WishWaiting || !strings.Contains(reason, `"knobs", which this build of the replica does not declare`) {
			t.Errorf("once a build without knobs started, their wish stands %v %q; want waiting, saying why", state, reason)
		}
	})
}
