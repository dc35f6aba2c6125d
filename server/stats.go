package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/enum"
)

// stats.go holds what the server counts for an operator's metrics: the
// counters its passes and filings add to (Stats), and the figures a scrape
// reads of the fleet in the database (Fleet). Package metrics exports
// both to Prometheus.

// RefusalReason is why the server refused a row a replica sent: a small
// fixed set, so that a metric labelled by it stays small.
type RefusalReason int

const (
	// RefusedUndeclared: the row's table is not declared on the server.
	RefusedUndeclared RefusalReason = iota
	// RefusedCatalog: the row is of a catalog, which only the server writes.
	RefusedCatalog
	// RefusedColumns: the rows name a column the server's table lacks, or
	// lack its key or version columns.
	RefusedColumns
	// RefusedValue: the row or key does not decode, or holds a value its
	// column cannot.
	RefusedValue
	// RefusedOrigin: the row is not the sending replica's own.
	RefusedOrigin
	// RefusedDatabase: PostgreSQL refused the row (a CHECK, say).
	RefusedDatabase

	// RefusalReasons is how many reasons there are: Stats.Refused's length.
	RefusalReasons = iota
)

var refusalReasonNames = []string{
	RefusedUndeclared: "undeclared", RefusedCatalog: "catalog", RefusedColumns: "columns",
	RefusedValue: "value", RefusedOrigin: "origin", RefusedDatabase: "database",
}

// String names the reason as a metric's label says it.
func (r RefusalReason) String() string { return enum.Name(refusalReasonNames, r, "RefusalReason") }

// PassSecondsBuckets are the upper bounds, in seconds, of the buckets
// Stats.PassBuckets counts passes' durations in: from a few milliseconds
// (a pass over a handful of keys) to the tens of seconds a batch of
// passBatch keys over a slow database may take.
var PassSecondsBuckets = [...]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// Stats is what this process counted since New: cumulative counters,
// never reset, for Prometheus counters and histograms. Another process
// serving the same database counts its own.
type Stats struct {
	// Passes counts the planning passes committed (each Run pass runs one or more);
	// PassSeconds is their total duration, and PassBuckets counts them by
	// duration, cumulatively: PassBuckets[i] passes took at most
	// PassSecondsBuckets[i].
	Passes      uint64
	PassSeconds float64
	PassBuckets [len(PassSecondsBuckets)]uint64
	// PassRows counts the touched keys the committed passes planned.
	PassRows uint64
	// Uploads counts the uploads filed (repeats not included); FiledRows
	// the rows they wrote (rows sent again after a provisioning included).
	Uploads   uint64
	FiledRows uint64
	// Refused counts the rows refused in the uploads filed, by reason.
	Refused [RefusalReasons]uint64
	// DigestMismatches counts the digests of replicas that disagreed with
	// what the server expects, each provisioning the replica again.
	DigestMismatches uint64
}

// stats is the server's live counters; Server.Stats reads a snapshot.
type stats struct {
	passes      atomic.Uint64
	passNanos   atomic.Int64
	passBuckets [len(PassSecondsBuckets) + 1]atomic.Uint64 // per bucket, not cumulative; the last: beyond
	passRows    atomic.Uint64
	uploads     atomic.Uint64
	filedRows   atomic.Uint64
	refused     [RefusalReasons]atomic.Uint64
	mismatches  atomic.Uint64
}

// passed counts a committed pass that took d and planned rows keys.
func (st *stats) passed(d time.Duration, rows int) {
	st.passes.Add(1)
	st.passNanos.Add(int64(d))
	st.passRows.Add(uint64(rows))
	i := 0
	for i < len(PassSecondsBuckets) && d.Seconds() > PassSecondsBuckets[i] {
		i++
	}
	st.passBuckets[i].Add(1)
}

// filed counts a committed upload: the rows it wrote, those it refused and
// whether a digest it carried disagreed.
func (st *stats) filed(rows int64, rf *refusals, mismatch bool) {
	st.uploads.Add(1)
	st.filedRows.Add(uint64(rows))
	for i, n := range rf.why {
		if n > 0 {
			st.refused[i].Add(uint64(n))
		}
	}
	if mismatch {
		st.mismatches.Add(1)
	}
}

// Stats returns what this process counted since New. It reads no database
// and takes no lock: a scrape may call it as often as it likes.
func (s *Server) Stats() Stats {
	st := &s.stats
	out := Stats{
		Passes:           st.passes.Load(),
		PassSeconds:      time.Duration(st.passNanos.Load()).Seconds(),
		PassRows:         st.passRows.Load(),
		Uploads:          st.uploads.Load(),
		FiledRows:        st.filedRows.Load(),
		DigestMismatches: st.mismatches.Load(),
	}
	var cum uint64
	for i := range out.PassBuckets {
		cum += st.passBuckets[i].Load()
		out.PassBuckets[i] = cum
	}
	for i := range out.Refused {
		out.Refused[i] = st.refused[i].Load()
	}
	return out
}

// Fleet is where the replicas stand, counted: what an operator alerts on,
// read by Server.Fleet in one statement.
type Fleet struct {
	// Replicas counts the replicas the engine knows; Online those that
	// asked for their next message lately, and Provisioning those to be,
	// or being, provisioned (as ReplicaStatus says each).
	Replicas, Online, Provisioning int
	// Queued counts the replicas by how many messages wait for them
	// (ReplicaStatus.Queued): Queued[n] replicas have n waiting. A
	// replica with none waiting counts under 0.
	Queued map[int]int
	// Wishes counts the wishes of all replicas by where they stand; nil
	// when the declarations hold no setting with desired columns.
	Wishes map[WishState]int
}

// Fleet reads where the replicas stand, counted (see Fleet): exact and
// live, as Status is, without reading each replica's tables and rows.
func (s *Server) Fleet(ctx context.Context) (Fleet, error) {
	// The polls this process saw and has yet to write count.
	s.recordPolls(ctx)
	f := Fleet{Queued: map[int]int{}}
	rows, err := s.pool.Query(ctx, s.sql.of(qFleet))
	if err != nil {
		return Fleet{}, fmt.Errorf("magicsync/server: counting the replicas: %w", err)
	}
	var queued, n, online, provisioning int
	if _, err := pgx.ForEachRow(rows, []any{&queued, &n, &online, &provisioning}, func() error {
		f.Queued[queued] += n
		f.Replicas += n
		f.Online += online
		f.Provisioning += provisioning
		return nil
	}); err != nil {
		return Fleet{}, fmt.Errorf("magicsync/server: counting the replicas: %w", err)
	}
	if s.m.wishes == nil {
		return f, nil
	}
	f.Wishes = map[WishState]int{}
	rows, err = s.pool.Query(ctx, s.sql.of(qFleetWishes))
	if err != nil {
		return Fleet{}, fmt.Errorf("magicsync/server: counting the wishes: %w", err)
	}
	var state int16
	if _, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		f.Wishes[WishState(state)] += n
		return nil
	}); err != nil {
		return Fleet{}, fmt.Errorf("magicsync/server: counting the wishes: %w", err)
	}
	return f, nil
}
