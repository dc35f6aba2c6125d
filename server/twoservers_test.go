package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// Two Server values on one database, each with its own pool, as two
// processes would be: one plans at a time, both serve Next, Ack and
// Receive, and what one plans wakes the Next waiting on the other.
func TestTwoServersShareOneDatabase(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	ctx := sh.ctx
	pool2, err := pgxpool.NewWithConfig(ctx, sh.pool.Config().Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer pool2.Close()
	s1 := sh.s
	s2, err := server.New(ctx, pool2, sh.codecs, shopOptions)
	if err != nil {
		t.Fatal(err)
	}
	sh2 := *sh
	sh2.s = s2
	touched := func() int {
		t.Helper()
		var n int
		if err := sh.pool.QueryRow(ctx, `SELECT count(*) FROM public.sync_touched`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// One plans at a time: while s1's pass holds the planner's lock, s2's
	// returns at once, planning nothing.
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "apple", 1)
	locked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s1.OnPassLocked(func() {
		once.Do(func() {
			close(locked)
			<-release
		})
	})
	pass1 := async(func() error { return s1.Pass(ctx) })
	<-locked
	select {
	case err := <-async(func() error { return s2.Pass(ctx) }):
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("s2's pass waited for s1's")
	}
	if n := touched(); n == 0 {
		t.Error("s2 planned while s1 held the planner's lock")
	}
	close(release)
	if err := <-pass1; err != nil {
		t.Fatal(err)
	}
	if n := touched(); n != 0 {
		t.Errorf("%d touched keys left after s1's pass", n)
	}

	// Both serve: messages taken from s2 and acknowledged on s1 ...
	for {
		r.sh = &sh2
		m, ok := r.next(150 * time.Millisecond)
		if !ok {
			break
		}
		r.apply(m)
		if err := s1.Endpoint().Ack(ctx, r.id, m.Id); err != nil {
			t.Fatal(err)
		}
	}
	r.expect("products", "apple")
	// ... an upload filed by s2, its Filed taken from s1.
	r.sh = &sh2
	receipt := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: 500, ChangedAt: time.Now()}
	if err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, receipt)}}); err != nil {
		t.Fatal(err)
	}
	r.sh = sh
	settle(t, sh, r)
	if len(r.filed) != 1 || len(r.filed[0].Refused) != 0 {
		t.Fatalf("Filed %v, want one with nothing refused", r.filed)
	}
	if total, ok := sh.total(r.id, receipt.ID); !ok || total != 500 {
		t.Fatalf("the receipt filed through s2: %d %v", total, ok)
	}

	// What s1 plans wakes the Next waiting on s2 (s2 runs, listening, but
	// does not plan: only s1's passes can have woken it).
	listening := make(chan struct{})
	var listenOnce sync.Once
	s2.OnListening(func() { listenOnce.Do(func() { close(listening) }) })
	hold := s2.HoldPlanning()
	runCtx, stop := context.WithCancel(ctx)
	run := async(func() error { return s2.Run(runCtx) })
	defer func() {
		stop()
		hold()
		if err := <-run; err != nil {
			t.Error(err)
		}
	}()
	<-listening
	const wait = 20 * time.Second
	wakes := []struct {
		what   string
		change func()
		check  func(*syncpb.ToReplica)
	}{
		{"a product of its shop", func() { sh.product(sh.shopA, "avocado", 2) }, func(m *syncpb.ToReplica) {
			if d := m.GetDown(); d == nil || d.Snapshot != 0 || len(d.Tables) != 1 || len(d.Tables[0].Upserts) != 1 {
				t.Errorf("woke with %v, want the avocado", m)
			}
		}},
		{"a move to another shop", func() {
			sh.exec(`UPDATE shop.registers SET shop_id = $1 WHERE id = $2`, sh.shopB, r.id)
		}, func(m *syncpb.ToReplica) {
			if m.GetDown().GetSnapshot() == 0 && m.GetEndSnapshot() == nil {
				t.Errorf("woke with %v, want a provisioning", m)
			}
		}},
	}
	for _, w := range wakes {
		next := nextAsync(ctx, s2, r.id, wait)
		waitUntilWaiting(t, s2, r.id, next)
		start := time.Now()
		w.change()
		if err := s1.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		res := <-next
		if res.err != nil || !res.ok {
			t.Fatalf("after %s planned by s1, s2's Next returned %v %v after %v: not woken", w.what, res.ok, res.err, res.at.Sub(start))
		}
		if d := res.at.Sub(start); d > wait/2 {
			t.Errorf("after %s planned by s1, s2's Next returned %v later, near its %v deadline", w.what, d, wait)
		}
		w.check(res.msg)
		r.apply(res.msg)
		if err := s1.Endpoint().Ack(ctx, r.id, res.msg.Id); err != nil {
			t.Fatal(err)
		}
	}
	r.sh = sh
	settle(t, sh, r)
	r.expect("products")
}
