package server_test

import (
	"fmt"
	"testing"
)

// A pass whose followers are more than its batch takes still has every
// follower arrive after the row it follows and leave before it, through
// a chain (codes follow pictures, which follow items), in messages cut
// small: with a batch of 3 keys a table, 6 items with 2 pictures each and
// a code per picture move from one shop to the other, and back. (Before,
// the followers beyond the batch were planned by the next pass, after
// their items had left: a register applying the messages in order held
// pictures and codes without the row they point at.)
func TestFollowersBeyondOnePassesBatchKeepTheirOrder(t *testing.T) {
	t.Parallel()
	opts := shopOptions
	opts.MaxMessageBytes = 200 // a row or two per message
	sh := routesShopWith(t, opts)
	sh.s.SetPassBatch(3)
	a, b := sh.register(sh.shopA), sh.register(sh.shopB)
	var codes []string
	for i := range 6 {
		item := sh.item(sh.shopA, fmt.Sprintf("item %d", i))
		for j := range 2 {
			pic := sh.picture(item, fmt.Sprintf("picture %d.%d", i, j))
			code := fmt.Sprintf("C%d.%d", i, j)
			sh.exec(`INSERT INTO shop.codes VALUES ($1, $2)`, code, pic)
			codes = append(codes, code)
		}
	}
	sh.pass()
	syncAll(a, b)
	checkFollowerOrder(t, a)
	a.expectHeld("codes", codes...)
	for _, move := range []struct{ to, from *fake }{{b, a}, {a, b}} {
		to := sh.shopB
		if move.to == a {
			to = sh.shopA
		}
		sh.exec(`UPDATE shop.items SET shop_id = $1`, to)
		sh.pass()
		syncAll(a, b)
		checkFollowerOrder(t, a)
		checkFollowerOrder(t, b)
		move.from.expectHeld("items")
		move.from.expectHeld("codes")
		move.to.expectHeld("codes", codes...)
	}
}
