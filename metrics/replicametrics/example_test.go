package replicametrics_test

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/magicsync/magicsync/metrics/replicametrics"
	"github.com/magicsync/magicsync/transport/httpsync"
)

// A register exports its figures on a port of its own, for the shop's
// monitoring to scrape.
func Example() {
	var reg *httpsync.Replica // from httpsync.OpenReplica

	registry := prometheus.NewRegistry()
	registry.MustRegister(replicametrics.NewCollector(reg.Replica, replicametrics.Options{}))
	srv := &http.Server{Addr: "127.0.0.1:9100", Handler: promhttp.HandlerFor(registry, promhttp.HandlerOpts{})}
	_ = srv.ListenAndServe()
}
