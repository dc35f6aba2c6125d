package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/serverhook"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/metrics"
	"github.com/magicsync/magicsync/metrics/internal/scrapetest"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// observer is the handler's metrics, telling the test of every request
// answered: a client may read its answer before the handler has counted
// it.
type observer struct {
	*metrics.HTTP
	served chan string // "endpoint status"
	polls  chan int
}

func (o *observer) Served(endpoint string, status int, took time.Duration) {
	o.HTTP.Served(endpoint, status, took)
	o.served <- fmt.Sprint(endpoint, " ", status)
}

func (o *observer) LongPoll(delta int) {
	o.HTTP.LongPoll(delta)
	o.polls <- delta
}

// client calls the handler as one replica.
type client struct {
	t     *testing.T
	base  string
	token string
	obs   *observer
}

// call makes a request and returns its status and body, once the handler
// counted it.
func (c *client) call(ctx context.Context, method, path string, body []byte) (int, http.Header, []byte) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, strings.NewReader(string(body)))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	<-c.obs.served
	return res.StatusCode, res.Header, b
}

func TestServerMetricsShowKnownActivity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	codecs := shoptest.Codecs(t, shoptest.Notice{}, shoptest.Receipt{})
	pool := shopserver.NewPool(t)
	opts := server.Options{Replicas: shoptest.Replicas, Logger: quiet()}
	shopserver.InstallTriggers(t, pool, codecs, opts)
	var hooks serverhook.Hooks
	s, err := server.New(serverhook.With(ctx, &hooks), pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	shop, a, b := uuid.New(), uuid.New(), uuid.New()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO shop.shops (id) VALUES ($1)`, []any{shop}},
		{`INSERT INTO shop.registers (id, shop_id) VALUES ($1, $3), ($2, $3)`, []any{a, b, shop}},
		{`INSERT INTO shop.notices (id, text) VALUES (1, 'one'), (2, 'two'), (3, 'three')`, nil},
	} {
		if _, err := pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	// One pass, planning the three notices.
	if err := hooks.Pass(ctx); err != nil {
		t.Fatal(err)
	}

	web := metrics.NewHTTP()
	obs := &observer{HTTP: web, served: make(chan string, 100), polls: make(chan int, 100)}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewServerCollector(s, metrics.ServerOptions{}), web)
	srv := httptest.NewServer(headoffice.Handler(s, headoffice.HandlerOptions{Observer: obs, Logger: quiet()}))
	t.Cleanup(srv.Close)
	as := func(id uuid.UUID) *client {
		secret, err := s.Credentials(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return &client{t: t, base: srv.URL + "/sync/" + id.String(), token: httpsync.JoinToken(id, secret), obs: obs}
	}
	ca, cb := as(a), as(b)

	// B takes everything (its provisioning), acknowledging each message,
	// until a poll of half a second brings nothing.
	var lastB uint64
	nexts := 0
	for {
		code, hd, _ := cb.call(ctx, "GET", "/next?wait=0.5", nil)
		nexts++
		if code == http.StatusNoContent {
			break
		}
		if code != http.StatusOK {
			t.Fatalf("GET next answered %d", code)
		}
		if _, err := fmt.Sscan(hd.Get(httpsync.HeaderMessageID), &lastB); err != nil {
			t.Fatal(err)
		}
		if code, _, body := cb.call(ctx, "POST", fmt.Sprintf("/ack/%d", lastB), nil); code != http.StatusNoContent {
			t.Fatalf("ack answered %d: %s", code, body)
		}
	}
	// A uploads four receipts: two filed, one the database refuses (a
	// negative total), one not its own.
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	up := shoptest.Changes(t, codecs,
		shoptest.Receipt{RegisterID: a, ID: uuid.New(), TotalCents: 100, ChangedAt: at},
		shoptest.Receipt{RegisterID: a, ID: uuid.New(), TotalCents: 200, ChangedAt: at},
		shoptest.Receipt{RegisterID: a, ID: uuid.New(), TotalCents: -5, ChangedAt: at},
		shoptest.Receipt{RegisterID: b, ID: uuid.New(), TotalCents: 300, ChangedAt: at})
	if code, _, body := ca.call(ctx, "POST", "/up", shoptest.Upload(t, a, "main", 1, &syncpb.Up{Tables: []*syncpb.TableChanges{up}})); code != http.StatusNoContent {
		t.Fatalf("the upload answered %d: %s", code, body)
	}
	// A call with a wrong token.
	wrong := *ca
	wrong.token = httpsync.JoinToken(a, "wrong")
	if code, _, _ := wrong.call(ctx, "POST", "/ack/1", nil); code != http.StatusUnauthorized {
		t.Fatalf("a wrong token answered %d; want 401", code)
	}

	// A path the handler does not serve.
	if code, _, _ := ca.call(ctx, "GET", "/nothing", nil); code != http.StatusNotFound {
		t.Fatalf("an unknown path answered %d; want 404", code)
	}

	// B long-polls; the scrape sees it open.
	pollCtx, endPoll := context.WithCancel(ctx)
	polled := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(pollCtx, "GET", cb.base+"/next?wait=60", nil)
		req.Header.Set("Authorization", "Bearer "+cb.token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			polled <- 0
			return
		}
		res.Body.Close()
		polled <- res.StatusCode
	}()
	if d := <-obs.polls; d != 1 {
		t.Fatalf("the observer was told %d as the long-poll began; want 1", d)
	}
	statuses, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := scrapetest.Scrape(t, reg)
	want := map[string]float64{
		"magicsync_server_fleet_up":                                  1,
		"magicsync_server_replicas":                                  2,
		"magicsync_server_replicas_online":                           1, // B polls; A only uploaded
		"magicsync_server_replicas_provisioning":                     1, // A never asked for its provisioning
		"magicsync_server_queued_messages_count":                     2,
		"magicsync_server_queued_messages_bucket{le=0}":              1, // B took everything
		"magicsync_server_pass_duration_seconds_count":               1,
		"magicsync_server_pass_rows_total":                           3,
		"magicsync_server_uploads_filed_total":                       1,
		"magicsync_server_filed_rows_total":                          2,
		"magicsync_server_refused_rows_total{reason=database}":       1,
		"magicsync_server_refused_rows_total{reason=origin}":         1,
		"magicsync_server_refused_rows_total{reason=value}":          0,
		"magicsync_server_digest_mismatches_total":                   0,
		"magicsync_http_long_polls_open":                             1,
		"magicsync_http_requests_total{code=204,endpoint=up}":        1,
		"magicsync_http_requests_total{code=200,endpoint=next}":      float64(nexts - 1),
		"magicsync_http_requests_total{code=204,endpoint=next}":      1,
		"magicsync_http_requests_total{code=204,endpoint=ack}":       float64(nexts - 1),
		"magicsync_http_requests_total{code=401,endpoint=ack}":       1,
		"magicsync_http_requests_total{code=404,endpoint=other}":     1,
		"magicsync_http_request_duration_seconds_count{endpoint=up}": 1,
	}
	// What Status says of each replica, counted, agrees.
	var online, provisioning, queued float64
	for _, st := range statuses {
		if st.Online {
			online++
		}
		if st.Provisioning {
			provisioning++
		}
		queued += float64(st.Queued)
	}
	want["magicsync_server_queued_messages_sum"] = queued
	if online != 1 || provisioning != 1 {
		t.Errorf("Status says %g online and %g provisioning; want 1 and 1", online, provisioning)
	}
	scrapetest.Check(t, "with a long-poll open", got, want)
	if got["magicsync_server_pass_duration_seconds_sum"] <= 0 {
		t.Errorf("the pass took %g s, as the scrape says", got["magicsync_server_pass_duration_seconds_sum"])
	}

	// The long-poll ends; B reports a digest of notices that disagrees
	// (it says it holds none), with nothing in flight.
	endPoll()
	<-polled
	<-obs.served
	if d := <-obs.polls; d != -1 {
		t.Fatalf("the observer was told %d as the long-poll ended; want -1", d)
	}
	var none digest.Sum
	report := &syncpb.Up{LastApplied: lastB, Digests: []*syncpb.Digest{{Table: "notices", Sum: none.Bytes(), Rows: 0, AsOf: lastB}}}
	if code, _, body := cb.call(ctx, "POST", "/up", shoptest.Upload(t, b, "main", 1, report)); code != http.StatusNoContent {
		t.Fatalf("the report answered %d: %s", code, body)
	}
	scrapetest.Check(t, "after a digest disagreed", scrapetest.Scrape(t, reg), map[string]float64{
		"magicsync_server_digest_mismatches_total":            1,
		"magicsync_server_replicas_provisioning":              2,
		"magicsync_server_uploads_filed_total":                2,
		"magicsync_server_filed_rows_total":                   2,
		"magicsync_http_long_polls_open":                      0,
		"magicsync_http_requests_total{code=204,endpoint=up}": 2,
	})
}
