package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/magicsync/magicsync/server"
)

// status lists the engine's replication slots, and says how to drop one
// no process reads; a slot read, or none at all, gets no such advice.
func TestStatusSaysHowToDropASlotNoProcessReads(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	writeSlots(&out, []server.SlotStatus{
		{Name: "magicsync_shop_a1", Database: "shop", Active: true, Retained: 1 << 20},
		{Name: "magicsync_old_b2", Database: "old", Retained: 300 << 20},
	})
	text := out.String()
	for _, want := range []string{"magicsync_shop_a1", "1.0", "read", "magicsync_old_b2", "300.0", "not read",
		"SELECT pg_drop_replication_slot('magicsync_old_b2');"} {
		if !strings.Contains(text, want) {
			t.Errorf("the slots' listing does not say %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "pg_drop_replication_slot('magicsync_shop_a1')") {
		t.Errorf("the listing advises dropping a slot a process reads:\n%s", text)
	}
	out.Reset()
	writeSlots(&out, nil)
	if out.Len() != 0 {
		t.Errorf("with no slot, the listing writes %q; want nothing", out.String())
	}
}
