package server

import "testing"

// A part's first page reads snapshotPage rows; the next read about what
// fills the rest of the budget, at the rows' size so far, within bounds.
func TestSnapshotLimitFillsWhatIsLeftOfThePart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name              string
		left, size, taken int
		min, max          int
	}{
		{"the first page", 1 << 20, 0, 0, snapshotPage, snapshotPage},
		{"rows of 100 bytes, 800 KB left", 800_000, 200_000, 2000, 8000, 8700},
		{"a budget nearly spent", 50, 200_000, 2000, 64, 64},
		{"rows of 1 byte", 1 << 30, 2000, 2000, maxSnapshotPage, maxSnapshotPage},
	} {
		if got := snapshotLimit(c.left, c.size, c.taken); got < c.min || got > c.max {
			t.Errorf("%s: %d rows; want %d to %d", c.name, got, c.min, c.max)
		}
	}
}
