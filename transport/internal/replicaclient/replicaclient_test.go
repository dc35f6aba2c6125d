package replicaclient

import (
	"strconv"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/replica"
)

func TestRetryable(t *testing.T) {
	for code, want := range map[int]bool{500: true, 503: true, 599: true, 408: true, 429: true, 400: false, 401: false, 403: false, 404: false, 409: false, 413: false, 499: false, 302: true} {
		if Retryable(code) != want {
			t.Errorf("Retryable(%d) = %v; want %v", code, !want, want)
		}
	}
}

// None of the head office's answers sets the rows aside: each says what
// the replica waits for.
func TestRefusal(t *testing.T) {
	older := strconv.FormatUint(uint64(wire.Protocol-1), 10)
	same := strconv.FormatUint(uint64(wire.Protocol), 10)
	for _, c := range []struct {
		code     int
		protocol string
		want     replica.Refusal
	}{
		{503, "", replica.Unreachable},
		{500, older, replica.Unreachable},
		{429, "", replica.Unreachable},
		{408, "", replica.Unreachable},
		{413, "", replica.TooLarge},
		{413, older, replica.TooLarge},
		{400, older, replica.OlderServer},
		{400, same, replica.Misconfigured},
		{400, "x", replica.Misconfigured},
		{400, "", replica.Misconfigured},
		{401, "", replica.Misconfigured},
		{403, "", replica.Misconfigured},
		{404, "", replica.Misconfigured},
	} {
		if got := Refusal(c.code, c.protocol); got != c.want {
			t.Errorf("Refusal(%d, %q) = %v; want %v", c.code, c.protocol, got, c.want)
		}
	}
}

func TestBackoffGrowsJitteredAndCapped(t *testing.T) {
	lo, hi := 100*time.Millisecond, time.Second
	for n, ceil := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 100: time.Second} {
		for range 50 {
			if d := Backoff(n, lo, hi); d < ceil/2 || d > ceil {
				t.Fatalf("Backoff(%d) = %v; want within [%v, %v]", n, d, ceil/2, ceil)
			}
		}
	}
}
