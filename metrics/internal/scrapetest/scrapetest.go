// Package scrapetest scrapes a Prometheus registry as a server would, for
// the tests of the metrics packages.
package scrapetest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape serves reg as Prometheus scrapes it, and parses the answer: each
// series by its name and labels, "name{k=v,...}" in label order (a
// histogram's as name_count, name_sum and name_bucket{le=...}).
func Scrape(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("the scrape answered %s: %s", res.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.Metric {
			labels := func(extra ...string) string {
				var ls []string
				for _, l := range m.Label {
					ls = append(ls, l.GetName()+"="+l.GetValue())
				}
				ls = append(ls, extra...)
				if len(ls) == 0 {
					return ""
				}
				return "{" + strings.Join(ls, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[name+labels()] = m.Counter.GetValue()
			case dto.MetricType_GAUGE:
				out[name+labels()] = m.Gauge.GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.Histogram
				out[name+"_count"+labels()] = float64(h.GetSampleCount())
				out[name+"_sum"+labels()] = h.GetSampleSum()
				for _, b := range h.Bucket {
					out[name+"_bucket"+labels(fmt.Sprintf("le=%g", b.GetUpperBound()))] = float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return out
}

// Check compares scraped figures with those wanted.
func Check(t *testing.T, what string, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: %s is missing from the scrape", what, k)
		case g != v:
			t.Errorf("%s: %s = %g; want %g", what, k, g, v)
		}
	}
}
