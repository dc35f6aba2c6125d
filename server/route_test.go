package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

func TestRowsReachTheRightReplicas(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r1, r2, r3 := sh.register(sh.shopA), sh.register(sh.shopA), sh.register(sh.shopB)
	pA1 := sh.product(sh.shopA, "apple", 100)
	pA2 := sh.product(sh.shopA, "avocado", 200)
	pB1 := sh.product(sh.shopB, "banana", 50)
	sh.exec(`INSERT INTO shop.currencies (code, rate) VALUES ('EUR', 1), ('USD', 1.1)`)
	sh.exec(`INSERT INTO shop.tasks (id, register_id, what) VALUES (gen_random_uuid(), $1, 'count r1'), (gen_random_uuid(), $2, 'count r3')`, r1.id, r3.id)
	sh.pass()
	for _, r := range []*fake{r1, r2, r3} {
		r.sync()
		r.expect("currencies", "EUR", "USD")
	}
	r1.expect("products", "apple", "avocado")
	r2.expect("products", "apple", "avocado")
	r3.expect("products", "banana")
	r1.expect("tasks", "count r1")
	r2.expect("tasks")
	r3.expect("tasks", "count r3")

	// An update reaches the group only.
	sh.exec(`UPDATE shop.products SET price_cents = 110, name = 'apple!' WHERE id = $1`, pA1)
	sh.pass()
	if n := r3.sync(); n != 0 {
		t.Errorf("r3 got %d messages for a product of another shop", n)
	}
	r1.sync()
	r2.sync()
	r1.expect("products", "apple!", "avocado")
	r2.expect("products", "apple!", "avocado")

	// A delete propagates.
	sh.exec(`DELETE FROM shop.products WHERE id = $1`, pA2)
	sh.pass()
	r1.sync()
	r2.sync()
	r1.expect("products", "apple!")
	r2.expect("products", "apple!")

	// An assigned row moves from r1 to r2.
	sh.exec(`UPDATE shop.tasks SET register_id = $1 WHERE register_id = $2`, r2.id, r1.id)
	sh.pass()
	r1.sync()
	r2.sync()
	r1.expect("tasks")
	r2.expect("tasks", "count r1")
	r3.expect("tasks", "count r3")

	// A product moves from shop B to shop A.
	sh.exec(`UPDATE shop.products SET shop_id = $1 WHERE id = $2`, sh.shopA, pB1)
	sh.pass()
	for _, r := range []*fake{r1, r2, r3} {
		r.sync()
	}
	r1.expect("products", "apple!", "banana")
	r2.expect("products", "apple!", "banana")
	r3.expect("products")

	// A broadcast change reaches everyone; an unchanged rewrite no one.
	sh.exec(`UPDATE shop.currencies SET rate = 1.2 WHERE code = 'USD'`)
	sh.exec(`UPDATE shop.products SET name = name`)
	sh.pass()
	for _, r := range []*fake{r1, r2, r3} {
		before := len(r.msgs)
		r.sync()
		got := r.msgs[before:]
		if len(got) != 1 {
			t.Fatalf("replica got %d messages, want 1", len(got))
		}
		d := got[0].GetDown()
		if len(d.Tables) != 1 || d.Tables[0].Table != "currencies" || len(d.Tables[0].Upserts) != 1 {
			t.Errorf("replica got %v, want the USD rate only", d)
		}
	}
	// Every replica's digests agree with the server's.
	for _, r := range []*fake{r1, r2, r3} {
		if err := r.send(&syncpb.Up{LastApplied: r.applied, Digests: []*syncpb.Digest{r.digest("products"), r.digest("currencies"), r.digest("tasks")}}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := sh.s.Status(sh.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Provisioning {
			t.Errorf("replica %s is provisioning again: %s", s.ID, s.ProvisionReason)
		}
	}
}

// Next, with nothing to send, waits until a pass appends to its groups'
// logs, and returns then: not before the write commits, and long before
// its own deadline.
func TestNextWaitsAndWakes(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	const wait = 10 * time.Second
	type result struct {
		names []string
		err   error
		at    time.Time
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(sh.ctx, wait)
		defer cancel()
		msg, ok, err := sh.s.Endpoint().Next(ctx, r.id, server.Applied{})
		res := result{err: err, at: time.Now()}
		if err == nil && !ok {
			res.err = errors.New("Next returned at its deadline without a message")
		}
		if res.err == nil {
			m, err := wire.DecodeToReplica(msg.Body)
			res.err = err
			for _, tc := range m.GetDown().GetTables() {
				for _, u := range tc.Upserts {
					vals, err := wire.DecodeTuple(u, nil)
					if err != nil {
						res.err = err
					} else {
						res.names = append(res.names, vals[2].S)
					}
				}
			}
		}
		done <- res
	}()
	// Once Next waits (it found nothing and follows its groups), and only
	// then, write.
	for !sh.s.WaitingForChanges(r.id) {
		select {
		case res := <-done:
			t.Fatalf("Next returned with nothing written: %v %v", res.names, res.err)
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case res := <-done:
		t.Fatalf("Next returned with nothing written: %v %v", res.names, res.err)
	default:
	}
	start := time.Now()
	sh.product(sh.shopA, "apple", 1)
	committed := time.Now()
	sh.pass()
	var res result
	select {
	case res = <-done:
	case <-time.After(wait + 5*time.Second):
		t.Fatal("Next did not return")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	if !equal(res.names, []string{"apple"}) {
		t.Errorf("Next woke with %v, want the new apple", res.names)
	}
	if res.at.Before(committed) {
		t.Errorf("Next returned %v before the write committed", committed.Sub(res.at))
	}
	if d := res.at.Sub(start); d > wait/2 {
		t.Errorf("Next woke %v after the write, near its %v deadline: it did not wake on the pass", d, wait)
	}
}
