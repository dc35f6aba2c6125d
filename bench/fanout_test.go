package main

import (
	"testing"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
)

// TestOnlyDistinctRowsCarryingTheNewValueCount checks benchmark 4's count
// of what a replica was sent: a row sent twice counts once, and a row
// without its new value (what a provisioning left half done would send)
// not at all, though both count among the rows the messages brought.
func TestOnlyDistinctRowsCarryingTheNewValueCount(t *testing.T) {
	t.Parallel()
	codecs, err := magicsync.NewCodecs(Item{})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := codec.TableOf[Item](codecs)
	if err != nil {
		t.Fatal(err)
	}
	rows := items(3, 4)
	nv := newValues{tc: tc, price: map[string]int64{}}
	for i := range rows {
		k, err := tc.KeyOf(&rows[i])
		if err != nil {
			t.Fatal(err)
		}
		nv.price[string(k)] = rows[i].Price + 1
	}
	changed := rows[0]
	changed.Price++
	// Row 0 with its new value, twice; row 1 with its old value.
	seen := map[string]bool{}
	for id, sent := range [][]Item{{changed, rows[1]}, {changed}} {
		body, err := itemMessage(codecs, uint64(id+1), sent)
		if err != nil {
			t.Fatal(err)
		}
		n, err := nv.count(body, seen)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(sent) {
			t.Errorf("message %d: %d rows counted, want %d", id+1, n, len(sent))
		}
	}
	if len(seen) != 1 {
		t.Errorf("%d rows counted as carrying their new value, want 1: %v", len(seen), seen)
	}
}
