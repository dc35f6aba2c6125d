package httpsync

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
)

var (
	replicaA = uuid.MustParse("00000000-0000-4000-8000-00000000000a")
	replicaB = uuid.MustParse("00000000-0000-4000-8000-00000000000b")
)

// Errors of the fake engine, and how it classifies them.
var (
	errRefused = errors.New("fake: refused for good")
	errUnknown = errors.New("fake: unknown replica")
	errDown    = errors.New("fake: database out of reach")
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// filed is one upward message the fake engine took.
type filed struct {
	replica uuid.UUID
	lane    string
	body    string
}

type fakeMsg struct {
	id   uint64
	body []byte
}

// fakeEngine is the transport's peer: it hands out queued messages until
// they are acknowledged, files what comes up, and knows each replica's
// token.
type fakeEngine struct {
	mu       sync.Mutex
	tokens   map[uuid.UUID]string
	queue    map[uuid.UUID][]fakeMsg
	changed  chan struct{} // closed and replaced when a queue changes
	acked    []uint64
	filed    []filed
	events   []string // receives and acks, in order, when the test records them
	nexts    atomic.Int32
	applied  []Applied                                               // what each Next was told, in order
	failNext error                                                   // returned by Next when set
	receive  func(replica uuid.UUID, lane string, body []byte) error // decides Receive's outcome
	failAuth error                                                   // returned by Authenticate when set
	failAck  func(n int) error                                       // decides Ack's outcome; n counts calls from 1
	acks     int                                                     // calls of Ack
	// waits counts the times Next began to wait for a message; cuts, the
	// times such a wait ended because the request was cancelled (the
	// client left), not at the long-poll's deadline.
	waits, cuts signal
}

// signal counts events and lets a test wait for a count: a real signal,
// not a sleep. Its zero value is ready.
type signal struct {
	mu sync.Mutex
	n  int
	ch chan struct{} // closed and replaced at each event
}

func (s *signal) add() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

func (s *signal) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// await waits until n events have come, for at most timeout, and reports
// whether they came.
func (s *signal) await(n int, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		if s.n >= n {
			s.mu.Unlock()
			return true
		}
		if s.ch == nil {
			s.ch = make(chan struct{})
		}
		ch := s.ch
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

// awaitT is await for the test's own goroutine, failing the test if the
// events do not come within 5 s.
func (s *signal) awaitT(t *testing.T, n int, what string) {
	t.Helper()
	if !s.await(n, 5*time.Second) {
		t.Fatalf("not within 5 s: %s (%d of %d events)", what, s.count(), n)
	}
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{
		tokens: map[uuid.UUID]string{
			replicaA: NewToken(replicaA),
			replicaB: NewToken(replicaB),
		},
		queue:   map[uuid.UUID][]fakeMsg{},
		changed: make(chan struct{}),
	}
}

func (e *fakeEngine) token(id uuid.UUID) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tokens[id]
}

func (e *fakeEngine) push(id uuid.UUID, msgID uint64, body []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queue[id] = append(e.queue[id], fakeMsg{msgID, body})
	close(e.changed)
	e.changed = make(chan struct{})
}

func (e *fakeEngine) Next(ctx context.Context, id uuid.UUID, applied Applied) (uint64, []byte, bool, error) {
	e.nexts.Add(1)
	e.mu.Lock()
	e.applied = append(e.applied, applied)
	e.mu.Unlock()
	for {
		e.mu.Lock()
		if e.failNext != nil {
			err := e.failNext
			e.mu.Unlock()
			return 0, nil, false, err
		}
		if q := e.queue[id]; len(q) > 0 {
			e.mu.Unlock()
			return q[0].id, q[0].body, true, nil
		}
		changed := e.changed
		e.mu.Unlock()
		e.waits.add()
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				e.cuts.add()
			}
			return 0, nil, false, nil
		case <-changed:
		}
	}
}

func (e *fakeEngine) Ack(_ context.Context, id uuid.UUID, msg uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.acks++
	if e.failAck != nil {
		if err := e.failAck(e.acks); err != nil {
			e.events = append(e.events, "ackfail")
			return err
		}
	}
	e.acked = append(e.acked, msg)
	e.events = append(e.events, "ack")
	q := e.queue[id]
	for len(q) > 0 && q[0].id <= msg {
		q = q[1:]
	}
	e.queue[id] = q
	return nil
}

func (e *fakeEngine) Receive(_ context.Context, id uuid.UUID, lane string, body []byte) error {
	e.mu.Lock()
	decide := e.receive
	e.mu.Unlock()
	if decide != nil {
		if err := decide(id, lane, body); err != nil {
			return err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.filed = append(e.filed, filed{id, lane, string(body)})
	return nil
}

func (e *fakeEngine) Authenticate(_ context.Context, id uuid.UUID, secret string) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failAuth != nil {
		return false, e.failAuth
	}
	want, ok := e.tokens[id]
	return ok && want == secret, nil
}

func (e *fakeEngine) Classify(err error) int {
	switch {
	case errors.Is(err, errUnknown):
		return http.StatusNotFound
	case errors.Is(err, errRefused):
		return http.StatusBadRequest
	case errors.Is(err, errDown):
		return http.StatusServiceUnavailable
	}
	return DefaultClassify(err)
}

// state is what the engine holds, for comparing before and after.
func (e *fakeEngine) state() (acked int, filed int, queued int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, q := range e.queue {
		queued += len(q)
	}
	return len(e.acked), len(e.filed), queued
}

// appliedSaid is what each Next was told of the message applied last.
func (e *fakeEngine) appliedSaid() []Applied {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Applied(nil), e.applied...)
}

func (e *fakeEngine) ackedIDs() []uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]uint64(nil), e.acked...)
}

func (e *fakeEngine) filedCopy() []filed {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]filed(nil), e.filed...)
}

func (e *fakeEngine) event(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, s)
}

func (e *fakeEngine) eventLog() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.events, " ")
}

// serve runs a handler over e on loopback, counting the requests that
// reach it.
func serve(t *testing.T, e Engine, opts HandlerOptions) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	h := NewHandler(e, opts)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// call makes one request and returns the status and the body.
func call(t *testing.T, method, url, token string, body io.Reader, header ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func fastClient(srv *httptest.Server, id uuid.UUID, token string, opts ClientOptions) *Client {
	opts.HTTPClient = srv.Client()
	if opts.PollWait == 0 {
		opts.PollWait = 200 * time.Millisecond
	}
	opts.BackoffMin = 5 * time.Millisecond
	opts.BackoffMax = 20 * time.Millisecond
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	return NewClient(srv.URL, id, token, opts)
}

// runLoop runs c.ReceiveLoop until the returned stop is called, which
// cancels it and waits for it to return, failing the test if it does not
// within 5 s or returns an error.
func runLoop(t *testing.T, c *Client, r Receiver) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.ReceiveLoop(ctx, r) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("ReceiveLoop = %v; want nil once its context ended", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("ReceiveLoop did not return within 5 s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// eventually polls cond every 5 ms for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fakeTime is a clock that moves only when the client pauses: installed
// in a client, its backoffs are recorded, not waited, and a test sees
// exactly which it took, and when.
type fakeTime struct {
	mu     sync.Mutex
	at     time.Time
	pauses []time.Duration
	// onPause, when set, is called with each pause, in the client's
	// goroutine.
	onPause func(d time.Duration)
}

func (f *fakeTime) install(c *Client) *fakeTime {
	f.at = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c.now = f.now
	c.pause = f.pause
	return f
}

func (f *fakeTime) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at
}

func (f *fakeTime) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = f.at.Add(d)
}

func (f *fakeTime) pause(ctx context.Context, d time.Duration) bool {
	f.mu.Lock()
	f.pauses = append(f.pauses, d)
	f.at = f.at.Add(d)
	on := f.onPause
	f.mu.Unlock()
	if on != nil {
		on(d)
	}
	return ctx.Err() == nil
}

func (f *fakeTime) paused() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.pauses...)
}
