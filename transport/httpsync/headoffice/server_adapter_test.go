package headoffice

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/server"
)

// fakeServer stands in for *server.Server's methods, with the server's
// errors.
func fakeServer(secrets map[uuid.UUID]string) *serverEngine {
	return &serverEngine{
		next: func(ctx context.Context, replica uuid.UUID, _ Applied) (uint64, []byte, bool, error) {
			if _, ok := secrets[replica]; !ok {
				return 0, nil, false, fmt.Errorf("%w %s", server.ErrUnknownReplica, replica)
			}
			<-ctx.Done()
			return 0, nil, false, nil
		},
		ack: func(_ context.Context, _ uuid.UUID, id uint64) error {
			if id > 100 {
				return fmt.Errorf("%w: message id %d is beyond any the server issues", server.ErrPermanent, id)
			}
			return nil
		},
		receive: func(_ context.Context, _ uuid.UUID, _ string, body []byte) error {
			switch string(body) {
			case "garbage":
				return fmt.Errorf("%w: malformed message", server.ErrPermanent)
			case "db down":
				return errors.New("server: filing: connection refused")
			}
			return nil
		},
		authenticate: func(_ context.Context, replica uuid.UUID, secret string) error {
			want, ok := secrets[replica]
			switch {
			case !ok:
				return fmt.Errorf("%w %s", server.ErrUnknownReplica, replica)
			case secret != want:
				return fmt.Errorf("%w: wrong secret for replica %s", server.ErrUnauthorized, replica)
			}
			return nil
		},
	}
}

func TestForServerAuthenticatesJoinedTokensAndClassifies(t *testing.T) {
	secrets := map[uuid.UUID]string{replicaA: "secret-a", replicaB: "secret-b"}
	srv, _ := serve(t, fakeServer(secrets), HandlerOptions{PollWait: 20 * time.Millisecond})
	a := srv.URL + "/sync/" + replicaA.String()
	tokenA, tokenB := JoinToken(replicaA, "secret-a"), JoinToken(replicaB, "secret-b")
	for _, c := range []struct {
		method, url, token, body string
		status                   int
	}{
		{"GET", a + "/next", tokenA, "", http.StatusNoContent},
		{"GET", a + "/next", "secret-a", "", http.StatusNoContent}, // a bare secret works for its own replica
		{"GET", a + "/next", tokenB, "", http.StatusForbidden},
		{"GET", a + "/next", "secret-b", "", http.StatusUnauthorized},
		{"GET", a + "/next", JoinToken(replicaA, "secret-b"), "", http.StatusUnauthorized},
		{"GET", a + "/next", JoinToken(replicaB, "secret-a"), "", http.StatusUnauthorized},
		{"GET", srv.URL + "/sync/" + uuid.NewString() + "/next", "x", "", http.StatusUnauthorized}, // unknown replica: not told apart
		{"POST", a + "/ack/7", tokenA, "", http.StatusNoContent},
		{"POST", a + "/ack/101", tokenA, "", http.StatusBadRequest},
		{"POST", a + "/up", tokenA, "fine", http.StatusNoContent},
		{"POST", a + "/up", tokenA, "garbage", http.StatusBadRequest},
		{"POST", a + "/up", tokenA, "db down", http.StatusServiceUnavailable},
	} {
		code, _, reason := call(t, c.method, c.url, c.token, strings.NewReader(c.body))
		if code != c.status {
			t.Errorf("%s %s (token %q, body %q) = %d %q; want %d", c.method, c.url, c.token, c.body, code, reason, c.status)
		}
	}
	e := fakeServer(secrets)
	for err, want := range map[error]int{
		server.ErrUnauthorized:   401,
		server.ErrUnknownReplica: 404,
		server.ErrTooLarge:       413,
		server.ErrPermanent:      400,
		context.Canceled:         503,
		errors.New("other"):      503,
	} {
		if got := e.Classify(fmt.Errorf("wrapped: %w", err)); got != want {
			t.Errorf("Classify(%v) = %d; want %d", err, got, want)
		}
	}
}

// An acknowledgement the server refuses as a message it never issued is
// answered 409, permanent; other permanent refusals stay 400.
func TestAckOfAMessageNeverIssuedIs409(t *testing.T) {
	t.Parallel()
	secrets := map[uuid.UUID]string{replicaA: "secret-a"}
	e := fakeServer(secrets)
	e.ack = func(_ context.Context, replica uuid.UUID, id uint64) error {
		if id == 0 || id > 100 {
			return fmt.Errorf("%w: message %d to replica %s", server.ErrNotIssued, id, replica)
		}
		return nil
	}
	srv, _ := serve(t, e, HandlerOptions{PollWait: 20 * time.Millisecond})
	a := srv.URL + "/sync/" + replicaA.String()
	token := JoinToken(replicaA, "secret-a")
	for path, want := range map[string]int{
		"/ack/7":                    http.StatusNoContent,
		"/ack/0":                    http.StatusConflict,
		"/ack/3000000000":           http.StatusConflict,
		"/ack/4611686018427387904":  http.StatusConflict, // 2^62
		"/ack/18446744073709551615": http.StatusConflict,
		"/ack/18446744073709551616": http.StatusBadRequest, // no uint64
		"/ack/-1":                   http.StatusBadRequest,
	} {
		code, _, reason := call(t, "POST", a+path, token, nil)
		if code != want {
			t.Errorf("POST %s = %d %q; want %d", path, code, reason, want)
		}
		if code == http.StatusConflict && !strings.Contains(reason, "never issued") {
			t.Errorf("POST %s = 409 %q; want the reason", path, reason)
		}
		if code != http.StatusNoContent && Retryable(code) {
			t.Errorf("POST %s = %d, retryable; want a permanent refusal", path, code)
		}
	}
	for err, want := range map[error]int{
		server.ErrNotIssued: http.StatusConflict,
		server.ErrPermanent: http.StatusBadRequest,
	} {
		if got := e.Classify(fmt.Errorf("wrapped: %w", err)); got != want {
			t.Errorf("Classify(%v) = %d; want %d", err, got, want)
		}
	}
}
