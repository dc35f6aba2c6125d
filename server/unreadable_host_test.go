package server_test

import (
	"slices"
	"testing"
)

// A host row holding a value its declaration cannot hold ('infinity' in a
// time column) is taken as gone: the other rows are planned, a replica
// that held it lets it go, a new replica is provisioned without it, and
// once it is written again with a value that reads, every replica gets
// it. Before, every pass failed on it, and nothing at all was planned any
// more.
func TestAnUnreadableHostRowIsTakenAsGone(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "forever", 1)
	sh.pass()
	r.sync()
	if got := r.names("products"); !slices.Equal(got, []string{"forever"}) {
		t.Fatalf("the register holds %v; want forever", got)
	}
	sh.exec(`UPDATE shop.products SET updated_at = 'infinity' WHERE name = 'forever'`)
	sh.product(sh.shopA, "apple", 2)
	sh.pass()
	r.sync()
	if got := r.names("products"); !slices.Equal(got, []string{"apple"}) {
		t.Fatalf("the register holds %v; want apple alone, the row that does not read let go", got)
	}
	late := sh.register(sh.shopA)
	late.sync()
	if got := late.names("products"); !slices.Equal(got, []string{"apple"}) {
		t.Fatalf("a register provisioned now holds %v; want apple alone", got)
	}
	sh.exec(`UPDATE shop.products SET updated_at = now() WHERE name = 'forever'`)
	sh.pass()
	for _, g := range []*fake{r, late} {
		g.sync()
		if got := g.names("products"); !slices.Equal(got, []string{"apple", "forever"}) {
			t.Errorf("a register holds %v after the row was mended; want apple and forever", got)
		}
	}
}
