package httpsync

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestMissingOrWrongTokenIs401AndChangesNothing(t *testing.T) {
	e := newFakeEngine()
	e.push(replicaA, 1, []byte("down"))
	srv, _ := serve(t, e, HandlerOptions{PollWait: 50 * time.Millisecond})
	base := srv.URL + "/sync/" + replicaA.String()
	wrong := []string{
		"", // missing
		"not-the-token",
		replicaA.String() + ".guessed", // claims A, wrong secret
		e.token(replicaA) + "x",        // a near miss
		strings.TrimPrefix(e.token(replicaA), replicaA.String()), // the secret alone
	}
	for _, token := range wrong {
		for _, c := range []struct{ method, url, body string }{
			{"GET", base + "/next", ""},
			{"POST", base + "/ack/1", ""},
			{"POST", base + "/up", "up"},
		} {
			before := e.nexts.Load()
			code, hd, reason := call(t, c.method, c.url, token, strings.NewReader(c.body))
			if code != http.StatusUnauthorized {
				t.Errorf("%s %s with token %q = %d; want 401", c.method, c.url, token, code)
			}
			if hd.Get("WWW-Authenticate") == "" || strings.TrimSpace(reason) == "" {
				t.Errorf("a 401 without WWW-Authenticate or a reason: %q %q", hd.Get("WWW-Authenticate"), reason)
			}
			if e.nexts.Load() != before {
				t.Errorf("%s %s with token %q reached the engine's Next", c.method, c.url, token)
			}
		}
	}
	if acked, filed, queued := e.state(); acked != 0 || filed != 0 || queued != 1 {
		t.Fatalf("after refused calls: %d acked, %d filed, %d queued; want 0, 0, 1", acked, filed, queued)
	}
	// A request header in another case works.
	code, _, _ := call(t, "POST", base+"/ack/1", "", nil, "Authorization", "bearer "+e.token(replicaA))
	if code != http.StatusNoContent {
		t.Fatalf("ack with a valid token = %d; want 204", code)
	}
}

func TestTokenOfAnotherReplicaIs403(t *testing.T) {
	e := newFakeEngine()
	e.push(replicaA, 1, []byte("down"))
	srv, _ := serve(t, e, HandlerOptions{PollWait: 50 * time.Millisecond})
	base := srv.URL + "/sync/" + replicaA.String()
	tokenB := e.token(replicaB)
	for _, c := range []struct{ method, url, body string }{
		{"GET", base + "/next", ""},
		{"POST", base + "/ack/1", ""},
		{"POST", base + "/up", "up"},
	} {
		code, _, reason := call(t, c.method, c.url, tokenB, strings.NewReader(c.body))
		if code != http.StatusForbidden || !strings.Contains(reason, "another replica") {
			t.Errorf("%s %s with B's token = %d %q; want 403 naming another replica", c.method, c.url, code, reason)
		}
	}
	if acked, filed, queued := e.state(); acked != 0 || filed != 0 || queued != 1 {
		t.Fatalf("after refused calls: %d acked, %d filed, %d queued; want 0, 0, 1", acked, filed, queued)
	}
	// An unknown replica's URL with B's token: B's token still, so 403.
	code, _, _ := call(t, "GET", srv.URL+"/sync/"+uuid.NewString()+"/next", tokenB, nil)
	if code != http.StatusForbidden {
		t.Fatalf("an unknown replica's URL with B's token = %d; want 403", code)
	}
}

func TestOversizedBodyIs413(t *testing.T) {
	e := newFakeEngine()
	srv, _ := serve(t, e, HandlerOptions{MaxBodyBytes: 100})
	url := srv.URL + "/sync/" + replicaA.String() + "/up"
	token := e.token(replicaA)
	if code, _, _ := call(t, "POST", url, token, strings.NewReader(strings.Repeat("x", 100))); code != http.StatusNoContent {
		t.Fatalf("a body at the bound = %d; want 204", code)
	}
	code, _, reason := call(t, "POST", url, token, strings.NewReader(strings.Repeat("x", 101)))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(reason, "100 bytes") {
		t.Fatalf("a body over the bound = %d %q; want 413 naming the bound", code, reason)
	}
	// Without a Content-Length (chunked), it is caught while reading.
	code, _, _ = call(t, "POST", url, token, struct{ *strings.Reader }{strings.NewReader(strings.Repeat("x", 1000))})
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a chunked body over the bound = %d; want 413", code)
	}
	if _, filed, _ := e.state(); filed != 1 {
		t.Fatalf("%d messages filed; want only the one at the bound", filed)
	}
}

func TestRefusedBodyIs400WithReason(t *testing.T) {
	e := newFakeEngine()
	e.receive = func(_ uuid.UUID, _ string, body []byte) error {
		if string(body) == "garbage" {
			return fmt.Errorf("%w: the message does not decode: bad varint", errRefused)
		}
		return nil
	}
	srv, _ := serve(t, e, HandlerOptions{})
	url := srv.URL + "/sync/" + replicaA.String() + "/up"
	code, hd, reason := call(t, "POST", url, e.token(replicaA), strings.NewReader("garbage"))
	if code != http.StatusBadRequest || !strings.Contains(reason, "does not decode") || !strings.HasPrefix(hd.Get("Content-Type"), "text/plain") {
		t.Fatalf("a garbage body = %d %q (%s); want 400 with the engine's reason as text", code, reason, hd.Get("Content-Type"))
	}
	if code, _, _ := call(t, "POST", url, e.token(replicaA), strings.NewReader("")); code != http.StatusBadRequest {
		t.Fatalf("an empty body = %d; want 400", code)
	}
	if code, _, _ := call(t, "POST", url, e.token(replicaA), strings.NewReader("x"), HeaderLane, "a lane"); code != http.StatusBadRequest {
		t.Fatalf("a lane with a space = %d; want 400", code)
	}
	if code, _, _ := call(t, "POST", srv.URL+"/sync/"+replicaA.String()+"/ack/x", e.token(replicaA), nil); code != http.StatusBadRequest {
		t.Fatalf("ack of a non-number = %d; want 400", code)
	}
	if _, filed, _ := e.state(); filed != 0 {
		t.Fatal("a refused message was filed")
	}
}

func TestUpFilesInTheLaneOfItsHeader(t *testing.T) {
	e := newFakeEngine()
	srv, _ := serve(t, e, HandlerOptions{})
	url := srv.URL + "/sync/" + replicaA.String() + "/up"
	if code, _, _ := call(t, "POST", url, e.token(replicaA), strings.NewReader("one")); code != http.StatusNoContent {
		t.Fatalf("up = %d; want 204", code)
	}
	if code, _, _ := call(t, "POST", url, e.token(replicaA), strings.NewReader("two"), HeaderLane, "telemetry"); code != http.StatusNoContent {
		t.Fatalf("up = %d; want 204", code)
	}
	want := []filed{{replicaA, "main", "one"}, {replicaA, "telemetry", "two"}}
	if got := e.filedCopy(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("filed %v; want %v", got, want)
	}
}

func TestEngineErrorsMapToStatuses(t *testing.T) {
	for _, c := range []struct {
		err    error
		opts   HandlerOptions
		status int
	}{
		{fmt.Errorf("wrapped: %w", errUnknown), HandlerOptions{}, http.StatusNotFound},
		{errDown, HandlerOptions{}, http.StatusServiceUnavailable},
		{context.DeadlineExceeded, HandlerOptions{}, http.StatusServiceUnavailable},
		{fmt.Errorf("boom"), HandlerOptions{}, http.StatusInternalServerError},
		// Classify in the options overrides the engine's.
		{errUnknown, HandlerOptions{Classify: func(error) int { return http.StatusGone }}, http.StatusGone},
		{errUnknown, HandlerOptions{Classify: func(error) int { return 200 }}, http.StatusInternalServerError},
	} {
		e := newFakeEngine()
		e.receive = func(uuid.UUID, string, []byte) error { return c.err }
		srv, _ := serve(t, e, c.opts)
		code, hd, reason := call(t, "POST", srv.URL+"/sync/"+replicaA.String()+"/up", e.token(replicaA), strings.NewReader("x"))
		if code != c.status {
			t.Errorf("Receive failing with %v answered %d; want %d", c.err, code, c.status)
		}
		if code == http.StatusServiceUnavailable && hd.Get("Retry-After") != "1" {
			t.Errorf("a 503 with Retry-After %q; want 1", hd.Get("Retry-After"))
		}
		if code >= 500 && strings.Contains(reason, c.err.Error()) {
			t.Errorf("a %d leaks the engine's error: %q", code, reason)
		}
	}
	// Authenticate failing to tell is answered as classified, not 401.
	e := newFakeEngine()
	e.failAuth = errDown
	srv, _ := serve(t, e, HandlerOptions{})
	if code, _, _ := call(t, "GET", srv.URL+"/sync/"+replicaA.String()+"/next", e.token(replicaA), nil); code != http.StatusServiceUnavailable {
		t.Fatalf("next while authentication cannot tell = %d; want 503", code)
	}
	// A URL whose id is no UUID.
	if code, _, _ := call(t, "GET", srv.URL+"/sync/register-1/next", e.token(replicaA), nil); code != http.StatusBadRequest {
		t.Fatalf("next of a non-UUID id = %d; want 400", code)
	}
}

func TestEmptyLongPollIs204(t *testing.T) {
	e := newFakeEngine()
	srv, _ := serve(t, e, HandlerOptions{PollWait: 100 * time.Millisecond})
	url := srv.URL + "/sync/" + replicaA.String() + "/next"
	start := time.Now()
	code, _, body := call(t, "GET", url, e.token(replicaA), nil)
	if took := time.Since(start); code != http.StatusNoContent || body != "" || took < 90*time.Millisecond || took > 3*time.Second {
		t.Fatalf("an empty long-poll = %d %q after %v; want 204 after about 100 ms", code, body, took)
	}
	// The client's wait, when shorter, bounds it; a longer one does not
	// lengthen it.
	start = time.Now()
	if code, _, _ := call(t, "GET", url+"?wait=0.01", e.token(replicaA), nil); code != http.StatusNoContent || time.Since(start) > 90*time.Millisecond {
		t.Fatalf("a long-poll of wait=0.01 = %d after %v; want 204 at once", code, time.Since(start))
	}
	start = time.Now()
	if code, _, _ := call(t, "GET", url+"?wait=3600", e.token(replicaA), nil); code != http.StatusNoContent || time.Since(start) > 3*time.Second {
		t.Fatalf("a long-poll of wait=3600 = %d after %v; want 204 after the handler's PollWait", code, time.Since(start))
	}
	if code, _, _ := call(t, "GET", url+"?wait=soon", e.token(replicaA), nil); code != http.StatusBadRequest {
		t.Fatalf("wait=soon = %d; want 400", code)
	}
}

func TestLongPollAnswersWhenAMessageComes(t *testing.T) {
	e := newFakeEngine()
	srv, _ := serve(t, e, HandlerOptions{PollWait: 10 * time.Second})
	// The message comes once the long-poll waits for one (the engine's
	// Next blocked), not before.
	go func() {
		if !e.waits.await(1, 5*time.Second) {
			t.Error("the long-poll did not wait for a message within 5 s")
			return
		}
		e.push(replicaA, 42, []byte("the message"))
	}()
	start := time.Now()
	code, hd, body := call(t, "GET", srv.URL+"/sync/"+replicaA.String()+"/next", e.token(replicaA), nil)
	if code != http.StatusOK || hd.Get(HeaderMessageID) != "42" || body != "the message" {
		t.Fatalf("next = %d, Message-Id %q, body %q; want 200, 42, the message", code, hd.Get(HeaderMessageID), body)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("the long-poll did not answer as soon as the message came")
	}
	if n := e.nexts.Load(); n != 1 {
		t.Fatalf("the engine was asked %d times; want once, the wait answered by the message", n)
	}
	// Not acknowledged, it comes again; acknowledged, it is gone.
	if code, hd, _ := call(t, "GET", srv.URL+"/sync/"+replicaA.String()+"/next", e.token(replicaA), nil); code != 200 || hd.Get(HeaderMessageID) != "42" {
		t.Fatalf("next again = %d %q; want message 42 again", code, hd.Get(HeaderMessageID))
	}
	if code, _, _ := call(t, "POST", srv.URL+"/sync/"+replicaA.String()+"/ack/42", e.token(replicaA), nil); code != http.StatusNoContent {
		t.Fatalf("ack = %d; want 204", code)
	}
	if got := e.ackedIDs(); len(got) != 1 || got[0] != 42 {
		t.Fatalf("acked %v; want [42]", got)
	}
	// Another replica's queue is its own.
	if code, _, _ := call(t, "GET", srv.URL+"/sync/"+replicaB.String()+"/next?wait=0", e.token(replicaB), nil); code != http.StatusNoContent {
		t.Fatalf("B's next = %d; want 204", code)
	}
}

// TestLongPollEndsWhenTheServerStops: a long-poll in flight whose
// request context ends on the server's side (the http.Server's
// BaseContext, ended as it stops) is answered at once, 503 with
// Retry-After, not left waiting its window out.
func TestLongPollEndsWhenTheServerStops(t *testing.T) {
	e := newFakeEngine()
	base, stop := context.WithCancel(context.Background())
	defer stop()
	srv := httptest.NewUnstartedServer(NewHandler(e, HandlerOptions{PollWait: time.Minute, Logger: quiet()}))
	srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	srv.Start()
	defer srv.Close()
	go func() {
		if e.waits.await(1, 5*time.Second) {
			stop()
		}
	}()
	start := time.Now()
	code, hd, body := call(t, "GET", srv.URL+"/sync/"+replicaA.String()+"/next", e.token(replicaA), nil)
	if code != http.StatusServiceUnavailable || hd.Get("Retry-After") != "1" || !strings.Contains(body, "stopping") {
		t.Fatalf("a long-poll the server stopped = %d, Retry-After %q, %q; want 503, 1, saying the server is stopping", code, hd.Get("Retry-After"), body)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the long-poll ended %v after the server stopped; want at once", took)
	}
}

func TestWrongMethodAndUnknownPath(t *testing.T) {
	e := newFakeEngine()
	srv, _ := serve(t, e, HandlerOptions{})
	if code, _, _ := call(t, "POST", srv.URL+"/sync/"+replicaA.String()+"/next", e.token(replicaA), nil); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST next = %d; want 405", code)
	}
	if code, _, _ := call(t, "GET", srv.URL+"/sync/"+replicaA.String()+"/other", e.token(replicaA), nil); code != http.StatusNotFound {
		t.Fatalf("GET other = %d; want 404", code)
	}
}

func TestTokens(t *testing.T) {
	tok := NewToken(replicaA)
	if id, ok := TokenReplica(tok); !ok || id != replicaA {
		t.Fatalf("TokenReplica(%q) = %v, %v; want %v", tok, id, ok, replicaA)
	}
	if NewToken(replicaA) == tok {
		t.Fatal("two tokens alike")
	}
	for _, bad := range []string{"", "secret", replicaA.String(), replicaA.String() + ".", "x." + tok, strings.ReplaceAll(replicaA.String(), "-", "") + ".s"} {
		if _, ok := TokenReplica(bad); ok {
			t.Errorf("TokenReplica(%q) claims a replica", bad)
		}
	}
}

func TestShortenKeepsTheFirstLineAndValidUTF8(t *testing.T) {
	long := strings.Repeat("é", 400)
	got := shorten(long + "\nsecond line")
	if len(got) > maxReasonLen+len("…") || strings.Contains(got, "second") || !strings.HasSuffix(got, "…") {
		t.Fatalf("shorten = %q", got)
	}
	if s := shorten("a\xffb"); s != "a?b" {
		t.Fatalf("shorten(invalid UTF-8) = %q", s)
	}
}

// A poll that waits for nothing (wait=0) and finds the engine failing — the
// database away — is answered 503 with a Retry-After, not 204: its deadline
// passed, but nothing was found to be missing, the engine could not tell.
func TestAPollWaitingForNothingWhileTheEngineFailsIs503(t *testing.T) {
	t.Parallel()
	e := newFakeEngine()
	e.failNext = errDown
	srv, _ := serve(t, e, HandlerOptions{})
	code, hd, _ := call(t, "GET", srv.URL+"/sync/"+replicaA.String()+"/next?wait=0", e.token(replicaA), nil)
	if code != http.StatusServiceUnavailable || hd.Get("Retry-After") == "" {
		t.Fatalf("next?wait=0 while the engine fails = %d, Retry-After %q; want 503 with a Retry-After", code, hd.Get("Retry-After"))
	}
}
