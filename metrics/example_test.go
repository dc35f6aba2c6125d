package metrics_test

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/magicsync/magicsync/metrics"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

// The head office serves the sync protocol and, beside it, its metrics.
func Example() {
	var s *server.Server // server.New(ctx, pool, codecs, opts)

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewServerCollector(s, metrics.ServerOptions{}))
	web := metrics.NewHTTP()
	reg.MustRegister(web)

	mux := http.NewServeMux()
	mux.Handle("/sync/", headoffice.Handler(s, headoffice.HandlerOptions{Observer: web}))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Addr: ":8080", Handler: mux}
	go func() { _ = s.Run(context.Background()) }()
	_ = srv.ListenAndServe()
}
