package metrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/metrics"
	"github.com/magicsync/magicsync/metrics/internal/scrapetest"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

// The HTTP metrics count the requests refused for their token and those
// throttled, their address having failed too often: a flood of wrong
// tokens shows as such. (Before, a failed authentication was counted
// only as one more 401 among the requests.)
func TestHTTPMetricsCountFailedAuthenticationsAndThrottling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	codecs := shoptest.Codecs(t, shoptest.Notice{})
	pool := shopserver.NewPool(t)
	opts := server.Options{Replicas: shoptest.Replicas, Logger: quiet()}
	shopserver.InstallTriggers(t, pool, codecs, opts)
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO shop.registers VALUES ($1)`, id); err != nil {
		t.Fatal(err)
	}
	secret, err := s.Credentials(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	web := metrics.NewHTTP()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(web)
	srv := httptest.NewServer(headoffice.Handler(s, headoffice.HandlerOptions{
		Observer: web, Logger: quiet(), MaxAuthFailures: 5, AuthFailureEvery: time.Hour}))
	t.Cleanup(srv.Close)
	call := func(token string) int {
		t.Helper()
		req, err := http.NewRequest("GET", srv.URL+"/sync/"+id.String()+"/schema", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := call(httpsync.JoinToken(id, secret)); code != http.StatusOK {
		t.Fatalf("the right token answered %d; want 200", code)
	}
	for i := range 12 {
		want := http.StatusUnauthorized
		if i >= 5 {
			want = http.StatusTooManyRequests
		}
		if code := call(httpsync.JoinToken(id, "wrong")); code != want {
			t.Fatalf("wrong token %d answered %d; want %d", i+1, code, want)
		}
	}
	scrapetest.Check(t, "after 12 wrong tokens", scrapetest.Scrape(t, reg), map[string]float64{
		"magicsync_http_auth_failures_total{answer=refused}":             5,
		"magicsync_http_auth_failures_total{answer=throttled}":           7,
		"magicsync_http_requests_total{code=200,endpoint=schema}":        1,
		"magicsync_http_requests_total{code=401,endpoint=schema}":        5,
		"magicsync_http_requests_total{code=429,endpoint=schema}":        7,
		"magicsync_http_request_duration_seconds_count{endpoint=schema}": 13,
	})
}
