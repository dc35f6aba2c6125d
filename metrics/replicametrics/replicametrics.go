// Package replicametrics exports a replica's figures to Prometheus, read at
// each scrape from its database (replica.Replica.Status): rows waiting to
// go up and unconfirmed per lane, a lane's problem, the backlog, the rows
// it could not take, its wishes and the rows it keeps retired. It is
// optional: a replica exports metrics only if its process registers the
// collector. It links nothing of the head office (the metrics package,
// for the head office's figures, does).
//
// The metrics are named magicsync_replica_*, with their units in their
// names (_rows, _message).
package replicametrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magicsync/magicsync/replica"
)

// Options tune NewCollector. The zero value is sensible.
type Options struct {
	// Timeout bounds a scrape's reading of the replica's database. Zero
	// means 5 seconds.
	Timeout time.Duration
	// Logger receives a warning when a scrape cannot read the replica's
	// status. Nil means slog.Default().
	Logger *slog.Logger
}

// replicaCollector is a replica's collector.
type replicaCollector struct {
	r    *replica.Replica
	opts Options

	statusUp, lastApplied, unsent, unconfirmed, problem *prometheus.Desc
	backlog, unreadable, rejected, wishes, retained     *prometheus.Desc
}

// NewCollector returns a collector of a replica's figures, read at
// each scrape from its database (replica.Replica.Status): what waits to go
// up per lane, what the server refused or it could not take, its wishes
// and the rows it keeps retired. A replica's process registers it on its
// own registry, if it exports metrics at all.
func NewCollector(r *replica.Replica, opts Options) prometheus.Collector {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("magicsync_replica_"+name, help, labels, nil)
	}
	return &replicaCollector{r: r, opts: opts,
		statusUp:    d("status_up", "1 when the scrape read the replica's status from its database, 0 when it could not (the other figures are missing then)."),
		lastApplied: d("last_applied_message", "Id of the last message the replica applied."),
		unsent:      d("unsent_rows", "Rows written on the replica and not yet sent, by lane.", "lane"),
		unconfirmed: d("unconfirmed_rows", "Rows sent that the server has not yet confirmed filing, by lane.", "lane"),
		problem:     d("lane_problem", "1 while the server refuses the lane's messages (credentials, address, an older server), else 0.", "lane"),
		backlog:     d("backlog_rows", "Rows set aside after the server refused them for good."),
		unreadable:  d("unreadable_rows", "Own rows set aside because the engine cannot read them."),
		rejected:    d("rejected_rows", "Rows the replica could not take, as its status lists them (at most 100)."),
		wishes:      d("wishes", "The server's wishes on this replica, by where they stand.", "state"),
		retained:    d("retained_rows", "Rows the server let go that the replica keeps, marked retired, by table.", "table"),
	}
}

// Describe sends the descriptions of every metric the collector exports.
func (c *replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.statusUp, c.lastApplied, c.unsent, c.unconfirmed, c.problem,
		c.backlog, c.unreadable, c.rejected, c.wishes, c.retained} {
		ch <- d
	}
}

// Collect reads the replica's status and sends its figures.
func (c *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	st, err := c.r.Status(ctx)
	if err != nil {
		c.opts.Logger.Warn("magicsync/replicametrics: a scrape could not read the replica's status; its figures are missing from it", "err", err)
		ch <- prometheus.MustNewConstMetric(c.statusUp, prometheus.GaugeValue, 0)
		return
	}
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	gauge(c.statusUp, 1)
	ch <- prometheus.MustNewConstMetric(c.lastApplied, prometheus.GaugeValue, float64(st.LastApplied))
	for _, l := range st.Lanes {
		gauge(c.unsent, l.Unsent, l.Name)
		gauge(c.unconfirmed, l.Unconfirmed, l.Name)
		p := 0
		if l.Problem != "" {
			p = 1
		}
		gauge(c.problem, p, l.Name)
	}
	gauge(c.backlog, st.Backlog)
	gauge(c.unreadable, st.Unreadable)
	gauge(c.rejected, len(st.Rejected))
	w := st.Wishes
	for _, s := range []struct {
		state string
		n     int
	}{{"pending", w.Pending}, {"waiting", w.Waiting}, {"applied", w.Applied}, {"refused", w.Refused}, {"superseded", w.Superseded}} {
		gauge(c.wishes, s.n, s.state)
	}
	for tbl, n := range st.Retained {
		gauge(c.retained, n, tbl)
	}
}
