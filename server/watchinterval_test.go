package server

import (
	"testing"
	"time"
)

// The watch looks every PollEvery while the host writes, and after a
// quiet second less and less often, down to 8 × PollEvery; a write brings
// it back to PollEvery at once.
func TestWatchLooksLessOftenWhileTheHostIsQuiet(t *testing.T) {
	t.Parallel()
	const poll = 5 * time.Millisecond
	for _, tc := range []struct {
		name             string
		last, sinceMoved time.Duration
		want             time.Duration
	}{
		{"writing", poll, 10 * time.Millisecond, poll},
		{"just quiet", poll, watchQuietAfter, 2 * poll},
		{"quieter", 4 * poll, 3 * time.Second, 8 * poll},
		{"quiet long", 8 * poll, time.Hour, 8 * poll},
		{"written again", 8 * poll, 0, poll},
	} {
		if got := watchInterval(poll, tc.last, tc.sinceMoved); got != tc.want {
			t.Errorf("%s: after %v, %v since the sequence moved: %v; want %v", tc.name, tc.last, tc.sinceMoved, got, tc.want)
		}
	}
}
