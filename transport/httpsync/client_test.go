package httpsync

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/replica"
)

// receiver is a Receiver whose outcome the test decides, message by
// message; it records each call in the engine's event log.
type receiver struct {
	e    *fakeEngine
	mu   sync.Mutex
	got  []string
	fail func(n int, msg []byte) error // n counts calls from 1
}

func (r *receiver) Receive(_ context.Context, msg []byte) (replica.Received, error) {
	r.mu.Lock()
	r.got = append(r.got, string(msg))
	n := len(r.got)
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		if err := fail(n, msg); err != nil {
			r.e.event(fmt.Sprintf("fail(%s)", msg))
			return replica.Received{}, err
		}
	}
	r.e.event(fmt.Sprintf("apply(%s)", msg))
	return replica.Received{}, nil
}

func (r *receiver) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func TestAckOnlyAfterReceiveReturnedNil(t *testing.T) {
	e := newFakeEngine()
	srv, _ := serve(t, e, HandlerOptions{PollWait: 100 * time.Millisecond})
	c := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{})
	r := &receiver{e: e, fail: func(n int, _ []byte) error {
		if n == 1 {
			return errors.New("disk full")
		}
		return nil
	}}
	e.push(replicaA, 1, []byte("m1"))
	e.push(replicaA, 2, []byte("m2"))
	stop := runLoop(t, c, r)
	eventually(t, "both messages acknowledged", func() bool { return len(e.ackedIDs()) == 2 })
	stop()
	if got, want := e.eventLog(), "fail(m1) apply(m1) ack apply(m2) ack"; got != want {
		t.Fatalf("events %q; want %q", got, want)
	}
	if got := e.ackedIDs(); got[0] != 1 || got[1] != 2 {
		t.Fatalf("acked %v; want [1 2]", got)
	}
}

func TestNewerProtocolAndMalformedMessagesAreNotAcknowledged(t *testing.T) {
	for _, err := range []error{
		&magicsync.ProtocolError{Got: 9, Speak: 1},
		fmt.Errorf("%w: bad tag", replica.ErrMalformed),
	} {
		e := newFakeEngine()
		srv, _ := serve(t, e, HandlerOptions{PollWait: 100 * time.Millisecond})
		c := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{})
		r := &receiver{e: e, fail: func(int, []byte) error { return err }}
		e.push(replicaA, 1, []byte("m1"))
		stop := runLoop(t, c, r)
		eventually(t, "the message taken three times", func() bool { return r.calls() >= 3 })
		stop()
		if acked := e.ackedIDs(); len(acked) != 0 {
			t.Fatalf("a message Receive refused with %v was acknowledged", err)
		}
	}
}

// TestReceiveLoopBacksOffOnFailuresAndGoesOn: every failed poll is
// followed by a backoff before the next request, growing and capped, and
// the loop goes on once the engine is back.
func TestReceiveLoopBacksOffOnFailuresAndGoesOn(t *testing.T) {
	e := newFakeEngine()
	e.failNext = errors.New("fake: a failure without Retry-After") // 500
	srv, _ := serve(t, e, HandlerOptions{PollWait: 100 * time.Millisecond})
	c := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{})
	clock := (&fakeTime{}).install(c)
	var pollsAtPause []int32
	clock.onPause = func(time.Duration) { pollsAtPause = append(pollsAtPause, e.nexts.Load()) }
	r := &receiver{e: e}
	e.push(replicaA, 7, []byte("m7"))
	stop := runLoop(t, c, r)
	eventually(t, "four failed polls", func() bool { return e.nexts.Load() >= 4 })
	e.mu.Lock()
	e.failNext = nil
	e.mu.Unlock()
	eventually(t, "the message acknowledged once the engine is back", func() bool { return len(e.ackedIDs()) == 1 })
	stop()
	pauses := clock.paused()
	if len(pauses) < 4 {
		t.Fatalf("%d backoffs after %d failed polls: %v", len(pauses), e.nexts.Load()-1, pauses)
	}
	// One backoff after each failed poll, before the next request: the
	// n-th backoff comes after the n-th poll.
	for i, n := range pollsAtPause[:4] {
		if n != int32(i+1) {
			t.Fatalf("backoff %d came after %d polls (all: %v); want one backoff per failed poll", i+1, n, pollsAtPause)
		}
	}
	// BackoffMin 5 ms, BackoffMax 20 ms: jittered within [2.5, 5], [5, 10],
	// [10, 20], then capped at [10, 20] ms.
	for i, ceil := range []time.Duration{5, 10, 20, 20} {
		ceil *= time.Millisecond
		if d := pauses[i]; d < ceil/2 || d > ceil {
			t.Errorf("backoff %d = %v; want within [%v, %v] (all: %v)", i+1, d, ceil/2, ceil, pauses)
		}
	}
}

// TestFailedAckBacksOff: an acknowledgement that fails is followed by a
// backoff, growing while it keeps failing, before the message is taken
// again; it is applied again (changing nothing) and acknowledged once the
// server takes it.
func TestFailedAckBacksOff(t *testing.T) {
	e := newFakeEngine()
	e.failAck = func(n int) error {
		if n <= 3 {
			return errors.New("fake: the acknowledgement failed") // 500
		}
		return nil
	}
	srv, _ := serve(t, e, HandlerOptions{PollWait: 100 * time.Millisecond})
	c := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{})
	clock := (&fakeTime{}).install(c)
	clock.onPause = func(time.Duration) { e.event("backoff") }
	r := &receiver{e: e}
	e.push(replicaA, 1, []byte("m1"))
	e.push(replicaA, 2, []byte("m2"))
	stop := runLoop(t, c, r)
	eventually(t, "both messages acknowledged", func() bool { return len(e.ackedIDs()) == 2 })
	stop()
	want := "apply(m1) ackfail backoff apply(m1) ackfail backoff apply(m1) ackfail backoff apply(m1) ack apply(m2) ack"
	if got := e.eventLog(); !strings.HasPrefix(got, want) {
		t.Fatalf("events %q; want %q", got, want)
	}
	pauses := clock.paused()
	for i, ceil := range []time.Duration{5, 10, 20} {
		ceil *= time.Millisecond
		if d := pauses[i]; d < ceil/2 || d > ceil {
			t.Errorf("backoff %d after a failed ack = %v; want within [%v, %v] (all: %v)", i+1, d, ceil/2, ceil, pauses)
		}
	}
}

// TestReceiveLoopWaitsAsRetryAfterAsks: a 503's Retry-After (the
// handler's 1 s) lengthens the backoff past BackoffMin's, up to
// BackoffMax.
func TestReceiveLoopWaitsAsRetryAfterAsks(t *testing.T) {
	e := newFakeEngine()
	e.failNext = errDown // 503, Retry-After: 1
	srv, _ := serve(t, e, HandlerOptions{PollWait: 100 * time.Millisecond})
	c := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{})
	c.bmax = 5 * time.Second
	clock := (&fakeTime{}).install(c)
	clock.onPause = func(time.Duration) {
		if e.nexts.Load() >= 2 {
			e.mu.Lock()
			e.failNext = nil
			e.mu.Unlock()
		}
	}
	r := &receiver{e: e}
	e.push(replicaA, 1, []byte("m1"))
	stop := runLoop(t, c, r)
	eventually(t, "the message acknowledged once the engine is back", func() bool { return len(e.ackedIDs()) == 1 })
	stop()
	pauses := clock.paused()
	if len(pauses) != 2 {
		t.Fatalf("backoffs %v after two 503s; want two", pauses)
	}
	for i, d := range pauses {
		if d < time.Second || d > c.bmax {
			t.Errorf("backoff %d after a 503 asking Retry-After: 1 = %v; want within [1s, %v]", i+1, d, c.bmax)
		}
	}
}

// TestSendHoldsOffAsRetryAfterAsks: once the server answered 503 with
// Retry-After, neither Send nor the receive loop makes a request until
// that time has passed; Send fails at once, retryably, wrapping
// ErrRetryLater. The hold-off is capped at BackoffMax.
func TestSendHoldsOffAsRetryAfterAsks(t *testing.T) {
	var ups, nexts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/next") {
			nexts.Add(1)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if ups.Add(1) == 1 {
			w.Header().Set("Retry-After", "3")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c := fastClient(srv, replicaA, "tok", ClientOptions{})
	c.bmax = 2 * time.Second // caps the 3 s asked for
	clock := (&fakeTime{}).install(c)
	ctx := context.Background()
	err := c.Send(ctx, replicaA, "main", []byte("up"))
	if st, ok := errors.AsType[*StatusError](err); !ok || st.Code != http.StatusServiceUnavailable || st.RetryAfter != 3*time.Second {
		t.Fatalf("Send = %v; want a 503 StatusError asking for 3 s", err)
	}
	clock.advance(1900 * time.Millisecond)
	err = c.Send(ctx, replicaA, "main", []byte("up"))
	if se, ok := errors.AsType[*replica.SendError](err); !ok || !se.Retryable || !errors.Is(err, ErrRetryLater) {
		t.Fatalf("Send while held off = %v; want a retryable SendError wrapping ErrRetryLater", err)
	}
	if n := ups.Load(); n != 1 {
		t.Fatalf("%d requests while held off; want none after the first", n-1)
	}
	// The receive loop waits out the rest before its first poll.
	loopCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.ReceiveLoop(loopCtx, &receiver{e: newFakeEngine()})
	}()
	eventually(t, "the receive loop polling", func() bool { return nexts.Load() >= 1 })
	cancel()
	<-done
	if p := clock.paused(); len(p) == 0 || p[0] != 100*time.Millisecond {
		t.Fatalf("the receive loop paused %v first; want the 100 ms left of the hold-off, before polling", p)
	}
	if err := c.Send(ctx, replicaA, "main", []byte("up")); err != nil {
		t.Fatalf("Send after the hold-off = %v", err)
	}
	if n := ups.Load(); n != 2 {
		t.Fatalf("%d requests; want 2", n)
	}
}

func TestReceiveLoopReturnsWhenItsContextEnds(t *testing.T) {
	e := newFakeEngine()
	srv, _ := serve(t, e, HandlerOptions{PollWait: 30 * time.Second})
	c := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{PollWait: 30 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.ReceiveLoop(ctx, &receiver{e: e}) }()
	eventually(t, "a long-poll under way", func() bool { return e.nexts.Load() == 1 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ReceiveLoop = %v; want nil", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("ReceiveLoop did not return within 2 s of its context ending, in a 30 s long-poll")
	}
	// Ended while offline, too.
	c = fastClient(srv, replicaA, e.token(replicaA), ClientOptions{Online: func() bool { return false }})
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.ReceiveLoop(ctx, &receiver{e: e}); err != nil {
		t.Fatalf("ReceiveLoop = %v; want nil", err)
	}
	if err := c.ReceiveLoop(context.Background(), nil); err == nil {
		t.Fatal("ReceiveLoop(nil) = nil; want an error")
	}
}

// plug is an Online hook that counts the times it answered false, so that
// a test can wait for the client to have asked, and been told offline, a
// number of times: proof that the client is waiting, not a guess by sleep.
type plug struct {
	on   atomic.Bool
	offs signal
}

func (p *plug) Online() bool {
	on := p.on.Load()
	if !on {
		p.offs.add()
	}
	return on
}

// TestOfflineMakesNoRequests: while the Online hook answers false the
// client sends nothing and asks nothing, a long-poll in flight is cut short,
// and all resumes once it answers true. "Nothing" is checked over three
// answers of the hook (its ticks, 100 ms apart) each of which found the
// client offline and waiting.
func TestOfflineMakesNoRequests(t *testing.T) {
	e := newFakeEngine()
	srv, requests := serve(t, e, HandlerOptions{PollWait: 5 * time.Second})
	var online plug
	c := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{PollWait: 5 * time.Second, Online: online.Online})
	r := &receiver{e: e}
	e.push(replicaA, 1, []byte("m1"))
	runLoop(t, c, r)
	err := c.Send(context.Background(), replicaA, "main", []byte("up"))
	if se, ok := errors.AsType[*replica.SendError](err); !ok || !se.Retryable || !errors.Is(err, ErrOffline) {
		t.Fatalf("Send while offline = %v; want a retryable SendError wrapping ErrOffline", err)
	}
	online.offs.awaitT(t, online.offs.count()+3, "the receive loop told offline three more times")
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests made while offline; want none", n)
	}
	if n := r.calls(); n != 0 {
		t.Fatalf("%d messages taken while offline; want none", n)
	}
	online.on.Store(true)
	eventually(t, "the message acknowledged once online", func() bool { return len(e.ackedIDs()) == 1 })
	// Unplugged during a long-poll: it is cut short, and nothing more is
	// asked until plugged in again.
	e.waits.awaitT(t, 1, "the next long-poll waiting for a message")
	before := requests.Load() // the ack and the long-poll in flight included
	online.on.Store(false)
	e.cuts.awaitT(t, 1, "the long-poll in flight cut short by the client")
	offs := online.offs.count()
	online.offs.awaitT(t, offs+3, "the receive loop told offline three times since the cut")
	if n := requests.Load(); n != before {
		t.Fatalf("%d requests made while unplugged; want none", n-before)
	}
	e.push(replicaA, 2, []byte("m2"))
	online.offs.awaitT(t, online.offs.count()+2, "the receive loop told offline twice since m2 was queued")
	if n := requests.Load(); n != before {
		t.Fatalf("%d requests made while unplugged; want none", n-before)
	}
	if r.calls() != 1 {
		t.Fatal("a message was taken while unplugged")
	}
	online.on.Store(true)
	eventually(t, "the second message acknowledged once plugged in again", func() bool { return len(e.ackedIDs()) == 2 })
}

// None of the server's status codes sets rows aside — it judges rows in
// Filed — so every refusal keeps them queued, each with the lane's remedy:
// back off (the server out of reach), split (413), wait for the server's
// upgrade (an older protocol), or be mended (any other 4xx).
func TestSendClassifiesFailures(t *testing.T) {
	for _, c := range []struct {
		status   int
		protocol string
		why      replica.Refusal
	}{
		{http.StatusServiceUnavailable, "", replica.Unreachable},
		{http.StatusInternalServerError, "", replica.Unreachable},
		{http.StatusBadGateway, "", replica.Unreachable},
		{http.StatusTooManyRequests, "", replica.Unreachable},
		{http.StatusRequestTimeout, "", replica.Unreachable},
		{http.StatusBadRequest, "", replica.Misconfigured},
		{http.StatusBadRequest, "0", replica.OlderServer},
		{http.StatusBadRequest, "99", replica.Misconfigured},
		{http.StatusRequestEntityTooLarge, "", replica.TooLarge},
		{http.StatusUnauthorized, "", replica.Misconfigured},
		{http.StatusForbidden, "", replica.Misconfigured},
		{http.StatusNotFound, "", replica.Misconfigured},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get(HeaderLane) != "telemetry" || r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != "/sync/"+replicaA.String()+"/up" {
				http.Error(w, "unexpected request", http.StatusTeapot)
				return
			}
			if c.protocol != "" {
				w.Header().Set(HeaderProtocol, c.protocol)
			}
			http.Error(w, "the reason", c.status)
		}))
		cl := fastClient(srv, replicaA, "tok", ClientOptions{})
		err := cl.Send(context.Background(), replicaA, "telemetry", []byte("up"))
		srv.Close()
		se, ok := errors.AsType[*replica.SendError](err)
		if !ok || !se.Retryable || se.Refusal != c.why {
			t.Errorf("Send answered %d (protocol %q) = %v; want a SendError keeping the rows, %v", c.status, c.protocol, err, c.why)
			continue
		}
		st, ok := errors.AsType[*StatusError](err)
		if !ok || st.Code != c.status || st.Reason != "the reason" {
			t.Errorf("Send answered %d = %v; want a StatusError with the server's reason", c.status, err)
		}
	}
	// The server out of reach: retryable.
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	err := fastClient(srv, replicaA, "tok", ClientOptions{}).Send(context.Background(), replicaA, "main", []byte("up"))
	if se, ok := errors.AsType[*replica.SendError](err); !ok || !se.Retryable {
		t.Fatalf("Send to a closed server = %v; want a retryable SendError", err)
	}
}

func TestSendThroughTheHandler(t *testing.T) {
	e := newFakeEngine()
	e.receive = func(_ uuid.UUID, _ string, body []byte) error {
		if string(body) == "garbage" {
			return fmt.Errorf("%w: does not decode", errRefused)
		}
		return nil
	}
	srv, _ := serve(t, e, HandlerOptions{MaxBodyBytes: 64})
	c := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{})
	ctx := context.Background()
	if err := c.Send(ctx, replicaA, "telemetry", []byte("up")); err != nil {
		t.Fatal(err)
	}
	if got := e.filedCopy(); len(got) != 1 || got[0].lane != "telemetry" || got[0].body != "up" {
		t.Fatalf("filed %v; want one message in lane telemetry", got)
	}
	for _, c := range []struct {
		body   string
		status int
		why    replica.Refusal
	}{
		{"garbage", http.StatusBadRequest, replica.Misconfigured},
		{strings.Repeat("x", 65), http.StatusRequestEntityTooLarge, replica.TooLarge},
	} {
		err := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{}).Send(ctx, replicaA, "main", []byte(c.body))
		se, ok := errors.AsType[*replica.SendError](err)
		st, _ := errors.AsType[*StatusError](err)
		if !ok || se.Refusal != c.why || st == nil || st.Code != c.status || st.Reason == "" {
			t.Errorf("Send(%.10q) = %v; want a SendError (%v) of %d with a reason", c.body, err, c.why, c.status)
		}
	}
	// Another replica's id: refused without a request, retryably.
	err := c.Send(ctx, replicaB, "main", []byte("up"))
	if se, ok := errors.AsType[*replica.SendError](err); !ok || !se.Retryable {
		t.Fatalf("Send of another replica = %v; want a retryable SendError", err)
	}
	// A token of another replica: 403, permanent.
	err = fastClient(srv, replicaA, e.token(replicaB), ClientOptions{}).Send(ctx, replicaA, "main", []byte("up"))
	if st, ok := errors.AsType[*StatusError](err); !ok || st.Code != http.StatusForbidden {
		t.Fatalf("Send with B's token = %v; want a 403", err)
	}
}
