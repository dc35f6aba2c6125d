package replica

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// upRows decodes the upserts of table in an upward message.
func upRows[T magicsync.Declarer](t testing.TB, c *magicsync.Codecs, up *syncpb.Up) []T {
	t.Helper()
	var zero T
	tc, err := c.Of(zero)
	if err != nil {
		t.Fatal(err)
	}
	ch := tableOf(up, tc.Name)
	if ch == nil {
		return nil
	}
	var out []T
	for _, tuple := range ch.Upserts {
		vals, err := wire.DecodeTuple(tuple, nil)
		if err != nil {
			t.Fatal(err)
		}
		var row T
		if err := tc.Fill(&row, vals); err != nil {
			t.Fatal(err)
		}
		out = append(out, row)
	}
	return out
}

func TestRowEditedThreeTimesGoesUpOnceWithItsLastValues(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		id := uuid.New()
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, id, t0)
		mustExec(t, r.db, "UPDATE receipts SET total_cents = 200 WHERE id = ?", id)
		mustExec(t, r.db, "UPDATE receipts SET total_cents = 300, note = 'third' WHERE id = ?", id)
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		got := upRows[Receipt](t, r.codecs, up.next(t).msg.Up)
		if len(got) != 1 || got[0].TotalCents != 300 || got[0].Note == nil || *got[0].Note != "third" || !got[0].At.Equal(t0) {
			t.Fatalf("receipts sent = %+v; want the one receipt as it is now", got)
		}
	})
}

func TestDeletedAndReplacedRowsGoUpAsDeletes(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		gone, moved := uuid.New(), uuid.New()
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, gone, t0)
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, moved, t0)
		mustExec(t, r.db, "DELETE FROM receipts WHERE id = ?", gone)
		// An UPDATE that changes the key: the old key is gone.
		renamed := uuid.New()
		mustExec(t, r.db, "UPDATE receipts SET id = ? WHERE id = ?", renamed, moved)
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		ch := tableOf(up.next(t).msg.Up, "receipts")
		deleted := map[magicsync.Key]bool{}
		for _, k := range ch.Deletes {
			deleted[magicsync.Key(k)] = true
		}
		for _, id := range []uuid.UUID{gone, moved} {
			if !deleted[keyOf(t, r.codecs, Receipt{RegisterID: register, ID: id})] {
				t.Errorf("receipt %v went up as %v; want a delete", id, ch)
			}
		}
		if len(ch.Upserts) != 1 {
			t.Fatalf("%d upserts; want the renamed receipt", len(ch.Upserts))
		}
		// INSERT OR REPLACE deletes the row it replaces: with recursive
		// triggers, the delete is noted too, and the row goes up as it is now.
		r2, up2 := newShopReplica(t, d, quietSettings())
		mustExec(t, r2.db, "INSERT INTO positions VALUES (?, 1, 1.5, ?)", register, t0)
		if _, err := r2.sendOnce(ctx, r2.lane("main")); err != nil {
			t.Fatal(err)
		}
		up2.next(t)
		mustExec(t, r2.db, "INSERT OR REPLACE INTO positions VALUES (?, 1, 2.5, ?)", register, t0.Add(time.Second))
		if n := count(t, r2.db, "SELECT change FROM sync_pending WHERE tbl = 'positions'"); n < 3 {
			t.Fatalf("INSERT OR REPLACE noted %d writes in all; want the delete and the insert noted", n)
		}
		if _, err := r2.sendOnce(ctx, r2.lane("main")); err != nil {
			t.Fatal(err)
		}
		got := upRows[Position](t, r2.codecs, up2.next(t).msg.Up)
		if len(got) != 1 || got[0].Lat != 2.5 {
			t.Fatalf("positions sent after REPLACE = %+v; want lat 2.5", got)
		}
	})
}

func TestNothingIsForgottenWithoutFiled(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		clock := newFakeClock()
		s.Clock = clock
		s.ResendAfter = time.Minute
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		b := builder{t, r.codecs}
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		main := r.lane("main")
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		first := up.next(t).msg
		// No confirmation yet: nothing more to send, and nothing forgotten.
		if more, err := r.sendOnce(ctx, main); err != nil || more {
			t.Fatalf("sent again at once: %v, %v", more, err)
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_pending"); n != 1 {
			t.Fatalf("the receipt was forgotten before Filed (%d noted)", n)
		}
		// The server never answers: after ResendAfter it goes again.
		clock.mu.Lock()
		clock.now = clock.now.Add(2 * time.Minute)
		clock.mu.Unlock()
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		second := up.next(t).msg
		if tableOf(second.Up, "receipts") == nil || second.Sequence <= first.Sequence {
			t.Fatalf("the unconfirmed receipt was not sent again with a new sequence: %v", second)
		}
		// Filed for the first sequence: it was sent again since, so it stays
		// until the second is filed.
		if _, err := r.Endpoint().Receive(ctx, b.filed(1, "main", first.Sequence)); err != nil {
			t.Fatal(err)
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_pending"); n != 1 {
			t.Fatal("a Filed of an earlier send forgot a row sent again since")
		}
		if _, err := r.Endpoint().Receive(ctx, b.filed(2, "main", second.Sequence)); err != nil {
			t.Fatal(err)
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_pending"); n != 0 {
			t.Fatalf("%d rows remain after Filed", n)
		}
	})
}

func TestRowChangedAfterSendIsSentAgain(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		b := builder{t, r.codecs}
		id := uuid.New()
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, id, t0)
		main := r.lane("main")
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		first := up.next(t).msg
		mustExec(t, r.db, "UPDATE receipts SET total_cents = 150 WHERE id = ?", id)
		if _, err := r.Endpoint().Receive(ctx, b.filed(1, "main", first.Sequence)); err != nil {
			t.Fatal(err)
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_pending"); n != 1 {
			t.Fatal("Filed forgot a row written after it was sent")
		}
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		got := upRows[Receipt](t, r.codecs, up.next(t).msg.Up)
		if len(got) != 1 || got[0].TotalCents != 150 {
			t.Fatalf("sent again = %+v; want total 150", got)
		}
	})
}

func TestDigestsGoUpWhenDue(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.DigestsEvery = time.Hour
		clock := newFakeClock()
		s.Clock = clock
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(product(1, 100), product(2, 200)))); err != nil {
			t.Fatal(err)
		}
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		msg := up.next(t).msg
		var products *syncpb.Digest
		for _, dg := range msg.Up.Digests {
			if dg.Table == "products" {
				products = dg
			}
		}
		if products == nil || products.Rows != 2 || products.AsOf != 1 {
			t.Fatalf("digests = %v; want products with 2 rows as of message 1", msg.Up.Digests)
		}
		// Not due again within the hour.
		if more, err := r.sendOnce(ctx, r.lane("main")); err != nil || more {
			t.Fatal(more, err)
		}
		select {
		case s := <-up.got:
			t.Fatalf("sent %v before the digests were due again", s.msg)
		default:
		}
	})
}

func TestFailingLaneBacksOffAloneAndLosesNothing(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Lanes = []Lane{{Name: "telemetry", Tables: []string{"positions"}}}
		s.Idle = time.Hour
		s.BackoffMin, s.BackoffMax = 100*time.Millisecond, 800*time.Millisecond
		clock := newFakeClock()
		s.Clock = clock
		r, up := newShopReplica(t, d, s)
		var down atomic.Bool
		down.Store(true)
		var attempts atomic.Int32
		up.fail = func(_ context.Context, lane string) error {
			if lane == "telemetry" && down.Load() {
				attempts.Add(1)
				return TransportError(true, errors.New("the head office is out of reach"))
			}
			return nil
		}
		mustExec(t, r.db, "INSERT INTO positions VALUES (?, 1, 1.5, ?)", register, t0)
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		runReplica(t, r)
		// Main goes up while telemetry fails.
		up.nextWith(t, "main", "receipts")
		// Telemetry's waits grow: 100, 200, 400, 800, 800 ms, each jittered to
		// between half and all of it. Idle waits (an hour) are main's.
		want := []time.Duration{100, 200, 400, 800, 800}
		for i := 0; i < len(want); {
			var w time.Duration
			select {
			case w = <-clock.waits:
			case <-time.After(10 * time.Second):
				t.Fatalf("backoff %d never came", i)
			}
			if w == time.Hour {
				continue
			}
			hi := want[i] * time.Millisecond
			if w < hi/2 || w > hi {
				t.Fatalf("backoff %d = %v; want within [%v, %v]", i, w, hi/2, hi)
			}
			i++
			clock.fireAll()
		}
		if n := attempts.Load(); n < 5 {
			t.Fatalf("%d attempts; want one per backoff", n)
		}
		down.Store(false)
		clock.fireAll()
		got := upRows[Position](t, r.codecs, up.nextWith(t, "telemetry", "positions").msg.Up)
		if len(got) != 1 || got[0].Lat != 1.5 {
			t.Fatalf("after the outage telemetry sent %+v; want the position", got)
		}
	})
}

func TestHangingLaneDoesNotDelayMain(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Lanes = []Lane{{Name: "telemetry", Tables: []string{"positions"}}}
		s.SendTimeout = time.Hour // telemetry's send hangs for the whole test
		r, up := newShopReplica(t, d, s)
		hung := make(chan struct{})
		released := make(chan struct{})
		// Run finishes the send in flight before it returns: the test lets
		// it go once it is done.
		letGo := make(chan struct{})
		defer close(letGo)
		var once sync.Once
		up.fail = func(ctx context.Context, lane string) error {
			if lane != "telemetry" {
				return nil
			}
			once.Do(func() { close(hung) })
			select {
			case <-ctx.Done():
				close(released)
				return ctx.Err()
			case <-letGo:
				return errors.New("let go by the test")
			}
		}
		mustExec(t, r.db, "INSERT INTO positions VALUES (?, 1, 1.5, ?)", register, t0)
		runReplica(t, r)
		<-hung
		// Telemetry hangs; a receipt written now goes up at once.
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		r.Nudge()
		up.nextWith(t, "main", "receipts")
		select {
		case <-released:
			t.Fatal("telemetry's send ended before main's went up: main waited for it")
		default:
		}
	})
}

func TestHungSendIsGivenUpAfterSendTimeoutAndTriedAgain(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Lanes = []Lane{{Name: "telemetry", Tables: []string{"positions"}}}
		s.SendTimeout = 200 * time.Millisecond
		r, up := newShopReplica(t, d, s)
		type hang struct {
			// allowed is how long the send's context gave it, from its
			// deadline back to when the uplink was called (the engine
			// sets the deadline just before: a little more than allowed).
			allowed time.Duration
			err     error
		}
		hangs := make(chan hang, 1)
		var tries atomic.Int32
		up.fail = func(ctx context.Context, lane string) error {
			if lane != "telemetry" || tries.Add(1) > 1 {
				return nil
			}
			start := time.Now()
			deadline, ok := ctx.Deadline()
			<-ctx.Done() // hangs until the engine gives up on it
			if !ok {
				deadline = start
			}
			hangs <- hang{deadline.Sub(start), ctx.Err()}
			return ctx.Err()
		}
		mustExec(t, r.db, "INSERT INTO positions VALUES (?, 1, 1.5, ?)", register, t0)
		runReplica(t, r)
		var h hang
		select {
		case h = <-hangs:
		case <-time.After(10 * time.Second):
			t.Fatal("the hung send was never given up")
		}
		if !errors.Is(h.err, context.DeadlineExceeded) || h.allowed > s.SendTimeout || h.allowed < s.SendTimeout/2 {
			t.Fatalf("the hung send was allowed %v and ended with %v; want SendTimeout (%v) and a deadline", h.allowed, h.err, s.SendTimeout)
		}
		up.nextWith(t, "telemetry", "positions")
	})
}

func TestSendTimeoutDefaultsTo30Seconds(t *testing.T) {
	t.Parallel()
	if got := (Settings{}).withDefaults().SendTimeout; got != 30*time.Second {
		t.Fatalf("SendTimeout defaults to %v; want 30s", got)
	}
}

func TestPermanentRefusalMovesRowsToBacklogUntilAnotherBuild(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Build = "v1"
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		up.fail = func(context.Context, string) error {
			return TransportError(false, errors.New("413: too large for this server"))
		}
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		if _, err := r.sendOnce(ctx, r.lane("main")); err == nil || isRetryable(err) {
			t.Fatalf("sendOnce = %v; want a permanent refusal", err)
		}
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Backlog != 1 || st.Lanes[0].Unsent != 0 {
			t.Fatalf("status = %+v; want the receipt in the backlog", st)
		}
		up.fail = nil
		// Not sent again by the same build.
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		for len(up.got) > 0 {
			if m := <-up.got; tableOf(m.msg.Up, "receipts") != nil {
				t.Fatal("the same build sent the backlog again")
			}
		}
		// Another build takes it up again.
		s.Build = "v2"
		r2, err := New(ctx, r.db, r.codecs, Me(register), up, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r2.sendOnce(ctx, r2.lane("main")); err != nil {
			t.Fatal(err)
		}
		up.nextWith(t, "main", "receipts")
	})
}

func TestNudgeSendsAtOnce(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Idle = time.Hour
		r, up := newShopReplica(t, d, s)
		runReplica(t, r)
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		r.Nudge()
		up.nextWith(t, "main", "receipts") // an hour's idle would fail the test's 10 s wait
	})
}

func TestRunFinishesTheSendInFlightWhenStopped(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newShopReplica(t, d, quietSettings())
		started := make(chan struct{})
		release := make(chan struct{})
		var finished atomic.Bool
		up.fail = func(ctx context.Context, lane string) error {
			close(started)
			<-release
			finished.Store(ctx.Err() == nil)
			up.fail = nil
			return nil
		}
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = r.Run(ctx); close(done) }()
		<-started
		cancel()
		select {
		case <-done:
			t.Fatal("Run returned with a send in flight")
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		<-done
		if !finished.Load() {
			t.Fatal("the send in flight had its context cancelled")
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_pending WHERE sent_seq IS NOT NULL"); n != 1 {
			t.Fatal("the finished send was not recorded")
		}
	})
}

func TestProvisioningReplacesCatalogsAndResendsOwnRows(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		b := builder{t, r.codecs}
		kept, changed, dropped := product(1, 100), product(2, 200), product(3, 300)
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(kept, changed, dropped))); err != nil {
			t.Fatal(err)
		}
		receipt := uuid.New()
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, receipt, t0)
		mustExec(t, r.db, "INSERT INTO settings VALUES (?, 'footer', 'thanks', ?)", register, t0)
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		first := up.next(t).msg
		if _, err := r.Endpoint().Receive(ctx, b.filed(2, "main", first.Sequence)); err != nil {
			t.Fatal(err)
		}
		changed.PriceCents = 250
		added := product(4, 400)
		stage := func(id uint64, rows ...magicsync.Declarer) []byte {
			msg, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: id, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Snapshot: 9, Tables: []*syncpb.TableChanges{b.upserts(rows...)}}}})
			if err != nil {
				t.Fatal(err)
			}
			return msg
		}
		got, err := r.Endpoint().Receive(ctx, stage(3, kept, changed))
		if err != nil || !got.Staged {
			t.Fatalf("the first part = %+v, %v; want it staged", got, err)
		}
		if n := count(t, r.db, "SELECT price_cents FROM products WHERE id = ?", changed.ID); n != 200 {
			t.Fatal("a staged part changed the table before EndSnapshot")
		}
		if _, err := r.Endpoint().Receive(ctx, stage(4, added)); err != nil {
			t.Fatal(err)
		}
		// The server records a setting this replica no longer holds.
		lost := Setting{RegisterID: register, Name: "brightness"}
		end, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: 5, Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: &syncpb.EndSnapshot{
			Snapshot: 9, Tables: []string{"products", "images"},
			Own: []*syncpb.TableKeys{{Table: "settings", Keys: [][]byte{[]byte(keyOf(t, r.codecs, lost)), []byte(keyOf(t, r.codecs, Setting{RegisterID: register, Name: "footer"}))}}},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err = r.Endpoint().Receive(ctx, end); err != nil || !got.Provisioned {
			t.Fatalf("EndSnapshot = %+v, %v", got, err)
		}
		if n := count(t, r.db, "SELECT count(*) FROM products"); n != 3 {
			t.Fatalf("%d products after provisioning; want 3", n)
		}
		if n := count(t, r.db, "SELECT count(*) FROM products WHERE id = ?", dropped.ID); n != 0 {
			t.Fatal("a product the snapshot lacks was kept")
		}
		if n := count(t, r.db, "SELECT price_cents FROM products WHERE id = ?", changed.ID); n != 250 {
			t.Fatalf("a product of the same key was not overwritten: %d", n)
		}
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		msg := up.next(t).msg
		if !msg.Up.Resent {
			t.Fatal("own rows after provisioning were not marked as sent again")
		}
		if rs := upRows[Receipt](t, r.codecs, msg.Up); len(rs) != 1 || rs[0].ID != receipt {
			t.Fatalf("receipts sent again = %+v", rs)
		}
		settings := tableOf(msg.Up, "settings")
		if settings == nil || len(settings.Upserts) != 1 || len(settings.Deletes) != 1 || magicsync.Key(settings.Deletes[0]) != keyOf(t, r.codecs, lost) {
			t.Fatalf("settings sent = %v; want the footer again and the lost setting deleted", settings)
		}
	})
}

func TestStatusReportsWhatWaits(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Lanes = []Lane{{Name: "telemetry", Tables: []string{"positions"}}}
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		b := builder{t, r.codecs}
		refused := product(2, -5) // a CHECK refuses a negative price
		if _, err := r.Endpoint().Receive(ctx, b.down(7, b.upserts(product(1, 100), refused))); err != nil {
			t.Fatal(err)
		}
		mustExec(t, r.db, "INSERT INTO positions VALUES (?, 1, 1.5, ?)", register, t0)
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 200, NULL, ?)", register, uuid.New(), t0)
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		up.next(t)
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.ID != register || !st.Known {
			t.Fatalf("identity = %v, %v", st.ID, st.Known)
		}
		if st.LastApplied != 7 {
			t.Fatalf("last applied = %d; want 7", st.LastApplied)
		}
		if len(st.Rejected) != 1 || st.Rejected[0].Table != "products" || st.Rejected[0].Key != keyOf(t, r.codecs, refused) ||
			st.Rejected[0].Message != 7 || !strings.Contains(st.Rejected[0].Reason, "CHECK") {
			t.Fatalf("rejected = %+v; want the refused product of message 7, with the CHECK as reason", st.Rejected)
		}
		lanes := map[string]LaneStatus{}
		for _, l := range st.Lanes {
			lanes[l.Name] = l
		}
		if lanes["main"].Unconfirmed != 2 || lanes["main"].Unsent != 0 || lanes["telemetry"].Unsent != 1 {
			t.Fatalf("lanes = %+v; want main 2 unconfirmed, telemetry 1 unsent", st.Lanes)
		}
	})
}

func TestSendErrorsAreClassified(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want bool
	}{
		{TransportError(true, errors.New("503")), true},
		{TransportError(false, errors.New("400")), false},
		{errors.New("unmarked"), true},
		{context.DeadlineExceeded, true},
	}
	for _, c := range cases {
		if got := isRetryable(c.err); got != c.want {
			t.Errorf("isRetryable(%v) = %v; want %v", c.err, got, c.want)
		}
	}
	var se *SendError
	if !errors.As(TransportError(false, errors.New("x")), &se) || se.Retryable {
		t.Fatal("TransportError is not a *SendError")
	}
}

func TestParseQuotedReadsWhatQuoteWrites(t *testing.T) {
	t.Parallel()
	r, _ := newShopReplica(t, sqlitetest.Modernc(), quietSettings())
	var text string
	if err := r.db.QueryRow(`SELECT quote('it''s, here') || ',' || quote(-42) || ',' || quote(1.5) || ',' || quote(x'00ff') || ',' || quote(NULL) || ',' || quote(1e999)`).Scan(&text); err != nil {
		t.Fatal(err)
	}
	got, err := parseQuoted(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 || got[0] != "it's, here" || got[1] != int64(-42) || got[2] != 1.5 || string(got[3].([]byte)) != "\x00\xff" || got[4] != nil || got[5] != math.Inf(1) {
		t.Fatalf("parseQuoted(%s) = %#v", text, got)
	}
	for _, bad := range []string{"", "'open", "X'0", "X'0'", "12abc", "1,"} {
		if _, err := parseQuoted(bad); err == nil {
			t.Errorf("parseQuoted(%q) did not fail", bad)
		}
	}
}

// FuzzParseQuoted: whatever the text, parseQuoted returns values or an
// error, never panics; and values it returns, quoted again as SQLite's
// quote() would, read back the same.
func FuzzParseQuoted(f *testing.F) {
	for _, seed := range []string{
		"'it''s, here',-42,1.5,X'00FF',NULL", "'a'", "X''", "0", "-9223372036854775808", "1e308", "Inf,-Inf",
		"'", "X'0", "x'zz'", ",", "NULL,", "'a''", "1.5.5", "'a'b",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		vals, err := parseQuoted(text)
		if err != nil {
			return
		}
		again, err := parseQuoted(quoteLikeSQLite(vals))
		if err != nil {
			t.Fatalf("%q read as %#v, which quoted again does not read: %v", text, vals, err)
		}
		if fmt.Sprintf("%#v", again) != fmt.Sprintf("%#v", vals) {
			t.Fatalf("%q read as %#v; quoted again, %#v", text, vals, again)
		}
	})
}

// quoteLikeSQLite writes values as SQLite's quote() does, joined by commas.
func quoteLikeSQLite(vals []any) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		switch v := v.(type) {
		case nil:
			parts[i] = "NULL"
		case int64:
			parts[i] = strconv.FormatInt(v, 10)
		case float64:
			switch {
			case math.IsInf(v, 1):
				parts[i] = "9.0e+999"
			case math.IsInf(v, -1):
				parts[i] = "-9.0e+999"
			default:
				parts[i] = strconv.FormatFloat(v, 'e', -1, 64)
			}
		case string:
			parts[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		case []byte:
			parts[i] = "X'" + strings.ToUpper(hex.EncodeToString(v)) + "'"
		}
	}
	return strings.Join(parts, ",")
}

// deletes lists the keys a message deletes of table.
func deletes(up *syncpb.Up, table string) []magicsync.Key {
	var out []magicsync.Key
	if ch := tableOf(up, table); ch != nil {
		for _, k := range ch.Deletes {
			out = append(out, magicsync.Key(k))
		}
	}
	return out
}

// SQLite's way to change a table the ALTER TABLE it has cannot: create the
// new table, copy, drop the old, rename. The copy numbers the rows anew
// (a column list keeps SQLite from copying the rowids as they were).
func TestRowsNotedBeforeATableRebuildGoUpByKey(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
		for i, id := range ids {
			mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, ?, NULL, ?)", register, id, 100*(i+1), t0)
		}
		mustExec(t, r.db, "DELETE FROM receipts WHERE id = ?", ids[0])
		mustExec(t, r.db, `CREATE TABLE receipts_new (register_id TEXT NOT NULL, id TEXT NOT NULL, total_cents INTEGER NOT NULL, note TEXT, at TIMESTAMP NOT NULL, PRIMARY KEY (register_id, id));
			INSERT INTO receipts_new (register_id, id, total_cents, note, at) SELECT register_id, id, total_cents, note, at FROM receipts ORDER BY total_cents;
			DROP TABLE receipts;
			ALTER TABLE receipts_new RENAME TO receipts;`)
		if err := Install(ctx, r.db, r.codecs); err != nil {
			t.Fatal(err)
		}
		if n := count(t, r.db, "SELECT max(rowid) FROM receipts"); n != 2 {
			t.Fatal("the rebuild kept the rowids; the test needs them renumbered")
		}
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		msg := up.next(t).msg.Up
		got := map[uuid.UUID]int64{}
		for _, rc := range upRows[Receipt](t, r.codecs, msg) {
			got[rc.ID] = rc.TotalCents
		}
		if len(got) != 2 || got[ids[1]] != 200 || got[ids[2]] != 300 {
			t.Errorf("receipts sent = %v; want the second (200) and third (300) as they are", got)
		}
		gone := deletes(msg, "receipts")
		if len(gone) != 1 || gone[0] != keyOf(t, r.codecs, Receipt{RegisterID: register, ID: ids[0]}) {
			t.Errorf("deletes sent = %v; want the first receipt's only", gone)
		}
	})
}

func TestMoreRowsThanOneLookupTakesAllGoUp(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		const n = 1000 // rows are read 450 keys of two columns at a time
		tx, err := r.db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := tx.Exec("INSERT INTO receipts VALUES (?, ?, ?, NULL, ?)", register, uuid.New(), i, t0); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		msg := up.next(t).msg.Up
		seen := map[int64]bool{}
		for _, rc := range upRows[Receipt](t, r.codecs, msg) {
			seen[rc.TotalCents] = true
		}
		if len(seen) != n || len(deletes(msg, "receipts")) != 0 {
			t.Fatalf("%d distinct receipts and %d deletes sent; want %d receipts", len(seen), len(deletes(msg, "receipts")), n)
		}
	})
}

// The host's write transaction holds SQLite's write lock; with a busy
// timeout of a millisecond, a turn that took the lock would fail.
func TestIdleTurnLeavesTheWriteLockToTheHost(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		p := sqlitetest.Safe()
		p.BusyTimeout = time.Millisecond
		db := shopDBAt(t, d, sqlitetest.NewPath(t), p)
		ctx := context.Background()
		up := newRecorder()
		r, err := New(ctx, db, shopCodecs(t), Me(register), up, quietSettings())
		if err != nil {
			t.Fatal(err)
		}
		host, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer host.Close()
		if _, err := host.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		if _, err := host.ExecContext(ctx, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0); err != nil {
			t.Fatal(err)
		}
		for _, l := range r.lanes {
			if more, err := r.sendOnce(ctx, l); err != nil || more {
				t.Fatalf("an idle turn of lane %s while the host writes = %v, %v; want nothing to do", l.name, more, err)
			}
		}
		if _, err := host.ExecContext(ctx, "COMMIT"); err != nil {
			t.Fatalf("the host's commit: %v", err)
		}
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		up.nextWith(t, "main", "receipts")
	})
}

// advance moves the fake clock on by d.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestUnconfirmedRejectedRowsAreReportedAgainAfterResendAfter(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		clock := newFakeClock()
		s.Clock = clock
		s.ResendAfter = time.Minute
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		b := builder{t, r.codecs}
		refused := product(2, -5) // a CHECK refuses a negative price
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(refused))); err != nil {
			t.Fatal(err)
		}
		main := r.lane("main")
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		first := up.took(t).msg
		if len(first.Up.Rejected) != 1 {
			t.Fatalf("first message reports %v; want the refused product", first.Up.Rejected)
		}
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		if len(up.got) != 0 {
			t.Fatalf("sent %v before ResendAfter", (<-up.got).msg)
		}
		// The server never confirms: after ResendAfter the report goes again.
		clock.advance(2 * time.Minute)
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		second := up.took(t).msg
		if len(second.Up.Rejected) != 1 || second.Up.Rejected[0].Table != "products" || second.Sequence <= first.Sequence {
			t.Fatalf("after ResendAfter the message reports %v (seq %d after %d); want the refused product again", second.Up.Rejected, second.Sequence, first.Sequence)
		}
		// Confirmed at last: not reported again.
		if _, err := r.Endpoint().Receive(ctx, b.filed(2, "main", second.Sequence)); err != nil {
			t.Fatal(err)
		}
		clock.advance(2 * time.Minute)
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		for len(up.got) > 0 {
			if m := (<-up.got).msg; len(m.Up.Rejected) != 0 {
				t.Fatalf("a confirmed report went up again: %v", m.Up.Rejected)
			}
		}
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Rejected) != 1 || !st.Rejected[0].Reported {
			t.Fatalf("status rejected = %+v; want the product, reported", st.Rejected)
		}
	})
}

func TestRejectedRowsBeyondOneMessageAreReportedInTheNext(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.MaxRows = 1
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(product(1, -1), product(2, -2)))); err != nil {
			t.Fatal(err)
		}
		main := r.lane("main")
		reported := map[magicsync.Key]bool{}
		for i := uint64(0); i < 2; i++ {
			if _, err := r.sendOnce(ctx, main); err != nil {
				t.Fatal(err)
			}
			m := up.took(t).msg
			for _, rj := range m.Up.Rejected {
				reported[magicsync.Key(rj.Key)] = true
			}
			if _, err := r.Endpoint().Receive(ctx, b.filed(2+i, "main", m.Sequence)); err != nil {
				t.Fatal(err)
			}
		}
		if len(reported) != 2 {
			t.Fatalf("reported %v in two messages of one row each; want both refused products", reported)
		}
	})
}

// A revoked token: the server refuses every message for good.
func TestPermanentRefusalBacksOffAndSetsAsideWhatTheMessageCarried(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Idle = time.Hour
		s.BackoffMin, s.BackoffMax = 100*time.Millisecond, 800*time.Millisecond
		s.Build = "v1"
		clock := newFakeClock()
		s.Clock = clock
		db := shopDB(t, d)
		ctx := context.Background()
		attempts := make(chan *syncpb.ToServer, 1000)
		var refuse atomic.Bool
		refuse.Store(true)
		uplink := UplinkFunc(func(_ context.Context, _ uuid.UUID, _ string, body []byte) error {
			m, err := wire.DecodeToServer(body)
			if err != nil {
				return TransportError(false, err)
			}
			attempts <- m
			if refuse.Load() {
				return TransportError(false, errors.New("401: the token was revoked"))
			}
			return nil
		})
		r, err := New(ctx, db, shopCodecs(t), Me(register), uplink, s)
		if err != nil {
			t.Fatal(err)
		}
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(product(1, 100), product(2, -5)))); err != nil {
			t.Fatal(err)
		}
		mustExec(t, db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		runCtx, stop := context.WithCancel(ctx)
		stopped := make(chan struct{})
		go func() { defer close(stopped); _ = r.Run(runCtx) }()
		defer func() { stop(); <-stopped }()

		next := func() *syncpb.ToServer {
			t.Helper()
			select {
			case m := <-attempts:
				return m
			case <-time.After(10 * time.Second):
				t.Fatal("no message was sent within 10 s")
				return nil
			}
		}
		// backoff waits for the lane's next wait, which must come before
		// any other attempt, and checks it lies within [hi/2, hi].
		backoff := func(hi time.Duration) {
			t.Helper()
			for {
				select {
				case w := <-clock.waits:
					if w < hi/2 || w > hi {
						t.Fatalf("the lane waited %v; want a backoff within [%v, %v]", w, hi/2, hi)
					}
					return
				case m := <-attempts:
					t.Fatalf("message %d went without a wait after a refusal for good", m.Sequence)
				case <-time.After(10 * time.Second):
					t.Fatal("the lane never waited")
				}
			}
		}
		first := next()
		if tableOf(first.Up, "receipts") == nil || len(first.Up.Rejected) != 1 || first.Up.LastApplied != 1 {
			t.Fatalf("first message = %v; want the receipt, the refused product and the last applied", first.Up)
		}
		backoff(100 * time.Millisecond)
		clock.fireAll()
		// The receipt and the report are set aside; the last applied goes
		// again, after a longer wait.
		second := next()
		if len(second.Up.Tables) != 0 || len(second.Up.Rejected) != 0 || second.Up.LastApplied != 1 {
			t.Fatalf("second message = %v; want only the last applied", second.Up)
		}
		backoff(200 * time.Millisecond)
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Backlog != 1 {
			t.Fatalf("backlog = %d; want the receipt", st.Backlog)
		}
		// The token is restored: the last applied goes through, and the lane
		// idles.
		refuse.Store(false)
		clock.fireAll()
		if third := next(); len(third.Up.Tables) != 0 || len(third.Up.Rejected) != 0 || third.Up.LastApplied != 1 {
			t.Fatalf("third message = %v; want only the last applied", third.Up)
		}
		if w := <-clock.waits; w != time.Hour {
			t.Fatalf("after a message went through the lane waited %v; want its idle hour", w)
		}
		stop()
		<-stopped
		// Another build sends both again.
		s.Build = "v2"
		r2, err := New(ctx, db, shopCodecs(t), Me(register), uplink, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r2.sendOnce(ctx, r2.lane("main")); err != nil {
			t.Fatal(err)
		}
		if m := next(); tableOf(m.Up, "receipts") == nil || len(m.Up.Rejected) != 1 {
			t.Fatalf("the new build sent %v; want the receipt and the report again", m.Up)
		}
	})
}

// Reports of rows the replica could not take go in the main lane, numbered
// by its sequence; another lane's numbers are its own.
func TestAnotherLanesRefusalLeavesMainsReportsAlone(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Lanes = []Lane{{Name: "telemetry", Tables: []string{"positions"}}}
		s.Build = "v1"
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(product(2, -5)))); err != nil {
			t.Fatal(err)
		}
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		if m := up.took(t).msg; len(m.Up.Rejected) != 1 || m.Sequence != 1 {
			t.Fatalf("main's first message = seq %d, %v; want seq 1 with the report", m.Sequence, m.Up.Rejected)
		}
		up.fail = func(_ context.Context, lane string) error {
			if lane == "telemetry" {
				return TransportError(false, errors.New("413: too large"))
			}
			return nil
		}
		mustExec(t, r.db, "INSERT INTO positions VALUES (?, 1, 1.5, ?)", register, t0)
		if _, err := r.sendOnce(ctx, r.lane("telemetry")); err == nil {
			t.Fatal("telemetry's message was not refused")
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_rejected WHERE reported_seq = 1 AND held IS NULL"); n != 1 {
			t.Fatal("telemetry's refusal of its message 1 undid or set aside main's report of its message 1")
		}
		up.fail = nil
		if _, err := r.sendOnce(ctx, r.lane("main")); err != nil {
			t.Fatal(err)
		}
		if len(up.got) != 0 {
			t.Fatalf("main reported again at once: %v", (<-up.got).msg.Up)
		}
	})
}

// heldCall is one call of a heldUplink.
type heldCall struct {
	msg  *syncpb.ToServer
	body []byte
	// answer takes what the call returns, once the test lets it go.
	answer chan error
}

// heldUplink hands every call to the test, which says when it returns and
// what, whatever its context says: an uplink that ignores its context. It
// counts the calls a lane had out at once.
type heldUplink struct {
	calls chan *heldCall
	mu    sync.Mutex
	out   map[string]int
	most  int
}

func newHeldUplink() *heldUplink {
	return &heldUplink{calls: make(chan *heldCall, 100), out: map[string]int{}}
}

func (u *heldUplink) Send(_ context.Context, _ uuid.UUID, lane string, body []byte) error {
	u.mu.Lock()
	u.out[lane]++
	u.most = max(u.most, u.out[lane])
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.out[lane]--
		u.mu.Unlock()
	}()
	m, err := wire.DecodeToServer(body)
	if err != nil {
		return TransportError(false, err)
	}
	c := &heldCall{msg: m, body: slices.Clone(body), answer: make(chan error, 1)}
	u.calls <- c
	return <-c.answer
}

// mostOut is the most calls one lane had out at once.
func (u *heldUplink) mostOut() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.most
}

// next waits for the next call, firing the fake clock's timers (a lane's
// backoff) meanwhile.
func (u *heldUplink) next(t testing.TB, clock *fakeClock) *heldCall {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case c := <-u.calls:
			return c
		case <-clock.waits:
			clock.fireAll()
		case <-deadline:
			t.Fatal("no call within 10 s")
			return nil
		}
	}
}

// The review's case: message N deletes a row, the host writes the row
// again, and N's call hangs past SendTimeout; N reaches the server late.
// Had the lane sent the new row in a message N+1 while N could still
// arrive, N would delete it on the server for good. It sends N again, the
// same bytes — a repeat to the server — and N+1 only once N was taken.
func TestMessageNotTakenInTimeGoesAgainAsItWasBeforeAnyLaterOne(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Idle = time.Hour
		s.SendTimeout = 50 * time.Millisecond // real time: the calls are held by the test, not by sleeps
		clock := newFakeClock()
		s.Clock = clock
		up := newHeldUplink()
		r, err := New(context.Background(), shopDB(t, d), shopCodecs(t), Me(register), up, s)
		if err != nil {
			t.Fatal(err)
		}
		id := uuid.New()
		key := keyOf(t, r.codecs, Receipt{RegisterID: register, ID: id})
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, id, t0)
		mustExec(t, r.db, "DELETE FROM receipts WHERE id = ?", id)
		runReplica(t, r)

		first := up.next(t, clock)
		if ch := tableOf(first.msg.Up, "receipts"); ch == nil || len(ch.Deletes) != 1 || magicsync.Key(ch.Deletes[0]) != key {
			t.Fatalf("message %d = %v; want the delete of the receipt", first.msg.Sequence, first.msg.Up)
		}
		// Written again while the delete hangs: it waits for a later message.
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 300, NULL, ?)", register, id, t0.Add(time.Hour))
		r.Nudge()
		// The lane gives the call up after SendTimeout and backs off (the
		// fake clock's timer, fired by next); then the call delivers after
		// all — the server files the delete — and says its context ended.
		waitFor(t, clock, "the lane's backoff after giving the call up")
		first.answer <- context.DeadlineExceeded

		again := up.next(t, clock)
		if again.msg.Sequence != first.msg.Sequence || !bytes.Equal(again.body, first.body) {
			t.Fatalf("after the late call the lane sent message %d (%d bytes, same: %v); want message %d again, the same bytes",
				again.msg.Sequence, len(again.body), bytes.Equal(again.body, first.body), first.msg.Sequence)
		}
		again.answer <- nil // the server takes it for a repeat

		later := up.next(t, clock)
		later.answer <- nil
		got := upRows[Receipt](t, r.codecs, later.msg.Up)
		if later.msg.Sequence != first.msg.Sequence+1 || len(got) != 1 || got[0].TotalCents != 300 {
			t.Fatalf("then message %d carried %+v; want message %d with the receipt written again", later.msg.Sequence, got, first.msg.Sequence+1)
		}
		if n := up.mostOut(); n != 1 {
			t.Fatalf("the lane had %d calls out at once; want 1", n)
		}
		// Until the server confirms the later message, the receipt is kept.
		if n := count(t, r.db, "SELECT count(*) FROM sync_pending WHERE sent_seq = ?", later.msg.Sequence); n != 1 {
			t.Fatalf("%d rows recorded as sent in message %d; want the receipt", n, later.msg.Sequence)
		}
	})
}

// waitFor waits for a timer of the fake clock other than the lanes' idle
// hour, and fires it.
func waitFor(t testing.TB, clock *fakeClock, what string) {
	t.Helper()
	for {
		select {
		case w := <-clock.waits:
			if w == time.Hour {
				continue
			}
			clock.fireAll()
			return
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

// A call that ignores its context is given up on after SendTimeout; the
// lane starts no other before it returned, however long it hangs, so no
// more than one is ever left behind. Run returns all the same, and the
// lane's next Run waits for that call: taken at last, its message is not
// sent again, and the rows written meanwhile go in the next one.
func TestLaneLeavesAtMostOneCallBehindAndRunDoesNotWaitForIt(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Idle = time.Hour
		s.SendTimeout = 50 * time.Millisecond
		clock := newFakeClock()
		s.Clock = clock
		up := newHeldUplink()
		r, err := New(context.Background(), shopDB(t, d), shopCodecs(t), Me(register), up, s)
		if err != nil {
			t.Fatal(err)
		}
		waiting := make(chan struct{}, 10)
		r.lane("main").send.waiting = func() { waiting <- struct{}{} }
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		run := func() (stop func()) {
			ctx, cancel := context.WithCancel(context.Background())
			stopped := make(chan struct{})
			go func() { defer close(stopped); _ = r.Run(ctx) }()
			return func() {
				t.Helper()
				cancel()
				select {
				case <-stopped:
				case <-time.After(10 * time.Second):
					t.Fatal("Run did not return while a call given up on was out")
				}
			}
		}
		// waitsForTheCall lets timeouts and backoffs go by until the lane
		// waits for its call given up on; a call started meanwhile fails.
		waitsForTheCall := func() {
			t.Helper()
			deadline := time.After(10 * time.Second)
			for {
				select {
				case <-waiting:
					return
				case c := <-up.calls:
					t.Fatalf("the lane sent message %d with a call given up on still out", c.msg.Sequence)
				case <-clock.waits:
					clock.fireAll()
				case <-deadline:
					t.Fatal("the lane never waited for its call given up on")
				}
			}
		}

		stop := run()
		first := up.next(t, clock)
		// More to send while the call hangs; it waits.
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 200, NULL, ?)", register, uuid.New(), t0)
		r.Nudge()
		waitsForTheCall()
		stop() // with the call still out: Run does not wait for it
		if n := count(t, r.db, "SELECT count(*) FROM sync_pending WHERE sent_seq = ?", first.msg.Sequence); n != 1 {
			t.Fatalf("%d rows recorded as sent in message %d, whose call may still deliver it; want the first receipt", n, first.msg.Sequence)
		}

		stop = run()
		defer stop()
		waitsForTheCall()
		first.answer <- nil // taken, late
		next := up.next(t, clock)
		next.answer <- nil
		got := upRows[Receipt](t, r.codecs, next.msg.Up)
		if next.msg.Sequence != first.msg.Sequence+1 || len(got) != 1 || got[0].TotalCents != 200 {
			t.Fatalf("after the late call took message %d, message %d carried %+v; want message %d with the second receipt only",
				first.msg.Sequence, next.msg.Sequence, got, first.msg.Sequence+1)
		}
		if n := up.mostOut(); n != 1 {
			t.Fatalf("the lane had %d calls out at once; want 1", n)
		}
	})
}

// A message taken only at a later try counts as sent from then: its rows
// wait ResendAfter from then for their confirmation, rather than going
// again at once in the next message because the tries took longer.
func TestMessageTakenAtALaterTryWaitsForItsConfirmationFromThen(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.ResendAfter = time.Minute
		clock := newFakeClock()
		s.Clock = clock
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(product(2, -5)))); err != nil {
			t.Fatal(err)
		}
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		main := r.lane("main")
		up.fail = func(context.Context, string) error { return TransportError(true, errors.New("503")) }
		if _, err := r.sendOnce(ctx, main); err == nil {
			t.Fatal("the first try went through")
		}
		// The outage outlasts ResendAfter; then the message is taken.
		clock.advance(2 * time.Minute)
		up.fail = nil
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		m := up.took(t).msg
		if tableOf(m.Up, "receipts") == nil || len(m.Up.Rejected) != 1 {
			t.Fatalf("the message taken = %v; want the receipt and the report", m.Up)
		}
		clock.advance(30 * time.Second)
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		if len(up.got) != 0 {
			m := (<-up.got).msg
			t.Fatalf("message %d, with %d tables and %d reports, went within ResendAfter of the message being taken", m.Sequence, len(m.Up.Tables), len(m.Up.Rejected))
		}
		// Unconfirmed for ResendAfter from then, they go again.
		clock.advance(time.Minute)
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		if m := up.took(t).msg; tableOf(m.Up, "receipts") == nil || len(m.Up.Rejected) != 1 {
			t.Fatalf("after ResendAfter the message = %v; want the receipt and the report again", m.Up)
		}
	})
}

// A message the uplink did not take goes again as it is, but until it is
// taken its rows count as unsent, not as waiting for the server.
func TestRowsOfAMessageNotTakenCountAsUnsent(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		r, up := newShopReplica(t, d, quietSettings())
		ctx := context.Background()
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		main := r.lane("main")
		up.fail = func(context.Context, string) error { return TransportError(true, errors.New("503")) }
		if _, err := r.sendOnce(ctx, main); err == nil {
			t.Fatal("the uplink took the message")
		}
		lanes := func() (unsent, unconfirmed int) {
			t.Helper()
			st, err := r.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return st.Lanes[0].Unsent, st.Lanes[0].Unconfirmed
		}
		if u, c := lanes(); u != 1 || c != 0 {
			t.Fatalf("with the message not taken: %d unsent, %d unconfirmed; want 1 and 0", u, c)
		}
		up.fail = nil
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		if u, c := lanes(); u != 0 || c != 1 {
			t.Fatalf("with the message taken: %d unsent, %d unconfirmed; want 0 and 1", u, c)
		}
	})
}

// unsentOf is the count of table a message reports as left to send.
func unsentOf(up *syncpb.Up, table string) uint64 {
	for _, c := range up.Unsent {
		if c.Table == table {
			return c.Rows
		}
	}
	return math.MaxUint64
}

func TestUnsentCountsTheRowsLeftToSendAfterTheMessage(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.MaxRows = 2
		s.ResendAfter = time.Minute
		clock := newFakeClock()
		s.Clock = clock
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		main := r.lane("main")
		// Keys in the order messages take them.
		receipt := func(n int) uuid.UUID { return uuid.MustParse(fmt.Sprintf("00000000-0000-4000-8000-%012d", n)) }
		for n := 1; n <= 3; n++ {
			mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, receipt(n), t0)
		}
		send := func(wantRows int, wantUnsent uint64) {
			t.Helper()
			if _, err := r.sendOnce(ctx, main); err != nil {
				t.Fatal(err)
			}
			m := up.took(t).msg
			if got := len(upRows[Receipt](t, r.codecs, m.Up)); got != wantRows || unsentOf(m.Up, "receipts") != wantUnsent {
				t.Fatalf("message %d carries %d receipts and reports %d unsent; want %d and %d", m.Sequence, got, unsentOf(m.Up, "receipts"), wantRows, wantUnsent)
			}
		}
		send(2, 1)
		send(1, 0) // all sent, none confirmed: nothing left to send
		// Unconfirmed for too long, the three go again, by key, ahead of two
		// new ones: a message taking rows sent before reports the new ones
		// all the same.
		clock.advance(2 * time.Minute)
		for n := 4; n <= 5; n++ {
			mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, receipt(n), t0)
		}
		send(2, 2) // 1 and 2
		send(2, 1) // 3 and 4
		send(1, 0) // 5
		// The server files them: the 0 it shows stands, and the replica has
		// nothing more to say for it.
		b := builder{t, r.codecs}
		for seq := uint64(3); seq <= 5; seq++ {
			if _, err := r.Endpoint().Receive(ctx, b.filed(seq, "main", seq)); err != nil {
				t.Fatal(err)
			}
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_pending"); n != 0 {
			t.Fatalf("%d rows wait after every message was filed", n)
		}
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		if len(up.got) != 0 {
			t.Fatalf("a message went up after the confirmations: %v", (<-up.got).msg.Up)
		}
	})
}

func TestFiledWithRefusedRowsMovesThemToTheBacklog(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Build = "v1"
		clock := newFakeClock()
		s.Clock = clock
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		b := builder{t, r.codecs}
		kept, refused := uuid.New(), uuid.New()
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, kept, t0)
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 200, NULL, ?)", register, refused, t0)
		main := r.lane("main")
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		m := up.took(t).msg
		refusedKey := keyOf(t, r.codecs, Receipt{RegisterID: register, ID: refused})
		if _, err := r.Endpoint().Receive(ctx, b.filed(1, "main", m.Sequence, &syncpb.Rejected{Table: "receipts", Key: []byte(refusedKey), Reason: "a stale version"})); err != nil {
			t.Fatal(err)
		}
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Backlog != 1 || st.Lanes[0].Unsent != 0 || st.Lanes[0].Unconfirmed != 0 {
			t.Fatalf("status = %+v; want the refused receipt in the backlog and the other forgotten", st)
		}
		var reason string
		if err := r.db.QueryRow("SELECT held_reason FROM sync_pending").Scan(&reason); err != nil || !strings.Contains(reason, "a stale version") {
			t.Fatalf("the backlog's reason = %q, %v; want the server's", reason, err)
		}
		// The server hears of the backlog in the lane's next message.
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		if m := up.took(t).msg; m.Up.GetBacklog() != 1 {
			t.Fatalf("the message after the refusal reports a backlog of %d; want 1", m.Up.GetBacklog())
		}
		// Not sent again by this build, even long after.
		clock.advance(time.Hour) // well past ResendAfter
		if _, err := r.sendOnce(ctx, main); err != nil {
			t.Fatal(err)
		}
		for len(up.got) > 0 {
			if m := (<-up.got).msg; tableOf(m.Up, "receipts") != nil {
				t.Fatalf("the refused receipt went up again: %v", m.Up)
			}
		}
	})
}

// Every lane numbers its messages from 1: a Filed names its lane.
func TestFiledOfAnotherLaneWithTheSameSequenceForgetsNothingOfThisLane(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		s := quietSettings()
		s.Lanes = []Lane{{Name: "telemetry", Tables: []string{"positions"}}}
		r, up := newShopReplica(t, d, s)
		ctx := context.Background()
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(product(2, -5)))); err != nil {
			t.Fatal(err)
		}
		mustExec(t, r.db, "INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", register, uuid.New(), t0)
		mustExec(t, r.db, "INSERT INTO positions VALUES (?, 1, 1.5, ?)", register, t0)
		for _, l := range []string{"main", "telemetry"} {
			if _, err := r.sendOnce(ctx, r.lane(l)); err != nil {
				t.Fatal(err)
			}
			if m := up.took(t); m.msg.Sequence != 1 {
				t.Fatalf("lane %s's first message is %d", l, m.msg.Sequence)
			}
		}
		if _, err := r.Endpoint().Receive(ctx, b.filed(2, "telemetry", 1)); err != nil {
			t.Fatal(err)
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_pending WHERE tbl = 'receipts' AND sent_seq = 1"); n != 1 {
			t.Fatal("telemetry's Filed 1 forgot main's receipt of its message 1")
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_rejected WHERE filed = 0 AND reported_seq = 1"); n != 1 {
			t.Fatal("telemetry's Filed 1 confirmed main's report of its message 1")
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_pending WHERE tbl = 'positions'"); n != 0 {
			t.Fatal("telemetry's Filed did not forget its position")
		}
		if _, err := r.Endpoint().Receive(ctx, b.filed(3, "main", 1)); err != nil {
			t.Fatal(err)
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_pending"); n != 0 {
			t.Fatalf("%d rows wait after both lanes' Filed", n)
		}
		if n := count(t, r.db, "SELECT count(*) FROM sync_rejected WHERE filed = 1"); n != 1 {
			t.Fatal("main's Filed did not confirm its report")
		}
	})
}
