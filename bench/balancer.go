package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/codec"
)

// Benchmark 14 runs the simulated replicas of benchmark 9 in processes of
// their own (the role "simfleet"), each process with its own round-robin
// balancer in front of the head-office processes. The balancer lives in
// the fleet's process, as a RoundTripper, rather than as a proxy process:
// a proxy holds two descriptors per parked poll (the replica's and the
// head office's), and ten thousand polls would put it past the 20,000 a
// process may open. It does what nginx does with its defaults: every
// request to the next head-office process, whichever replica sends it (no
// stickiness), no active health checks; a process that refuses a
// connection is passed over for failTimeout (max_fails=1, fail_timeout=10s)
// and the request goes to the next (proxy_next_upstream error), as does a
// GET whose connection failed before its answer began (a POST is not sent
// twice: its failure reaches the replica, which retries); at most so many
// connections to each process (as HAProxy's maxconn), the requests beyond
// them queued. The multi-process test of the shop (examples/shop) uses a
// proxy without any of this, and proves the fleet lives through it too.

// roundRobin is a load balancer over head-office processes.
type roundRobin struct {
	backends []*url.URL
	conns    []*http.Transport // one per backend
	// downUntil is, per backend, until when it is passed over (Unix
	// nanoseconds; 0: not down).
	downUntil []atomic.Int64
	next      atomic.Uint64
}

// failTimeout is how long a backend that failed a request is passed over.
const failTimeout = 10 * time.Second

// newRoundRobin balances over the backends' base URLs, with at most
// perBackend connections to each (0: no bound).
func newRoundRobin(backends []string, perBackend int) (*roundRobin, error) {
	b := &roundRobin{downUntil: make([]atomic.Int64, len(backends))}
	for _, s := range backends {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("backend %q: %w", s, err)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxConnsPerHost = perBackend
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 0, max(perBackend, 1<<16)
		b.backends, b.conns = append(b.backends, u), append(b.conns, tr)
	}
	return b, nil
}

// RoundTrip sends req to the next backend not passed over, and on to the
// next after a failure it may be retried on (each backend once at most).
// When every backend is down, the next is tried all the same.
func (b *roundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	n := len(b.backends)
	first := int((b.next.Add(1) - 1) % uint64(n))
	var err error
	tried := 0
	for k := range n {
		i := (first + k) % n
		if until := b.downUntil[i].Load(); until != 0 && time.Now().UnixNano() < until {
			continue
		}
		tried++
		out := req.Clone(req.Context())
		out.URL.Scheme, out.URL.Host, out.Host = b.backends[i].Scheme, b.backends[i].Host, ""
		var resp *http.Response
		resp, err = b.conns[i].RoundTrip(out)
		if err == nil || req.Context().Err() != nil {
			return resp, err
		}
		b.downUntil[i].Store(time.Now().Add(failTimeout).UnixNano())
		if !retriable(req, err) {
			return nil, err
		}
	}
	if tried == 0 {
		// Every backend down: try the one in turn all the same.
		out := req.Clone(req.Context())
		out.URL.Scheme, out.URL.Host, out.Host = b.backends[first].Scheme, b.backends[first].Host, ""
		return b.conns[first].RoundTrip(out)
	}
	return nil, err
}

// retriable says whether a request that failed with err may go to the
// next backend: one whose connection could not be made (nothing was
// sent), or a GET (nothing changes by asking again).
func retriable(req *http.Request, err error) bool {
	if req.Method == http.MethodGet {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// closeIdle closes the idle connections to every backend.
func (b *roundRobin) closeIdle() {
	for _, tr := range b.conns {
		tr.CloseIdleConnections()
	}
}

// balancedAddress is the one address the fleet processes' replicas are
// given: the balancer sends every request on to a backend.
const balancedAddress = "http://head-office.invalid"

// simFleetSpec is the spec of a process of simulated replicas.
type simFleetSpec struct {
	Backends []string      `json:"backends"`
	PerConns int           `json:"per_backend_conns"`
	Replicas []fleetMember `json:"replicas"`
	// Items are the broadcast rows, one a round: "watch K" watches for
	// Items[K].
	Items []uuid.UUID `json:"items"`
	// RoundTimeout is how long a round waits for every replica before it
	// reports those it reached.
	RoundTimeout time.Duration `json:"round_timeout"`
}

// runSimFleetChild runs simulated replicas until stdin ends. Events:
// "provisioned" (Count) once every replica was; then, on the command
// "park", "parked" once every replica's poll is in flight; on "watch K
// acked" ("watch K read"), "watching" at once, and "reached" when every
// replica acknowledged (read) the message carrying row Items[K], or the
// round timed out: Count replicas that read it, Times when each did (Unix
// nanoseconds), Messages delivered since "watch", Failed requests since
// then and the Error of the last.
func runSimFleetChild(ctx context.Context, spec simFleetSpec, cio *childIO, _ *slog.Logger) error {
	codecs, err := benchCodecs()
	if err != nil {
		return err
	}
	tc, err := codec.TableOf[Item](codecs)
	if err != nil {
		return err
	}
	lb, err := newRoundRobin(spec.Backends, spec.PerConns)
	if err != nil {
		return err
	}
	ids, tokens := make([]uuid.UUID, len(spec.Replicas)), make([]string, len(spec.Replicas))
	for i, m := range spec.Replicas {
		ids[i], tokens[i] = m.ID, m.Token
	}
	f := newSimFleet(balancedAddress, &http.Client{Transport: lb}, tc.Name, ids, tokens)
	fctx, stop := context.WithCancel(ctx)
	f.startPhase(fctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
		lb.closeIdle()
	}()
	for i := range f.reps {
		wg.Go(func() { f.run(fctx, i) })
	}
	if _, err := waitFor(ctx, f.allProvisioned, 10*time.Minute); err != nil {
		return fmt.Errorf("%d of %d replicas provisioned (%d failed requests, the first: %v): %w", f.provisioned.Load(), len(ids), f.failures.Load(), f.firstError(), err)
	}
	cio.emit(event{Event: "provisioned", Count: len(ids)})
	var rounds sync.WaitGroup
	defer rounds.Wait()
	for {
		cmd, ok := cio.command(ctx)
		if !ok {
			return nil
		}
		switch verb, arg, _ := strings.Cut(cmd, " "); verb {
		case "park":
			if err := f.parked(ctx, time.Minute); err != nil {
				return err
			}
			cio.emit(event{Event: "parked", Count: len(ids)})
		case "watch":
			num, until, _ := strings.Cut(arg, " ")
			k, err := strconv.Atoi(num)
			if err != nil || k < 0 || k >= len(spec.Items) {
				return fmt.Errorf("watch %q: no such round", arg)
			}
			key, err := tc.KeyOf(&Item{ID: spec.Items[k]})
			if err != nil {
				return err
			}
			round, msgs0, failed0 := f.watch(k, []byte(key)), f.messages.Load(), f.failures.Load()
			cio.emit(event{Event: "watching"})
			done := round.allAcked
			if until == "read" {
				done = round.allRead
			}
			rounds.Go(func() { f.report(ctx, cio, round, done, msgs0, failed0, spec.RoundTimeout) })
		default:
			return fmt.Errorf("unknown command %q", cmd)
		}
	}
}

// parked waits until every replica's poll is in flight.
func (f *simFleet) parked(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for f.inFlight.Load() < int64(len(f.reps)) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d replicas polling: %w", f.inFlight.Load(), len(f.reps), errTimeout)
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

// report emits the round's "reached" once done closed, or at the timeout,
// with those that read its row.
func (f *simFleet) report(ctx context.Context, cio *childIO, round *simRound, done <-chan struct{}, msgs0, failed0 int64, timeout time.Duration) {
	if _, err := waitFor(ctx, done, timeout); err != nil && !errors.Is(err, errTimeout) {
		return
	}
	times := make([]int64, 0, len(round.at))
	for i := range round.at {
		if at := round.at[i].Load(); at != 0 {
			times = append(times, at)
		}
	}
	cio.emit(event{Event: "reached", Count: len(times), Times: times, Messages: f.messages.Load() - msgs0,
		Failed: f.failures.Load() - failed0, Error: errorText(f.lastError())})
}

// errorText is err's text, or nothing.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
