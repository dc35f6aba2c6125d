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
		writing, quiet := watchEvery(poll, 0)
		if got := watchInterval(writing, quiet, tc.last, tc.sinceMoved); got != tc.want {
			t.Errorf("%s: after %v, %v since the sequence moved: %v; want %v", tc.name, tc.last, tc.sinceMoved, got, tc.want)
		}
	}
}

// Under a linger, the watch looks every Linger/2 while the host writes,
// since passes come no sooner than Linger apart, and no less often than
// without a linger once it is quiet, unless Linger/2 is longer.
func TestUnderLingerTheWatchLooksEveryHalfLinger(t *testing.T) {
	t.Parallel()
	const poll = 5 * time.Millisecond
	for _, tc := range []struct {
		linger, writing, quiet time.Duration
	}{
		{0, poll, 8 * poll},
		{4 * time.Millisecond, poll, 8 * poll},
		{100 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond},
		{time.Second, 500 * time.Millisecond, 500 * time.Millisecond},
		{30 * time.Millisecond, 15 * time.Millisecond, 8 * poll},
	} {
		writing, quiet := watchEvery(poll, tc.linger)
		if writing != tc.writing || quiet != tc.quiet {
			t.Errorf("under a linger of %v the watch looks every %v writing, %v quiet; want %v, %v", tc.linger, writing, quiet, tc.writing, tc.quiet)
		}
		if got := watchInterval(writing, quiet, quiet, time.Hour); got != tc.quiet {
			t.Errorf("under a linger of %v, quiet long: %v; want %v", tc.linger, got, tc.quiet)
		}
	}
}
