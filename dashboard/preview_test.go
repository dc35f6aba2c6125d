package dashboard

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// TestPreview serves the dashboard of the test fleet for a look in a
// browser, when DASHBOARD_PREVIEW names an address:
//
//	DASHBOARD_PREVIEW=127.0.0.1:8765 go test -run TestPreview ./dashboard/
//
// It serves until the test times out or is stopped. DASHBOARD_PREVIEW_ERROR,
// if set, is the error the source fails with instead.
func TestPreview(t *testing.T) {
	addr := os.Getenv("DASHBOARD_PREVIEW")
	if addr == "" {
		t.Skip("set DASHBOARD_PREVIEW=host:port to serve the test fleet")
	}
	start := time.Now()
	src := fakeSource{st: fleet()}
	if msg := os.Getenv("DASHBOARD_PREVIEW_ERROR"); msg != "" {
		src = fakeSource{err: errors.New(msg)}
	}
	h := New(src, Options{Title: "Shop registers", Names: fleetNames, Public: true})
	// The fleet's times are relative to testNow; keep them so, live.
	h.(*handler).now = func() time.Time { return testNow.Add(time.Since(start)) }
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("serving on http://%s/", ln.Addr())
	t.Fatal(http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(os.Stderr, time.Now().Format(time.TimeOnly), r.Method, r.URL)
		h.ServeHTTP(w, r)
	})))
}
