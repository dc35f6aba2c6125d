package headoffice

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/transport/natssync/embedded"
	"github.com/magicsync/magicsync/transport/natssync/internal/natswire"
)

// waitingEngine takes every token, hands out nothing and waits in Next
// until its context ends, saying when a Next started.
type waitingEngine struct {
	polling chan struct{}
}

func (e *waitingEngine) Next(ctx context.Context, _ uuid.UUID, _ Applied) (uint64, []byte, bool, error) {
	e.polling <- struct{}{}
	<-ctx.Done()
	return 0, nil, false, ctx.Err()
}
func (e *waitingEngine) Ack(context.Context, uuid.UUID, uint64) error { return nil }
func (e *waitingEngine) Receive(context.Context, uuid.UUID, string, []byte) error {
	return nil
}
func (e *waitingEngine) Authenticate(context.Context, uuid.UUID, string) (bool, error) {
	return true, nil
}

// serving starts an embedded NATS server and Serve over e; stop ends
// Serve and returns its error.
func serving(t *testing.T, e Engine, opts Options) (nc *nats.Conn, stop func() error) {
	t.Helper()
	return servingOn(t, embedded.Options{}, e, opts)
}

// servingOn is serving on a server started with nsOpts.
func servingOn(t *testing.T, nsOpts embedded.Options, e Engine, opts Options) (nc *nats.Conn, stop func() error) {
	t.Helper()
	ns, err := embedded.Start(nsOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	office, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(office.Close)
	nc, err = nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	opts.Logger = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, office, e, opts) }()
	var once sync.Once
	var served error
	stop = func() error {
		once.Do(func() { cancel(); served = <-done })
		return served
	}
	t.Cleanup(func() { _ = stop() })
	// Serving once a request is answered.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := nc.Request(natswire.Subject(natswire.DefaultPrefix, uuid.New(), "nothing"), nil, time.Second); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Serve did not answer within 10 s")
		}
	}
	return nc, stop
}

// request sends one request of exchange verb for replica, with headers h,
// and returns the reply's status.
func request(nc *nats.Conn, replica uuid.UUID, verb string, h map[string]string) (int, *nats.Msg, error) {
	m := nats.NewMsg(natswire.Subject(natswire.DefaultPrefix, replica, verb))
	m.Header.Set(natswire.HeaderAuthorization, "Bearer "+replica.String()+".secret")
	for k, v := range h {
		m.Header.Set(k, v)
	}
	resp, err := nc.RequestMsg(m, 20*time.Second)
	if err != nil {
		return 0, nil, err
	}
	code, err := strconv.Atoi(resp.Header.Get(natswire.HeaderStatus))
	return code, resp, err
}

// A head office that stops answers the long-polls it holds 503 at once,
// without Retry-After, so that their replicas ask another member after
// their shortest backoff, and Serve returns once they are answered.
func TestStoppingAnswersTheLongPollsHeld(t *testing.T) {
	t.Parallel()
	e := &waitingEngine{polling: make(chan struct{}, 1)}
	nc, stop := serving(t, e, Options{PollWait: time.Minute})
	type answer struct {
		code int
		resp *nats.Msg
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		code, resp, err := request(nc, uuid.New(), natswire.Next, map[string]string{natswire.HeaderWait: "60"})
		answered <- answer{code, resp, err}
	}()
	<-e.polling
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Serve = %v", err)
	}
	a := <-answered
	if a.err != nil || a.code != http.StatusServiceUnavailable || a.resp.Header.Get(natswire.HeaderRetryAfter) != "" {
		t.Fatalf("the long-poll held as Serve stopped: %d, %v; want 503 without Retry-After", a.code, a.err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the long-poll was answered %v after Serve stopped; want at once", took)
	}
}

// A newer next of a replica ends its older one, answered 204.
func TestANewerNextReplacesTheOlder(t *testing.T) {
	t.Parallel()
	e := &waitingEngine{polling: make(chan struct{}, 2)}
	nc, _ := serving(t, e, Options{PollWait: time.Minute})
	id := uuid.New()
	older := make(chan int, 1)
	go func() {
		code, _, err := request(nc, id, natswire.Next, nil)
		if err != nil {
			code = -1
		}
		older <- code
	}()
	<-e.polling
	go func() { _, _, _ = request(nc, id, natswire.Next, nil) }()
	select {
	case code := <-older:
		if code != http.StatusNoContent {
			t.Fatalf("the older next was answered %d; want 204", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the older next was not answered once a newer one came")
	}
}

// Requests outside the protocol are refused for good: an unknown
// exchange 404, a wait not in plain decimal or an ack without a message
// id 400, no token 401.
func TestMalformedRequestsAreRefused(t *testing.T) {
	t.Parallel()
	e := &waitingEngine{polling: make(chan struct{}, 1)}
	nc, _ := serving(t, e, Options{})
	id := uuid.New()
	for _, c := range []struct {
		verb string
		h    map[string]string
		want int
	}{
		{"nothing", nil, http.StatusNotFound},
		{natswire.Next, map[string]string{natswire.HeaderWait: "2s"}, http.StatusBadRequest},
		{natswire.Next, map[string]string{natswire.HeaderApplied: "x"}, http.StatusBadRequest},
		{natswire.Next, map[string]string{natswire.HeaderApplied: "3", natswire.HeaderSHA256: "abc"}, http.StatusBadRequest},
		{natswire.Ack, nil, http.StatusBadRequest},
		{natswire.Up, nil, http.StatusBadRequest},
		{natswire.Up, map[string]string{natswire.HeaderLane: "a lane"}, http.StatusBadRequest},
		{natswire.Schema, nil, http.StatusNotFound},
		{natswire.Ack, map[string]string{natswire.HeaderAuthorization: "Basic x", natswire.HeaderMessageID: "1"}, http.StatusUnauthorized},
	} {
		code, resp, err := request(nc, id, c.verb, c.h)
		if err != nil || code != c.want {
			t.Errorf("%s %v: %d, %v; want %d", c.verb, c.h, code, err, c.want)
			continue
		}
		if resp.Header.Get(natswire.HeaderReason) == "" || resp.Header.Get(natswire.HeaderProtocol) == "" {
			t.Errorf("%s %v: the refusal carries no reason or no protocol: %v", c.verb, c.h, resp.Header)
		}
	}
}

// largeEngine hands out a message of size bytes.
type largeEngine struct {
	waitingEngine
	size int
}

func (e *largeEngine) Next(context.Context, uuid.UUID, Applied) (uint64, []byte, bool, error) {
	return 1, make([]byte, e.size), true, nil
}

// A message larger than the NATS server's max_payload cannot go out: the
// replica is told so (500, with the reason), not left waiting for a
// reply that never comes.
func TestAReplyLargerThanTheMaxPayloadIsSaidSo(t *testing.T) {
	t.Parallel()
	e := &largeEngine{size: 100 << 10}
	nc, _ := servingOn(t, embedded.Options{MaxPayload: 64 << 10}, e, Options{})
	start := time.Now()
	code, resp, err := request(nc, uuid.New(), natswire.Next, nil)
	if err != nil || code != http.StatusInternalServerError || resp.Header.Get(natswire.HeaderReason) == "" {
		t.Fatalf("next of a message over max_payload: %d, %v; want 500 with a reason", code, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("answered after %v; want at once", took)
	}
}
