package headoffice

import (
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// throttle.go holds the bound on failed authentications per source
// address: a token bucket per address, in a table of bounded size. An
// address that spent its failures has its requests answered 429 before
// their token is checked, so that guessing tokens costs the engine nothing
// and gains nothing; an address that fails nothing is never slowed.

// Defaults of HandlerOptions.MaxAuthFailures and AuthFailureEvery.
const (
	defaultMaxAuthFailures  = 20
	defaultAuthFailureEvery = time.Second
)

// maxThrottled bounds the addresses the throttle keeps (about 100 bytes
// each): past it, the least suspect of a few is forgotten.
const maxThrottled = 16384

// evictSample is how many addresses the throttle looks at to choose the one
// it forgets when full.
const evictSample = 8

// AuthObserver is an Observer that is also told of the requests whose
// authentication failed; metrics.HTTP is one. Its method is called from the
// requests' goroutines, concurrently, and must not block.
type AuthObserver interface {
	// AuthFailed is told of a request refused for its token — missing,
	// wrong, unknown or another replica's (401, 403): throttled false —
	// and of one answered 429 before its token was checked, its address
	// having failed too often: throttled true.
	AuthFailed(throttled bool)
}

// throttle is the failures per source address.
type throttle struct {
	max   float64       // failures an address may have at once
	every time.Duration // how often an address earns one back
	now   func() time.Time

	mu    sync.Mutex
	addrs map[string]*bucket
}

// bucket is one address's failures left: left at at, growing by one every
// throttle.every up to throttle.max.
type bucket struct {
	left float64
	at   time.Time
	// warned: the address's throttling was logged.
	warned bool
}

// newThrottle returns a throttle allowing max failures at once and one
// more every every; nil when max is negative (no bound).
func newThrottle(max int, every time.Duration) *throttle {
	if max < 0 {
		return nil
	}
	if max == 0 {
		max = defaultMaxAuthFailures
	}
	if every <= 0 {
		every = defaultAuthFailureEvery
	}
	return &throttle{max: float64(max), every: every, now: time.Now, addrs: map[string]*bucket{}}
}

// refill brings b up to now, and reports whether it is full again (the
// address is no more suspect than one never seen).
func (t *throttle) refill(b *bucket, now time.Time) bool {
	b.left = min(t.max, b.left+float64(now.Sub(b.at))/float64(t.every))
	b.at = now
	return b.left >= t.max
}

// wait returns how long addr must wait before its next request is
// served: 0 unless it spent its failures. first is set the first time an
// address is found waiting since it last had failures left.
func (t *throttle) wait(addr string) (d time.Duration, first bool) {
	if t == nil {
		return 0, false
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.addrs[addr]
	if b == nil {
		return 0, false
	}
	if t.refill(b, now) {
		delete(t.addrs, addr)
		return 0, false
	}
	if b.left >= 1 {
		b.warned = false
		return 0, false
	}
	first, b.warned = !b.warned, true
	return time.Duration((1 - b.left) * float64(t.every)), first
}

// failed spends one of addr's failures.
func (t *throttle) failed(addr string) {
	if t == nil {
		return
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.addrs[addr]
	if b == nil {
		if len(t.addrs) >= maxThrottled {
			t.evict(now)
		}
		b = &bucket{left: t.max, at: now}
		t.addrs[addr] = b
	}
	t.refill(b, now)
	b.left = max(b.left-1, 0)
}

// evict forgets one address to make room: the one with the most failures
// left among a few (map iteration starts at random), so that an attacker
// with many addresses pushes out its own before anyone's it is throttling
// — and the table stays bounded whatever it sends.
func (t *throttle) evict(now time.Time) {
	var victim string
	most := -1.0
	n := 0
	for addr, b := range t.addrs {
		t.refill(b, now)
		if b.left > most {
			victim, most = addr, b.left
		}
		if n++; n == evictSample {
			break
		}
	}
	delete(t.addrs, victim)
}

// sourceAddress is HandlerOptions.ClientAddress's default: the host of the
// request's RemoteAddr; an IPv6 address by its /64 prefix, which one
// network holds whole.
func sourceAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, err := ip.Prefix(64)
		if err == nil {
			return p.String()
		}
	}
	return ip.String()
}

// throttled answers 429 when the request's address spent its failures,
// and reports whether it did.
func (h *handler) throttled(w http.ResponseWriter, r *http.Request) bool {
	if h.throttle == nil {
		return false
	}
	addr := h.clientAddress(r)
	d, first := h.throttle.wait(addr)
	if d <= 0 {
		return false
	}
	if first {
		h.log.WarnContext(r.Context(), "magicsync/httpsync: too many failed authentications from one address; its requests are answered 429 until it may try again",
			"address", addr, "retryAfter", d.Round(time.Millisecond))
	}
	if ao, ok := h.opts.Observer.(AuthObserver); ok {
		ao.AuthFailed(true)
	}
	w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10))
	writeReason(w, http.StatusTooManyRequests, "too many failed authentications from this address; try again later")
	return true
}

// authFailed notes a request refused for its token.
func (h *handler) authFailed(r *http.Request) {
	if ao, ok := h.opts.Observer.(AuthObserver); ok {
		ao.AuthFailed(false)
	}
	if h.throttle != nil {
		h.throttle.failed(h.clientAddress(r))
	}
}
