package server

import "testing"

// A transaction whose changes the slot sent is waited for while a
// snapshot lists it running, and only then: by the low 32 bits of the
// 64-bit ids a snapshot shows, which are what pgoutput sends.
func TestAnyRunningReadsTheSnapshotsRunningTransactions(t *testing.T) {
	t.Parallel()
	const epoch1 = uint64(1) << 32
	for _, c := range []struct {
		snap string
		xids []uint32
		want bool
	}{
		{"100:105:", []uint32{101}, false},
		{"100:105:100,103", []uint32{101}, false},
		{"100:105:100,103", []uint32{103}, true},
		{"100:105:100,103", []uint32{99, 100}, true},
		// At or above xmax: it ended after the last the snapshot saw end.
		{"100:105:", []uint32{105}, true},
		{"100:105:", []uint32{107}, true},
		// Ids of the next epoch, sent as their low 32 bits.
		{"4294967396:4294967400:4294967397", []uint32{uint32((epoch1 + 101) & 0xffffffff)}, true},
		{"4294967396:4294967400:4294967397", []uint32{102}, false},
		// Across the wrap of the low 32 bits.
		{"4294967290:4294967300:4294967290", []uint32{4294967290}, true},
		{"4294967290:4294967300:4294967290", []uint32{4294967295}, false},
		{"4294967290:4294967300:4294967290", []uint32{3}, false},
		{"4294967290:4294967300:4294967290", []uint32{4}, true},
		{"malformed", []uint32{1}, false},
	} {
		if got := anyRunning(c.snap, c.xids); got != c.want {
			t.Errorf("anyRunning(%q, %v) = %v, want %v", c.snap, c.xids, got, c.want)
		}
	}
}
