package headoffice

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/transport/httpsync"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Most of the handler's tests are package httpsync's, where the client
// meets it over a fake engine; these are the helpers of the tests here,
// which need the handler's insides.

var (
	replicaA = uuid.MustParse("00000000-0000-4000-8000-00000000000a")
	replicaB = uuid.MustParse("00000000-0000-4000-8000-00000000000b")
)

// The client's names the tests use.
var (
	JoinToken = httpsync.JoinToken
	Retryable = httpsync.Retryable
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

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
