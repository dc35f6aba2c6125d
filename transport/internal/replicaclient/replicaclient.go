// Package replicaclient holds the rules the replica's client keeps
// whatever its transport: which of the head office's answers are worth
// asking again and why an upload was refused (Retryable, Refusal), how
// long to back off (Backoff), and the receive loop (Loop) — where the
// replica stands, a message issued again under an id it applied, a
// message that does not decode. Package httpsync and package natssync
// each keep their wire — requests and status lines, subjects and headers
// — and hand these rules what came over it, so that the two transports
// cannot come to judge the same answer differently.
//
// The head office answers over either transport with an HTTP status code
// (over NATS, in the Sync-Status header), and the rules judge those codes.
// The package links nothing of the head office.
package replicaclient

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/replica"
)

// Retryable reports whether a request answered with status code may
// succeed if made again: true for 5xx, 408 and 429, false for every other
// 4xx. An unexpected code outside 400-499 (a 3xx a client did not follow)
// counts as retryable, so that nothing is given up on for a proxy's
// misconfiguration.
func Retryable(code int) bool {
	if code == http.StatusRequestTimeout || code == http.StatusTooManyRequests {
		return true
	}
	return code < 400 || code > 499
}

// Refusal says why the head office did not take an upward message, from
// the status code it answered and the protocol its answer names (the
// Sync-Protocol header; empty when it names none). None of its answers
// judges the rows themselves — it does that in Filed — so none sets them
// aside: a retryable answer is the head office out of reach for now; 413
// asks for smaller messages; a refusal naming an older protocol waits for
// the head office's upgrade; any other 4xx — credentials, the replica
// unknown, a wrong address, a message it cannot read — is for someone to
// mend, and the rows wait for that.
func Refusal(code int, protocol string) replica.Refusal {
	switch {
	case Retryable(code):
		return replica.Unreachable
	case code == http.StatusRequestEntityTooLarge:
		return replica.TooLarge
	case olderProtocol(protocol):
		return replica.OlderServer
	}
	return replica.Misconfigured
}

// olderProtocol reports whether v, a Sync-Protocol header's value, names
// a protocol older than this build's.
func olderProtocol(v string) bool {
	if v == "" {
		return false
	}
	p, err := strconv.ParseUint(v, 10, 32)
	return err == nil && uint32(p) < wire.Protocol
}

// Backoff is the jittered wait after the n-th failure in a row: between
// half and all of lo·2ⁿ⁻¹, capped at hi. Jitter keeps a fleet of replicas
// that lost the head office together from coming back together.
func Backoff(n int, lo, hi time.Duration) time.Duration {
	d := hi
	if n-1 < 32 {
		if e := lo << max(n-1, 0); e > 0 && e < hi {
			d = e
		}
	}
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d, or returns false when ctx ends first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
