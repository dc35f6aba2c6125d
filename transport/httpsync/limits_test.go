package httpsync

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// gauge counts the calls of each replica in flight, and the most at once.
type gauge struct {
	mu       sync.Mutex
	now, top map[uuid.UUID]int
}

func (g *gauge) enter(id uuid.UUID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.now == nil {
		g.now, g.top = map[uuid.UUID]int{}, map[uuid.UUID]int{}
	}
	g.now[id]++
	g.top[id] = max(g.top[id], g.now[id])
}

func (g *gauge) exit(id uuid.UUID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now[id]--
}

// most is the most calls of id that were in flight at once.
func (g *gauge) most(id uuid.UUID) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.top[id]
}

// gaugedEngine is the fake engine counting its calls of Next and Receive
// in flight; hold, when set, keeps replica A's Receive until it is
// closed, and held counts the calls it keeps.
type gaugedEngine struct {
	*fakeEngine
	nexts, receives gauge
	hold            chan struct{}
	held            signal
}

func (e *gaugedEngine) Next(ctx context.Context, id uuid.UUID, applied Applied) (uint64, []byte, bool, error) {
	e.nexts.enter(id)
	defer e.nexts.exit(id)
	return e.fakeEngine.Next(ctx, id, applied)
}

func (e *gaugedEngine) Receive(ctx context.Context, id uuid.UUID, lane string, body []byte) error {
	e.receives.enter(id)
	defer e.receives.exit(id)
	if id == replicaA && e.hold != nil {
		e.held.add()
		select {
		case <-e.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return e.fakeEngine.Receive(ctx, id, lane, body)
}

// answer is one request's outcome.
type answer struct {
	code  int
	retry string
	err   error
}

// callCtx makes one request under ctx and returns its outcome.
func callCtx(ctx context.Context, method, url, token, body string) answer {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer drain(resp)
	return answer{code: resp.StatusCode, retry: resp.Header.Get("Retry-After")}
}

// uploadWithin makes replica B upload and fails the test unless it is
// filed (204) within limit.
func uploadWithin(t *testing.T, srv *httptest.Server, e *fakeEngine, limit time.Duration, while string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	a := callCtx(ctx, "POST", srv.URL+"/sync/"+replicaB.String()+"/up", e.token(replicaB), "B's sale")
	took := time.Since(start)
	if a.err != nil || a.code != http.StatusNoContent || took > limit {
		t.Fatalf("B's upload while %s = %d (%v) after %v; want 204 within %v", while, a.code, a.err, took, limit)
	}
	t.Logf("B's upload while %s: filed in %v", while, took.Round(time.Microsecond))
}

// A new long-poll of a replica ends its older one, answered 204 at once,
// so that the engine never has two Next calls of one replica: of 50
// long-polls sent at once, 49 end at once and one waits, and another
// replica's upload is filed within 1 s meanwhile.
func TestANewLongPollOfAReplicaEndsItsOlderOne(t *testing.T) {
	t.Parallel()
	e := &gaugedEngine{fakeEngine: newFakeEngine()}
	srv, _ := serve(t, e, HandlerOptions{PollWait: time.Minute})
	url := srv.URL + "/sync/" + replicaA.String() + "/next"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answers := make(chan answer, 64)
	poll := func() { answers <- callCtx(ctx, "GET", url, e.token(replicaA), "") }

	go poll()
	e.waits.awaitT(t, 1, "the first long-poll waits")
	start := time.Now()
	go poll()
	select {
	case a := <-answers:
		if a.code != http.StatusNoContent {
			t.Fatalf("the replaced long-poll = %d (%v); want 204", a.code, a.err)
		}
		t.Logf("the replaced long-poll ended %v after the new one came", time.Since(start).Round(time.Microsecond))
	case <-time.After(2 * time.Second):
		t.Fatal("the older long-poll still waits 2 s after a new one of its replica came; want it ended at once")
	}
	e.waits.awaitT(t, 2, "the new long-poll waits")

	const flood = 50
	for range flood {
		go poll()
	}
	deadline := time.After(5 * time.Second)
	for i := range flood {
		select {
		case a := <-answers:
			if a.code != http.StatusNoContent {
				t.Fatalf("a replaced long-poll = %d (%v); want 204", a.code, a.err)
			}
		case <-deadline:
			t.Fatalf("%d of %d long-polls ended within 5 s; want all but one", i, flood)
		}
	}
	uploadWithin(t, srv, e.fakeEngine, time.Second, "A has a long-poll after 52")
	if n := e.nexts.most(replicaA); n != 1 {
		t.Errorf("the engine had up to %d Next calls of A at once; want 1", n)
	}
	cancel()
	if a := <-answers; a.err == nil {
		t.Errorf("the last long-poll = %d; want it waiting until its client left", a.code)
	}
}

// A replica has at most MaxUploads uploads in flight, one of them with
// the engine at a time: of three sent at once, one is answered 429 with
// Retry-After at once, and another replica's upload is filed within 1 s
// meanwhile.
func TestUploadsOfAReplicaBeyondMaxUploadsAre429(t *testing.T) {
	t.Parallel()
	e := &gaugedEngine{fakeEngine: newFakeEngine(), hold: make(chan struct{})}
	h := NewHandler(e, HandlerOptions{MaxUploads: 2, Logger: quiet()})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	url := srv.URL + "/sync/" + replicaA.String() + "/up"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Whichever two come first are admitted, one of them held by the
	// engine, the other waiting for it in the handler: neither answers
	// until the engine lets go. The third is refused.
	answers := make(chan answer, 3)
	start := time.Now()
	for i := range 3 {
		go func() { answers <- callCtx(ctx, "POST", url, e.token(replicaA), fmt.Sprint("A's upload ", i)) }()
	}
	e.held.awaitT(t, 1, "one of A's uploads is with the engine")
	a := <-answers
	if a.code != http.StatusTooManyRequests || a.retry != "1" {
		t.Fatalf("the first answer to three uploads of A in flight = %d (%v), Retry-After %q; want 429, 1", a.code, a.err, a.retry)
	}
	t.Logf("one of A's three uploads answered 429 %v after they were sent", time.Since(start).Round(time.Microsecond))
	uploadWithin(t, srv, e.fakeEngine, time.Second, "A has 2 uploads in flight")
	close(e.hold)
	for range 2 {
		if a := <-answers; a.code != http.StatusNoContent {
			t.Fatalf("an admitted upload of A = %d (%v); want 204", a.code, a.err)
		}
	}
	if n := e.receives.most(replicaA); n != 1 {
		t.Errorf("the engine had up to %d uploads of A at once; want 1", n)
	}
	if got := len(e.filedCopy()); got != 3 {
		t.Errorf("%d uploads filed; want 3 (two of A's, B's)", got)
	}
}

// A body trickled slower than MinBodyRate after BodyGrace is answered 408
// and its connection closed; the replica's upload slot is free again,
// and another replica's upload is filed within 1 s meanwhile.
func TestABodyTrickledTooSlowlyIs408(t *testing.T) {
	t.Parallel()
	e := newFakeEngine()
	const grace = 300 * time.Millisecond
	srv, _ := serve(t, e, HandlerOptions{MaxUploads: 1, BodyGrace: grace, MinBodyRate: 1000})
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	// 100,000 bytes announced, 10 sent, and then nothing.
	if _, err := fmt.Fprintf(conn, "POST /sync/%s/up HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n\r\n0123456789",
		replicaA, e.token(replicaA)); err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	var resp *http.Response
	go func() {
		if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			answered <- err
			return
		}
		var err error
		resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
		answered <- err
	}()
	uploadWithin(t, srv, e, time.Second, "A trickles a body")
	if err := <-answered; err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("no answer to a stalled body within 5 s; want 408 after about %v", grace)
		}
		t.Fatal(err)
	}
	took := time.Since(start)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close || took < grace {
		t.Fatalf("a stalled body = %d (closing %v) after %v; want 408, closing, after %v", resp.StatusCode, resp.Close, took, grace)
	}
	t.Logf("a stalled body answered 408 after %v", took.Round(time.Millisecond))
	if code, _, _ := call(t, "POST", srv.URL+"/sync/"+replicaA.String()+"/up", e.token(replicaA), strings.NewReader("A's upload")); code != http.StatusNoContent {
		t.Fatalf("A's next upload = %d; want 204, its slot free again", code)
	}
	if got := e.filedCopy(); len(got) != 2 || got[1].body != "A's upload" {
		t.Fatalf("filed %v; want B's and A's whole upload, nothing of the stalled one", got)
	}
}
