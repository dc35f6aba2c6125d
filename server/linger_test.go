package server_test

import (
	"slices"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// Under Linger, the changes planned while a replica's last message of
// changes is younger than Linger go to it together, in one message,
// once the linger is out: without it, the poll woken by the first
// change's pass would carry that change alone.
func TestUnderLingerChangesSoonAfterAMessageGoTogether(t *testing.T) {
	t.Parallel()
	const linger = 5 * time.Second
	sh, f := lingeringShop(t, linger)
	f.expect("products", "tea")
	handed := time.Now()

	next := nextAsync(sh.ctx, sh.s, f.id, 30*time.Second)
	waitUntilWaiting(t, sh.s, f.id, next)
	sh.product(sh.shopA, "coffee", 300)
	sh.pass()
	sh.product(sh.shopA, "cake", 400)
	sh.pass()
	if time.Since(handed) >= linger {
		t.Skipf("the machine took %v to write and plan two products, longer than the linger", time.Since(handed))
	}
	res := <-next
	if res.err != nil || !res.ok {
		t.Fatalf("Next returned %v, %v", res.ok, res.err)
	}
	if got := productNames(t, res.msg); !equal(got, []string{"cake", "coffee"}) {
		t.Errorf("the message after the linger carries products %v, want [cake coffee]", got)
	}
	if waited := res.at.Sub(handed); waited < linger-time.Second {
		t.Errorf("the message came %v after the last, within its linger of %v", waited, linger)
	}
}

// Linger bounds how often changes go, not how long each waits: a change
// after a spell longer than Linger without any goes at once.
func TestUnderLingerAChangeAfterAQuietSpellGoesAtOnce(t *testing.T) {
	t.Parallel()
	const linger = 2 * time.Second
	sh, f := lingeringShop(t, linger)
	// The quiet spell, longer than the linger, is the point of this test.
	time.Sleep(linger + 100*time.Millisecond)

	next := nextAsync(sh.ctx, sh.s, f.id, 30*time.Second)
	waitUntilWaiting(t, sh.s, f.id, next)
	sh.product(sh.shopA, "coffee", 300)
	sh.pass()
	planned := time.Now()
	res := <-next
	if res.err != nil || !res.ok {
		t.Fatalf("Next returned %v, %v", res.ok, res.err)
	}
	if waited := res.at.Sub(planned); waited >= linger/2 {
		t.Errorf("after a quiet spell, the change waited %v after its pass, for its linger (%v)", waited, linger)
	}
	if got := productNames(t, res.msg); !equal(got, []string{"coffee"}) {
		t.Errorf("the message carries products %v, want [coffee]", got)
	}
}

// lingeringShop opens a shop whose server lingers linger, with a register
// provisioned and then handed tea in a message of changes, which starts
// the linger (a provisioning starts none).
func lingeringShop(t *testing.T, linger time.Duration) (*shop, *fake) {
	t.Helper()
	sh := newShop(t, server.Options{Linger: linger, PassEvery: time.Hour})
	f := sh.register(sh.shopA)
	sh.pass()
	f.sync() // its provisioning
	sh.product(sh.shopA, "tea", 250)
	sh.pass()
	if f.sync() != 1 {
		t.Fatal("tea did not come in one message")
	}
	return sh, f
}

// productNames lists, sorted, the names of the products msg upserts.
func productNames(t *testing.T, msg *syncpb.ToReplica) []string {
	t.Helper()
	names := []string{}
	if d, ok := msg.Body.(*syncpb.ToReplica_Down); ok {
		for _, tc := range d.Down.Tables {
			if tc.Table != "products" {
				continue
			}
			for _, u := range tc.Upserts {
				vals, err := wire.DecodeTuple(u, nil)
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, vals[2].S) // a product's name
			}
		}
	}
	slices.Sort(names)
	return names
}

// Run's passes, under Linger, come no sooner than Linger apart: host
// transactions written one after another are planned in a few passes,
// not a pass each.
func TestUnderLingerRunPlansManyTransactionsInOnePass(t *testing.T) {
	t.Parallel()
	const linger = time.Second
	sh := newShop(t, server.Options{Linger: linger, PassEvery: time.Hour})
	f := sh.register(sh.shopA)
	f.sync()
	sh.runServer(t)
	before := sh.s.Stats().Passes
	const writes = 10
	started := time.Now()
	names := make([]string, writes)
	for i := range names {
		names[i] = "product " + string(rune('a'+i))
		sh.product(sh.shopA, names[i], int64(100+i))
		// Paced as a till's sales come, each seen by the watch alone:
		// without a linger, each would have a pass of its own.
		time.Sleep(20 * time.Millisecond)
	}
	wrote := time.Since(started)
	f.await("every product", func() bool { return len(f.names("products")) == writes })
	passes := sh.s.Stats().Passes - before
	// The writes span at most wrote/linger + 1 lingers, and the first
	// pass may come before the first write's commit.
	if most := uint64(wrote/linger) + 2; passes > most {
		t.Errorf("%d transactions written in %v were planned in %d passes under a linger of %v; want at most %d", writes, wrote.Round(time.Millisecond), passes, linger, most)
	}
}

// Linger holds back changes only: the confirmation of an upload, queued
// for a replica within the linger of its last message of changes, goes at
// once.
func TestUnderLingerAConfirmationGoesAtOnce(t *testing.T) {
	t.Parallel()
	const linger = 5 * time.Second
	sh, f := lingeringShop(t, linger)
	handed := time.Now()

	next := nextAsync(sh.ctx, sh.s, f.id, 30*time.Second)
	waitUntilWaiting(t, sh.s, f.id, next)
	f.deliver("main", f.upload("main", 1, f.sale(990)))
	res := <-next
	if res.err != nil || !res.ok {
		t.Fatalf("Next returned %v, %v", res.ok, res.err)
	}
	if _, ok := res.msg.Body.(*syncpb.ToReplica_Filed); !ok {
		t.Fatalf("the replica was sent %T, want the confirmation of its upload", res.msg.Body)
	}
	if waited := res.at.Sub(handed); waited >= linger/2 {
		t.Errorf("the confirmation came %v after the last message of changes: it waited for the linger (%v)", waited, linger)
	}
}
