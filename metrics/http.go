package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

// DefaultHTTPBuckets are the upper bounds, in seconds, of the histogram of
// requests' durations: an acknowledgement or an upload takes milliseconds,
// a long-poll up to the handler's PollWait (25 s by default).
var DefaultHTTPBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// HTTP is the HTTP transport's figures: a headoffice.Observer that counts
// what the handler answered, and a prometheus.Collector that exports it.
// Give it to the handler (headoffice.HandlerOptions.Observer) and register
// it. Its metrics are labelled by endpoint (next, ack, up, schema, other)
// and status, never by replica. It is a headoffice.AuthObserver too: it
// counts the requests refused for their token and those throttled because
// their address failed too often.
type HTTP struct {
	requests  *prometheus.CounterVec
	durations *prometheus.HistogramVec
	polls     prometheus.Gauge
	authFails *prometheus.CounterVec
}

// NewHTTP returns the HTTP transport's figures, all zero.
func NewHTTP() *HTTP {
	return &HTTP{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "magicsync_http_requests_total",
			Help: "Requests the sync handler answered, by endpoint (next, ack, up, schema, other) and status code.",
		}, []string{"endpoint", "code"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "magicsync_http_request_duration_seconds",
			Help:    "How long the sync handler took to answer requests, by endpoint (a long-poll's wait included).",
			Buckets: DefaultHTTPBuckets,
		}, []string{"endpoint"}),
		polls: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "magicsync_http_long_polls_open",
			Help: "Long-polls (GET next, authenticated) open now.",
		}),
		authFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "magicsync_http_auth_failures_total",
			Help: "Requests whose authentication failed: refused for their token (401, 403), or throttled (429, the token unchecked) because their address failed too often.",
		}, []string{"answer"}),
	}
}

var (
	_ headoffice.Observer     = (*HTTP)(nil)
	_ headoffice.AuthObserver = (*HTTP)(nil)
)

// AuthFailed counts a request refused for its token, or throttled.
func (h *HTTP) AuthFailed(throttled bool) {
	answer := "refused"
	if throttled {
		answer = "throttled"
	}
	h.authFails.WithLabelValues(answer).Inc()
}

// Served counts a request answered.
func (h *HTTP) Served(endpoint string, status int, took time.Duration) {
	h.requests.WithLabelValues(endpoint, strconv.Itoa(status)).Inc()
	h.durations.WithLabelValues(endpoint).Observe(took.Seconds())
}

// LongPoll counts a long-poll beginning (+1) or ending (-1).
func (h *HTTP) LongPoll(delta int) { h.polls.Add(float64(delta)) }

// Describe sends the descriptions of the metrics.
func (h *HTTP) Describe(ch chan<- *prometheus.Desc) {
	h.requests.Describe(ch)
	h.durations.Describe(ch)
	h.polls.Describe(ch)
	h.authFails.Describe(ch)
}

// Collect sends the metrics.
func (h *HTTP) Collect(ch chan<- prometheus.Metric) {
	h.requests.Collect(ch)
	h.durations.Collect(ch)
	h.polls.Collect(ch)
	h.authFails.Collect(ch)
}
