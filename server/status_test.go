package server_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

func tableOf(st server.ReplicaStatus, table string) server.TableStatus {
	for _, ts := range st.Tables {
		if ts.Table == table {
			return ts
		}
	}
	return server.TableStatus{Table: table}
}

// Status shows what the replica said of itself — rows unsent, its
// backlog, its build, rows it could not take — and when it was last seen
// and whether it is online.
func TestStatusShowsWhatTheReplicaReported(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	apple := sh.product(sh.shopA, "apple", 1)
	sh.pass()
	st := statusOf(t, sh, r.id)
	if !st.LastSeen.IsZero() || st.Online {
		t.Errorf("before it ever called: last seen %v, online %v", st.LastSeen, st.Online)
	}
	before := time.Now()
	settle(t, sh, r)
	st = statusOf(t, sh, r.id)
	if st.LastSeen.Before(before.Add(-time.Second)) || st.LastSeen.After(time.Now().Add(time.Second)) || !st.Online {
		t.Errorf("after it polled: last seen %v (polled from %v), online %v", st.LastSeen, before, st.Online)
	}

	appleKey := []byte(codec.KeyOfValues(wire.UUIDValue(apple)))
	rec := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: 100, ChangedAt: time.Now()}
	if err := r.send(&syncpb.Up{
		LastApplied: r.applied,
		Tables:      []*syncpb.TableChanges{receiptsUp(t, sh, rec)},
		Unsent:      []*syncpb.Count{{Table: "receipts", Rows: 4}},
		Backlog:     2,
		Build:       "register 1.2.3",
		Rejected:    []*syncpb.Rejected{{Table: "products", Key: appleKey, Reason: "CHECK constraint failed: price", Message: r.applied}},
	}); err != nil {
		t.Fatal(err)
	}
	st = statusOf(t, sh, r.id)
	if rt := tableOf(st, "receipts"); rt.Unsent != 4 || rt.Filed != 1 {
		t.Errorf("receipts: %+v, want 4 unsent and 1 filed", rt)
	}
	if st.Backlog != 2 || st.Build != "register 1.2.3" {
		t.Errorf("backlog %d, build %q", st.Backlog, st.Build)
	}
	if len(st.Rejected) != 1 {
		t.Fatalf("rejected %+v, want the apple", st.Rejected)
	}
	if j := st.Rejected[0]; j.Side != "replica" || j.Table != "products" || string(j.Key) != string(appleKey) ||
		j.Reason != "CHECK constraint failed: price" || j.At.IsZero() {
		t.Errorf("rejected %+v", j)
	}
	if st.Queued != 1 {
		t.Errorf("queued %d, want the Filed", st.Queued)
	}

	// A later report replaces the counts (the build, unsaid, stays).
	if err := r.send(&syncpb.Up{Unsent: []*syncpb.Count{{Table: "receipts", Rows: 0}}}); err != nil {
		t.Fatal(err)
	}
	st = statusOf(t, sh, r.id)
	if rt := tableOf(st, "receipts"); rt.Unsent != 0 || st.Backlog != 0 || st.Build != "register 1.2.3" {
		t.Errorf("after a later report: receipts %+v, backlog %d, build %q", rt, st.Backlog, st.Build)
	}

	// A replica that has not polled for long is offline; when it was last
	// seen stays.
	seen := st.LastSeen
	sh.exec(`UPDATE public.sync_replicas SET last_poll = last_poll - interval '1 hour' WHERE id = $1`, r.id)
	st = statusOf(t, sh, r.id)
	if st.Online || !st.LastSeen.Equal(seen) {
		t.Errorf("an hour after its last poll: online %v, last seen %v (was %v)", st.Online, st.LastSeen, seen)
	}
}
