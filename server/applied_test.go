package server_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// engineState is the server's record of a replica and what it queued for
// it, to compare before and after.
func engineState(t *testing.T, sh *shop, id uuid.UUID) string {
	t.Helper()
	var s string
	err := sh.pool.QueryRow(sh.ctx, `SELECT format('next_id=%s acked=%s last_applied=%s last_down=%s provision=%s reason=%L snapshot=%s outbox=%s',
			r.next_id, r.acked, r.last_applied, r.last_down, r.provision_needed, r.provision_reason, r.snapshot,
			(SELECT coalesce(array_agg(o.id ORDER BY o.id)::text, '{}') FROM public.sync_outbox o WHERE o.replica = r.id))
		FROM public.sync_replicas r WHERE r.id = $1`, id).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sold files an upload of one receipt from the replica; its confirmation
// is queued.
func (f *fake) sold(t *testing.T, total int64) {
	t.Helper()
	r := Receipt{RegisterID: f.id, ID: uuid.New(), TotalCents: total, ChangedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if err := f.send(&syncpb.Up{LastApplied: f.applied, Tables: []*syncpb.TableChanges{receiptsUp(t, f.sh, r)}}); err != nil {
		t.Fatal(err)
	}
}

// nextAfter takes one message, telling the server what the replica
// applied last, waiting up to d.
func (f *fake) nextAfter(t *testing.T, applied server.Applied, d time.Duration) (server.Message, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(f.sh.ctx, d)
	defer cancel()
	msg, ok, err := f.sh.s.Endpoint().Next(ctx, f.id, applied)
	if err != nil {
		t.Fatal(err)
	}
	return msg, ok
}

func sumOf(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// An acknowledgement of a message the server never issued — 0, the next
// id, one issued only to another replica, ids beyond int4, beyond any the
// server issues — is refused for good
// and changes nothing: it neither moves the server's ids nor provisions
// the replica. (Before, ids past int4 failed transiently for ever, and the
// others made the server jump its ids and provision the replica.)
func TestAckOfAMessageNeverIssuedIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "apple", 1)
	sh.pass()
	r.sync()
	r.sold(t, 5) // its confirmation queued, not acknowledged
	m, ok := r.next(time.Second)
	if !ok {
		t.Fatal("no confirmation queued")
	}
	// Another replica, issued more messages than r: its newest id is one
	// r was never issued.
	other := sh.register(sh.shopB)
	for i := range int(m.Id) + 3 {
		sh.product(sh.shopB, fmt.Sprintf("b%d", i), 1)
		sh.pass()
		other.sync()
	}
	othersLast := other.applied
	if othersLast <= m.Id {
		t.Fatalf("the other replica got messages up to %d only; the test needs more than %d", othersLast, m.Id)
	}
	before := engineState(t, sh, r.id)
	for _, id := range []uint64{0, m.Id + 1, othersLast, m.Id + 1000, 3_000_000_000, 1 << 62, 1<<62 + 1, math.MaxInt64, math.MaxUint64} {
		err := sh.s.Endpoint().Ack(sh.ctx, r.id, id)
		if !errors.Is(err, server.ErrNotIssued) || !errors.Is(err, server.ErrPermanent) {
			t.Errorf("Ack(%d) = %v; want an error wrapping ErrNotIssued and ErrPermanent", id, err)
		}
		if after := engineState(t, sh, r.id); after != before {
			t.Errorf("Ack(%d) changed the server's record of the replica:\n%s\nwas\n%s", id, after, before)
		}
	}
	// What was issued is acknowledged as ever; again, or an older id,
	// changes nothing.
	for _, id := range []uint64{m.Id, m.Id, m.Id - 1} {
		if err := sh.s.Endpoint().Ack(sh.ctx, r.id, id); err != nil {
			t.Fatalf("Ack(%d) of a message issued = %v", id, err)
		}
	}
	if st := statusOf(t, sh, r.id); st.Provisioning || st.Queued != 0 || st.LastApplied != m.Id {
		t.Fatalf("status %+v; want nothing queued, no provisioning, last applied %d", st, m.Id)
	}
}

// A replica's report of the last message it applied, beyond int4 or just
// below the bound (2^62), is taken — the server was restored from an
// older backup: it provisions the replica and moves its ids past — and
// never fails transiently (a parameter inferred as int4 made it fail for
// ever). One at the bound is refused for good.
func TestLastAppliedBeyondInt4IsTaken(t *testing.T) {
	t.Parallel()
	for _, applied := range []uint64{3_000_000_000, 1<<62 - 1} {
		t.Run(fmt.Sprint(applied), func(t *testing.T) {
			t.Parallel()
			sh := newShop(t, shopOptions)
			r := sh.register(sh.shopA)
			sh.product(sh.shopA, "apple", 1)
			sh.pass()
			r.sync()
			if err := r.send(&syncpb.Up{LastApplied: applied}); err != nil {
				t.Fatalf("Up.LastApplied = %d: %v", applied, err)
			}
			st := statusOf(t, sh, r.id)
			if !st.Provisioning || !strings.Contains(st.ProvisionReason, "issued only up to") || st.LastApplied != applied {
				t.Fatalf("status %+v; want provisioning, the server restored, last applied %d", st, applied)
			}
			if want := fmt.Sprintf("next_id=%d acked=%d", applied+1, applied); !strings.HasPrefix(engineState(t, sh, r.id), want) {
				t.Fatalf("%s; want %s…", engineState(t, sh, r.id), want)
			}
		})
	}
	t.Run("beyond", func(t *testing.T) {
		t.Parallel()
		sh := newShop(t, shopOptions)
		r := sh.register(sh.shopA)
		r.sync()
		before := engineState(t, sh, r.id)
		if err := r.send(&syncpb.Up{LastApplied: 1 << 62}); !errors.Is(err, server.ErrPermanent) {
			t.Fatalf("Up.LastApplied = 2^62: %v; want a refusal for good", err)
		}
		if after := engineState(t, sh, r.id); after != before {
			t.Fatalf("a refused report changed the server's record of the replica:\n%s\nwas\n%s", after, before)
		}
	})
}

// Next takes the replica's word before it hands out anything: the
// last message applied acknowledges every message up to it (a lost
// acknowledgement costs no redelivery), and the same word again, or an
// older one, changes nothing.
func TestNextWithAWordAcknowledgesWhatTheReplicaApplied(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "apple", 1)
	sh.pass()
	r.sync()
	r.sold(t, 1)
	first, ok := r.nextAfter(t, server.Applied{ID: r.applied}, time.Second)
	if !ok {
		t.Fatal("no confirmation queued")
	}
	sh.product(sh.shopA, "pear", 2)
	sh.pass()
	// Applied, its acknowledgement lost: the next poll says so, and the
	// next message comes.
	second, ok := r.nextAfter(t, server.Applied{ID: first.ID, Sum: sumOf(first.Body)}, time.Second)
	if !ok || second.ID <= first.ID {
		t.Fatalf("after message %d applied: %d, %v; want the next message", first.ID, second.ID, ok)
	}
	if _, ok := r.nextAfter(t, server.Applied{ID: second.ID, Sum: sumOf(second.Body)}, 100*time.Millisecond); ok {
		t.Fatal("a message after the last one queued")
	}
	before := engineState(t, sh, r.id)
	for _, a := range []server.Applied{{ID: second.ID}, {ID: second.ID, Sum: sumOf(second.Body)}, {ID: first.ID}, {}} {
		if _, ok := r.nextAfter(t, a, 50*time.Millisecond); ok {
			t.Fatalf("Next(%d) handed out a message", a.ID)
		}
		if after := engineState(t, sh, r.id); after != before {
			t.Fatalf("Next(%d), at or below the last acknowledged, changed the server's record:\n%s\nwas\n%s", a.ID, after, before)
		}
	}
	if st := statusOf(t, sh, r.id); st.Provisioning || st.Queued != 0 || st.LastApplied != second.ID {
		t.Fatalf("status %+v; want nothing queued, no provisioning, last applied %d", st, second.ID)
	}
}

// A replica that says, as it polls, that it applied a message the server
// never issued — the server restored from an older backup — is provisioned
// again before the server hands out anything else: what was queued under
// the older numbering goes, the ids move past, and Status says why.
func TestNextWithAWordAReplicaAheadProvisionsItAgain(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "apple", 1)
	sh.pass()
	r.sync()
	r.sold(t, 1) // a confirmation queued under the older numbering
	ahead := r.applied + 50
	m, ok := r.nextAfter(t, server.Applied{ID: ahead}, time.Second)
	if !ok {
		t.Fatal("no message after the replica said it is ahead")
	}
	st := statusOf(t, sh, r.id)
	if !st.Provisioning || !strings.Contains(st.ProvisionReason, fmt.Sprintf("the replica applied message %d, but the server issued only up to", ahead)) ||
		!strings.Contains(st.ProvisionReason, "restored from an older backup") {
		t.Fatalf("status %+v; want a provisioning saying the server was restored", st)
	}
	if m.ID <= ahead {
		t.Fatalf("message %d handed out after the replica said it applied %d", m.ID, ahead)
	}
	pb, err := wire.DecodeToReplica(m.Body)
	if err != nil {
		t.Fatal(err)
	}
	if pb.GetDown().GetSnapshot() == 0 {
		t.Fatalf("message %d is no part of a provisioning: %v", m.ID, pb)
	}
	r.applied = ahead
	r.apply(pb)
	if err := sh.s.Endpoint().Ack(sh.ctx, r.id, m.ID); err != nil {
		t.Fatal(err)
	}
	r.sync()
	r.expect("products", "apple")
	if st := statusOf(t, sh, r.id); st.Provisioning {
		t.Fatalf("still provisioning: %+v", st)
	}
}

// A server restored from an older backup may issue an id again, for
// another message, before the replica says where it stands (a lane's
// upload confirmed, say). The replica's sum of what it applied under that
// id tells: the server provisions it again, rather than take the word for
// an acknowledgement of the message it holds.
func TestNextWithAWordAnotherMessageUnderTheIdAppliedProvisionsItAgain(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "apple", 1)
	sh.pass()
	r.sync()
	r.sold(t, 1)
	reissued, ok := r.nextAfter(t, server.Applied{ID: r.applied}, time.Second)
	if !ok {
		t.Fatal("no confirmation queued")
	}
	// The replica applied, under that id, the message a server issued
	// before it was restored: other bytes.
	other := append([]byte("before the restore: "), reissued.Body...)
	m, ok := r.nextAfter(t, server.Applied{ID: reissued.ID, Sum: sumOf(other)}, time.Second)
	if !ok {
		t.Fatal("no message after the replica said what it applied")
	}
	st := statusOf(t, sh, r.id)
	if !st.Provisioning || !strings.Contains(st.ProvisionReason, fmt.Sprintf("another message %d than the server issued", reissued.ID)) {
		t.Fatalf("status %+v; want a provisioning saying the server issued the id again", st)
	}
	if m.ID <= reissued.ID {
		t.Fatalf("message %d handed out after the replica said it applied %d", m.ID, reissued.ID)
	}
}

// Next refuses for good an id the server never issued at or beyond
// the bound (2^62), and a sum that is no SHA-256; neither changes
// anything.
func TestNextWithAWordRefusesWhatNoReplicaCanSay(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	r.sync()
	before := engineState(t, sh, r.id)
	for _, a := range []server.Applied{{ID: 1 << 62}, {ID: 1<<62 + 1}, {ID: math.MaxUint64}, {ID: 1, Sum: []byte("short")}} {
		ctx, cancel := context.WithTimeout(sh.ctx, time.Second)
		_, _, err := sh.s.Endpoint().Next(ctx, r.id, a)
		cancel()
		if !errors.Is(err, server.ErrPermanent) {
			t.Errorf("Next(%d, %d-byte sum) = %v; want a refusal for good", a.ID, len(a.Sum), err)
		}
	}
	if after := engineState(t, sh, r.id); after != before {
		t.Fatalf("refused words changed the server's record:\n%s\nwas\n%s", after, before)
	}
}

// The sum of a message the server issued stays comparable after the
// message went (confirmations merged into one under a new id): the
// replica's word of the message it applied under an id is an
// acknowledgement when the sums agree, and the sign of a restored server
// when they do not.
func TestNextWithAWordComparesWithWhatWasIssuedEvenIfItWentSince(t *testing.T) {
	t.Parallel()
	for _, same := range []bool{true, false} {
		t.Run(fmt.Sprintf("same=%v", same), func(t *testing.T) {
			t.Parallel()
			sh := newShop(t, shopOptions)
			r := sh.register(sh.shopA)
			sh.product(sh.shopA, "apple", 1)
			sh.pass()
			r.sync()
			r.sold(t, 1)
			first, ok := r.nextAfter(t, server.Applied{ID: r.applied}, time.Second)
			if !ok {
				t.Fatal("no confirmation queued")
			}
			r.sold(t, 2) // may merge the first confirmation into a new one
			sum := sumOf(first.Body)
			if !same {
				sum = sumOf(append([]byte("before the restore: "), first.Body...))
			}
			m, ok := r.nextAfter(t, server.Applied{ID: first.ID, Sum: sum}, time.Second)
			st := statusOf(t, sh, r.id)
			switch {
			case same && (st.Provisioning || !ok || m.ID <= first.ID):
				t.Fatalf("the replica applied message %d as issued: status %+v, next %d %v; want the next confirmation, no provisioning", first.ID, st, m.ID, ok)
			case !same && !st.Provisioning:
				t.Fatalf("the replica applied another message %d: status %+v; want a provisioning", first.ID, st)
			}
		})
	}
}

// The replica's word of what it applied is compared with what the server
// issued under that id even once that id was acknowledged — by an
// acknowledgement or an Up.LastApplied, which carry no sum, and which a
// server restored from an older backup takes for its own message under
// that id. The same sum changes nothing; another provisions the replica.
func TestNextWithAWordComparesEvenOnceTheIdWasAcknowledged(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"Ack", "Up.LastApplied"} {
		for _, same := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/same=%v", how, same), func(t *testing.T) {
				t.Parallel()
				sh := newShop(t, shopOptions)
				r := sh.register(sh.shopA)
				sh.product(sh.shopA, "apple", 1)
				sh.pass()
				r.sync()
				r.sold(t, 1)
				m, ok := r.nextAfter(t, server.Applied{ID: r.applied}, time.Second)
				if !ok {
					t.Fatal("no confirmation queued")
				}
				switch how {
				case "Ack":
					if err := sh.s.Endpoint().Ack(sh.ctx, r.id, m.ID); err != nil {
						t.Fatal(err)
					}
				default:
					if err := r.send(&syncpb.Up{LastApplied: m.ID}); err != nil {
						t.Fatal(err)
					}
				}
				before := engineState(t, sh, r.id)
				sum := sumOf(m.Body)
				if !same {
					sum = sumOf(append([]byte("before the restore: "), m.Body...))
				}
				_, ok = r.nextAfter(t, server.Applied{ID: m.ID, Sum: sum}, 100*time.Millisecond)
				st := statusOf(t, sh, r.id)
				if same {
					if after := engineState(t, sh, r.id); ok || after != before || st.Provisioning {
						t.Fatalf("the replica's word of message %d as issued changed something: message %v, status %+v,\n%s\nwas\n%s", m.ID, ok, st, after, before)
					}
					return
				}
				if !st.Provisioning || !strings.Contains(st.ProvisionReason, "restored from an older backup") {
					t.Fatalf("the replica applied another message %d: status %+v; want a provisioning", m.ID, st)
				}
			})
		}
	}
}
