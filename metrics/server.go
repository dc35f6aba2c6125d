package metrics

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magicsync/magicsync/server"
)

// ServerOptions tune NewServerCollector. The zero value is sensible.
type ServerOptions struct {
	// Timeout bounds a scrape's reading of the database. Zero means 5
	// seconds.
	Timeout time.Duration
	// QueuedBuckets are the upper bounds of the histogram of messages
	// queued per replica. Nil means DefaultQueuedBuckets.
	QueuedBuckets []float64
	// Logger receives a warning when a scrape cannot read the database.
	// Nil means slog.Default().
	Logger *slog.Logger
}

// DefaultQueuedBuckets are the upper bounds of the histogram of messages
// queued per replica: a replica keeping up has 0 or 1 waiting; one
// offline for a while, or being provisioned, has more.
var DefaultQueuedBuckets = []float64{0, 1, 2, 5, 10, 20, 50, 100, 500, 1000}

// serverCollector is the head office's collector.
type serverCollector struct {
	s       *server.Server
	opts    ServerOptions
	buckets []float64

	fleetUp, replicas, online, provisioning, queued, wishes *prometheus.Desc
	passSeconds, passRows, uploads, filedRows, refused      *prometheus.Desc
	mismatches                                              *prometheus.Desc
}

// NewServerCollector returns a collector of the head office's figures:
// what stands in the database, read at each scrape in one statement
// (server.Server.Fleet), and what this process counted since it started
// (server.Server.Stats). No metric is labelled per replica: a fleet of
// thousands costs a few series. Register it on a prometheus.Registry.
func NewServerCollector(s *server.Server, opts ServerOptions) prometheus.Collector {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	buckets := slices.Clone(opts.QueuedBuckets)
	if buckets == nil {
		buckets = slices.Clone(DefaultQueuedBuckets)
	}
	slices.Sort(buckets)
	buckets = slices.Compact(buckets)
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("magicsync_server_"+name, help, labels, nil)
	}
	return &serverCollector{s: s, opts: opts, buckets: buckets,
		fleetUp:      d("fleet_up", "1 when the scrape read the replicas' standing from the database, 0 when it could not (the fleet's figures are missing then)."),
		replicas:     d("replicas", "Replicas the engine knows."),
		online:       d("replicas_online", "Replicas that asked for their next message within about twice their long-poll window."),
		provisioning: d("replicas_provisioning", "Replicas to be, or being, provisioned."),
		queued:       d("queued_messages", "Messages waiting for each replica (built and not acknowledged, plus one when its groups' logs are ahead of it or a provisioning waits to start): one observation per replica."),
		wishes:       d("wishes", "Wishes of all replicas, by where they stand.", "state"),
		passSeconds:  d("pass_duration_seconds", "Duration of the planning passes this process committed."),
		passRows:     d("pass_rows_total", "Touched keys the planning passes of this process planned."),
		uploads:      d("uploads_filed_total", "Uploads this process filed (repeats not included)."),
		filedRows:    d("filed_rows_total", "Rows the uploads this process filed wrote."),
		refused:      d("refused_rows_total", "Rows of uploads this process filed that it refused, by reason (undeclared, catalog, columns, value, origin, database).", "reason"),
		mismatches:   d("digest_mismatches_total", "Digests of replicas that disagreed with what the server expects, each provisioning the replica again."),
	}
}

// Describe sends the descriptions of every metric the collector exports.
func (c *serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.fleetUp, c.replicas, c.online, c.provisioning, c.queued, c.wishes,
		c.passSeconds, c.passRows, c.uploads, c.filedRows, c.refused, c.mismatches} {
		ch <- d
	}
}

// Collect reads the figures: the counters from memory, the fleet from the
// database (one statement, and one more when wishes are declared).
func (c *serverCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	passBuckets := make(map[float64]uint64, len(st.PassBuckets))
	for i, n := range st.PassBuckets {
		passBuckets[server.PassSecondsBuckets[i]] = n
	}
	ch <- prometheus.MustNewConstHistogram(c.passSeconds, st.Passes, st.PassSeconds, passBuckets)
	ch <- prometheus.MustNewConstMetric(c.passRows, prometheus.CounterValue, float64(st.PassRows))
	ch <- prometheus.MustNewConstMetric(c.uploads, prometheus.CounterValue, float64(st.Uploads))
	ch <- prometheus.MustNewConstMetric(c.filedRows, prometheus.CounterValue, float64(st.FiledRows))
	for i, n := range st.Refused {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(n), server.RefusalReason(i).String())
	}
	ch <- prometheus.MustNewConstMetric(c.mismatches, prometheus.CounterValue, float64(st.DigestMismatches))

	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	f, err := c.s.Fleet(ctx)
	if err != nil {
		c.opts.Logger.Warn("magicsync/metrics: a scrape could not read the replicas' standing; the fleet's figures are missing from it", "err", err)
		ch <- prometheus.MustNewConstMetric(c.fleetUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.fleetUp, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, float64(f.Replicas))
	ch <- prometheus.MustNewConstMetric(c.online, prometheus.GaugeValue, float64(f.Online))
	ch <- prometheus.MustNewConstMetric(c.provisioning, prometheus.GaugeValue, float64(f.Provisioning))
	count, sum, buckets := queuedHistogram(f.Queued, c.buckets)
	ch <- prometheus.MustNewConstHistogram(c.queued, count, sum, buckets)
	if f.Wishes != nil {
		for _, state := range []server.WishState{server.WishPending, server.WishWaiting, server.WishApplied, server.WishRefused, server.WishSuperseded} {
			ch <- prometheus.MustNewConstMetric(c.wishes, prometheus.GaugeValue, float64(f.Wishes[state]), state.String())
		}
	}
}

// queuedHistogram turns replicas counted by messages queued into a
// histogram's count, sum and cumulative buckets.
func queuedHistogram(queued map[int]int, bounds []float64) (count uint64, sum float64, buckets map[float64]uint64) {
	type level struct{ queued, replicas int }
	levels := make([]level, 0, len(queued))
	for q, n := range queued {
		levels = append(levels, level{q, n})
	}
	slices.SortFunc(levels, func(a, b level) int { return cmp.Compare(a.queued, b.queued) })
	buckets = make(map[float64]uint64, len(bounds))
	i := 0
	var below uint64
	for _, b := range bounds {
		for i < len(levels) && float64(levels[i].queued) <= b {
			below += uint64(levels[i].replicas)
			i++
		}
		buckets[b] = below
	}
	for _, l := range levels {
		count += uint64(l.replicas)
		sum += float64(l.queued) * float64(l.replicas)
	}
	return count, sum, buckets
}
