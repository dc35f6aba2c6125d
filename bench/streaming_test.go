package main

import (
	"testing"
	"time"
)

// TestStreamChangesAreLookedUpInWhatEachReplicaHeld checks benchmark 10's
// account: a change counts as arrived once the replica held its version or
// a later one of its row, its lag until the first of those; a change no
// version of which arrived is lost, not left out.
func TestStreamChangesAreLookedUpInWhatEachReplicaHeld(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	us := func(ms int) int64 { return t0.Add(time.Duration(ms) * time.Millisecond).UnixMicro() }
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	changes := []change{
		{key: "a", version: us(0)},  // arrives itself at 10 ms
		{key: "a", version: us(5)},  // superseded: arrives as the version of 8 ms, at 30 ms
		{key: "a", version: us(8)},  // arrives at 30 ms
		{key: "b", version: us(1)},  // never arrives
		{key: "c", version: us(20)}, // an older version arrived only: lost
	}
	m := &lagMeter{got: map[string][]arrival{
		"a": {{version: us(0), at: at(10)}, {version: us(8), at: at(30)}},
		"c": {{version: us(2), at: at(25)}},
	}}
	o := outcome(changes, []*lagMeter{m})
	if o.lost != 2 || o.superseded != 1 || len(o.samples) != 3 {
		t.Fatalf("lost %d, superseded %d, %d samples; want 2, 1, 3", o.lost, o.superseded, len(o.samples))
	}
	want := []time.Duration{10 * time.Millisecond, 25 * time.Millisecond, 22 * time.Millisecond}
	for i, s := range o.samples {
		if s.lag != want[i] {
			t.Errorf("sample %d: lag %v, want %v", i, s.lag, want[i])
		}
	}
	last := map[string]int64{"a": us(8), "b": us(1)}
	if n := missing(last, []*lagMeter{m}); n != 1 {
		t.Errorf("missing = %d, want 1 (row b)", n)
	}
}
