package main

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/httpsync"
)

// arrival is one version of a row as one replica applied it: the row's
// updated_at, and when the replica's Receive that applied it returned.
type arrival struct {
	version int64 // Unix microseconds
	at      time.Time
}

// lagMeter is what one replica's receiver records: every version of every
// row of the stream's catalog the replica applied, by the row's key. Each
// change written is then looked up in it: a change has arrived once the
// replica holds its version or a later one of the same row.
type lagMeter struct {
	tc   *codec.TableCodec
	mu   sync.Mutex
	got  map[string][]arrival
	held map[string][]int64 // rows of a provisioning, staged until its end
	vals []wire.Value       // the receiver's own, reused
}

func newLagMeter(tc *codec.TableCodec) *lagMeter {
	return &lagMeter{tc: tc, got: map[string][]arrival{}, held: map[string][]int64{}}
}

// measure records what a message the replica took at now brought: the rows
// it applied (Received.Applied names them; a row the replica refused has
// not arrived), or, for a part of a provisioning, the rows it staged, which
// arrive when the provisioning switches in.
func (m *lagMeter) measure(msg []byte, got replica.Received, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if got.Provisioned {
		for key, versions := range m.held {
			for _, v := range versions {
				m.got[key] = append(m.got[key], arrival{version: v, at: now})
			}
		}
		clear(m.held)
		return nil
	}
	applied := map[magicsync.Key]bool{}
	for _, k := range got.Applied[m.tc.Name] {
		applied[k] = true
	}
	if len(applied) == 0 && !got.Staged {
		return nil
	}
	decoded, err := wire.DecodeToReplica(msg)
	if err != nil {
		return err
	}
	for _, t := range decoded.GetDown().GetTables() {
		if t.GetTable() != m.tc.Name {
			continue
		}
		at := columnAt(m.tc, t, "updated_at")
		if at < 0 {
			return fmt.Errorf("a message's %s have no updated_at", t.GetTable())
		}
		keys := t.GetUpsertKeys()
		if len(keys) != len(t.GetUpserts()) {
			return fmt.Errorf("a message's %s upserts come with %d keys", t.GetTable(), len(keys))
		}
		for i, tuple := range t.GetUpserts() {
			key := string(keys[i])
			if !got.Staged && !applied[magicsync.Key(key)] {
				continue
			}
			if m.vals, err = wire.DecodeTuple(tuple, m.vals[:0]); err != nil {
				return err
			}
			if at >= len(m.vals) || m.vals[at].Kind != wire.Time {
				return fmt.Errorf("a row's updated_at is no time")
			}
			if got.Staged {
				m.held[key] = append(m.held[key], m.vals[at].I)
				continue
			}
			m.got[key] = append(m.got[key], arrival{version: m.vals[at].I, at: now})
		}
	}
	return nil
}

// change is one UPDATE of the stream, as its client saw it commit: the
// row's key and the updated_at it set (Unix microseconds).
type change struct {
	key     string
	version int64
}

// lagSample is one change as one replica took it: when it was written
// (its updated_at) and how long after that the replica first held it or a
// later version of its row.
type lagSample struct {
	sent time.Time
	lag  time.Duration
}

// streamOutcome is the stream's changes looked up in every replica's
// record.
type streamOutcome struct {
	samples []lagSample // one a change and replica, for those that arrived
	// lost counts the changes (one a replica) no replica's record holds:
	// neither its version nor a later one of its row arrived.
	lost int
	// superseded counts those that arrived only as a later version of
	// their row: a message carries a row's latest version.
	superseded int
}

// outcome looks every change up in the meters' records.
func outcome(changes []change, meters []*lagMeter) streamOutcome {
	var o streamOutcome
	for _, m := range meters {
		m.mu.Lock()
		// Per row: its versions in order, and the earliest time any
		// version at or after each was held.
		type history struct {
			versions []int64
			earliest []time.Time
		}
		rows := make(map[string]history, len(m.got))
		for key, as := range m.got {
			as = slices.Clone(as)
			slices.SortFunc(as, func(a, b arrival) int { return cmp.Compare(a.version, b.version) })
			h := history{versions: make([]int64, len(as)), earliest: make([]time.Time, len(as))}
			for i := len(as) - 1; i >= 0; i-- {
				h.versions[i], h.earliest[i] = as[i].version, as[i].at
				if i+1 < len(as) && h.earliest[i+1].Before(as[i].at) {
					h.earliest[i] = h.earliest[i+1]
				}
			}
			rows[key] = h
		}
		m.mu.Unlock()
		for _, ch := range changes {
			h := rows[ch.key]
			i, exact := slices.BinarySearch(h.versions, ch.version)
			if i == len(h.versions) {
				o.lost++
				continue
			}
			if !exact {
				o.superseded++
			}
			sent := time.UnixMicro(ch.version)
			o.samples = append(o.samples, lagSample{sent: sent, lag: h.earliest[i].Sub(sent)})
		}
	}
	return o
}

// missing counts the rows, one a replica, whose last version written has
// not arrived yet: zero once every replica caught up with the stream.
func missing(last map[string]int64, meters []*lagMeter) int {
	n := 0
	for _, m := range meters {
		m.mu.Lock()
		for key, v := range last {
			as := m.got[key]
			if !slices.ContainsFunc(as, func(a arrival) bool { return a.version >= v }) {
				n++
			}
		}
		m.mu.Unlock()
	}
	return n
}

// benchStreaming: eight clients write a steady stream of single-row
// autocommitted UPDATEs of a broadcast catalog (as benchmark 11 does),
// paced to 5,250 a second in all (the goal is 5,000), while three
// replicas — engines over SQLite files of their own, over httpsync on
// loopback, the server's Run and handler in this process — keep up. Each UPDATE sets the row's
// updated_at to clock_timestamp() and returns it, so that every change
// committed is known; each replica's receiver records every version of a
// row it applied, and when. A change's lag at a replica is from its
// updated_at (a little before its commit) until the replica first held it
// or a later version of the row (a message carries a row's latest
// version). Reported: the changes per second achieved, the p50 and p99
// lag, whether the lag grows (the median of the last window of the stream
// against that of the first), and the changes that never arrived, which
// fail the run. It runs in both capture modes, with the engine's
// defaults and lingering (inBothModesAndLingered); logical capture's goal
// for the lag is 500 ms at p99.
func benchStreaming(ctx context.Context, c config) ([]result, error) {
	return inBothModesAndLingered(ctx, c, streamingIn)
}

// streamingIn is benchmark 10 in c's capture mode.
func streamingIn(ctx context.Context, c config) ([]result, error) {
	r := &streamRun{c: c, catalog: c.scale(10_000, 500), streamFor: time.Duration(c.scale(60, 5)) * time.Second}
	e, err := newServerEnv(ctx, c, 16, serverOptions(c))
	if err != nil {
		return nil, err
	}
	defer e.close()
	rig, err := startStreamRig(ctx, c, e, r.catalog)
	if err != nil {
		return nil, err
	}
	defer rig.stop()
	cat, f := rig.cat, rig.fleet
	writers, err := openPool(ctx, e.db.url, streamClients, nil)
	if err != nil {
		return nil, err
	}
	defer writers.Close()
	if err := r.stream(ctx, writers, cat); err != nil {
		return nil, err
	}
	r.waitCaughtUp(f.meters, streamCatchUp)
	return r.results(f.meters)
}

// Benchmark 10's stream: its writers, and the replicas keeping up.
const (
	streamClients  = 8
	streamReplicas = 3
	streamTarget   = 5_000.0 // the goal: changes a second, in all
	// streamPace is what the clients aim at, a little over the goal: the
	// rate achieved over the stream's whole time falls a little short of
	// the pace (its start, its end), and a machine that keeps the pace is
	// to meet the goal.
	streamPace = 1.05 * streamTarget
	// streamCatchUp is how long after the stream the replicas have to
	// take every row's last version before what did not arrive is
	// counted.
	streamCatchUp = 2 * time.Minute
)

// streamCatalog is benchmark 10's broadcast catalog, adopted with the
// replicas that hold it: its rows, their keys, the replicas and their
// tokens.
type streamCatalog struct {
	tc   *codec.TableCodec
	rows []Item
	keys []string
	// members are the replicas, each with its token.
	members []fleetMember
}

// adoptStreamCatalog adds the replicas and a broadcast catalog of size
// rows, has the engine adopt them, and issues the replicas their tokens.
// streamRig is what benchmarks 10 and 16 stream through: the catalog
// adopted, Run running, the handler served on loopback and the fleet of
// replicas provisioned.
type streamRig struct {
	cat   streamCatalog
	fleet *streamFleet
	stops []func()
}

// startStreamRig sets up a streamRig of a catalog of size rows on e.
func startStreamRig(ctx context.Context, c config, e *serverEnv, size int) (*streamRig, error) {
	cat, err := adoptStreamCatalog(ctx, e, size)
	if err != nil {
		return nil, err
	}
	rig := &streamRig{cat: cat}
	eng := e.runEngine(ctx)
	rig.stops = append(rig.stops, eng.stop)
	srv, err := serveLoopback(newHandler(e.s, c.log, nil), c.log)
	if err != nil {
		rig.stop()
		return nil, err
	}
	rig.stops = append(rig.stops, srv.stop)
	if rig.fleet, err = startStreamFleet(ctx, c, e, srv.url, cat); err != nil {
		rig.stop()
		return nil, err
	}
	rig.stops = append(rig.stops, rig.fleet.stop)
	if err := rig.fleet.waitProvisioned(ctx, e); err != nil {
		rig.stop()
		return nil, err
	}
	return rig, nil
}

// stop stops what startStreamRig started, the last started first.
func (r *streamRig) stop() {
	for i := len(r.stops) - 1; i >= 0; i-- {
		r.stops[i]()
	}
}

func adoptStreamCatalog(ctx context.Context, e *serverEnv, size int) (streamCatalog, error) {
	rows := items(size, 10)
	ids, err := e.adopt(ctx, streamReplicas, rows)
	if err != nil {
		return streamCatalog{}, err
	}
	members, err := credentials(ctx, e.s, ids)
	if err != nil {
		return streamCatalog{}, err
	}
	tc, err := codec.TableOf[Item](e.codecs)
	if err != nil {
		return streamCatalog{}, err
	}
	keys := make([]string, len(rows))
	for i := range rows {
		k, err := tc.KeyOf(&rows[i])
		if err != nil {
			return streamCatalog{}, err
		}
		keys[i] = string(k)
	}
	return streamCatalog{tc: tc, rows: rows, keys: keys, members: members}, nil
}

// streamFleet is benchmark 10's replicas, each with the meter its receiver
// records what it applied in.
type streamFleet struct {
	hc     *http.Client
	reps   []*httpReplica
	meters []*lagMeter
	// provisioned has a value for each provisioning that ended.
	provisioned chan struct{}
}

// startStreamFleet starts the replicas, over SQLite files of their own,
// syncing with the server at url; on an error it stops those it started.
func startStreamFleet(ctx context.Context, c config, e *serverEnv, url string, cat streamCatalog) (*streamFleet, error) {
	f := &streamFleet{hc: httpClient(4 * streamReplicas), meters: make([]*lagMeter, streamReplicas), provisioned: make(chan struct{}, streamReplicas)}
	for i := range streamReplicas {
		m := newLagMeter(cat.tc)
		f.meters[i] = m
		rep, err := startReplica(ctx, replicaSpec{path: filepath.Join(c.dir, fmt.Sprintf("stream-%d.db", i)), id: cat.members[i].ID, token: cat.members[i].Token,
			url: url, hc: f.hc, log: c.log, codecs: e.codecs, wrap: f.measured(m)})
		if err != nil {
			f.stop()
			return nil, err
		}
		f.reps = append(f.reps, rep)
	}
	return f, nil
}

// measured wraps a replica's Receive: what it applied, m records, and the
// end of a provisioning is told on provisioned.
func (f *streamFleet) measured(m *lagMeter) func(r *replica.Replica) httpsync.Receiver {
	return func(r *replica.Replica) httpsync.Receiver {
		return receiveFunc(func(ctx context.Context, msg []byte) (replica.Received, error) {
			got, err := r.Endpoint().Receive(ctx, msg)
			if err != nil || got.Redelivered {
				return got, err
			}
			now := time.Now()
			if got.Provisioned {
				f.provisioned <- struct{}{}
			}
			if err := m.measure(msg, got, now); err != nil {
				return got, fmt.Errorf("bench: measuring a message: %w", err)
			}
			return got, nil
		})
	}
}

// waitProvisioned waits until every replica is provisioned and the server
// owes them nothing.
func (f *streamFleet) waitProvisioned(ctx context.Context, e *serverEnv) error {
	for range streamReplicas {
		if _, err := waitFor(ctx, f.provisioned, 2*time.Minute); err != nil {
			return fmt.Errorf("provisioning the replicas: %w", err)
		}
	}
	return waitQuiet(ctx, e, time.Minute)
}

// stop stops the replicas, the last started first, and closes the idle
// connections of their client.
func (f *streamFleet) stop() {
	for _, rep := range slices.Backward(f.reps) {
		_ = rep.stop()
	}
	f.hc.CloseIdleConnections()
}

// streamRun is one run of benchmark 10: the sizes, and what the stream
// wrote.
type streamRun struct {
	c         config
	catalog   int
	streamFor time.Duration
	// changes are those the stream committed, from start to end; each is
	// an UPDATE's mean time, its commit included.
	changes    []change
	start, end time.Time
	each       time.Duration
}

// stream runs the stream of UPDATEs from the writers' pool.
func (r *streamRun) stream(ctx context.Context, writers *pgxpool.Pool, cat streamCatalog) error {
	r.start = time.Now()
	changes, each, err := streamUpdates(ctx, writers, cat.rows, cat.keys, streamClients, streamPace, r.streamFor)
	if err != nil {
		return err
	}
	r.end = time.Now()
	if len(changes) == 0 {
		return fmt.Errorf("the stream committed no change")
	}
	r.changes, r.each = changes, each
	return nil
}

// waitCaughtUp waits until every replica takes every row's last version,
// or timeout passes, saying then how many did not arrive (counted once a
// replica), which it returns.
func (r *streamRun) waitCaughtUp(meters []*lagMeter, timeout time.Duration) int {
	last := map[string]int64{}
	for _, ch := range r.changes {
		last[ch.key] = max(last[ch.key], ch.version)
	}
	for deadline := time.Now().Add(timeout); ; {
		behind := missing(last, meters)
		if behind == 0 {
			return 0
		}
		if time.Now().After(deadline) {
			r.c.note("%d rows' last versions, counted once a replica, had not arrived %v after the stream", behind, timeout)
			return behind
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// results looks the stream's changes up in the meters' records: the rate
// written, the changes lost, the lag and its growth.
func (r *streamRun) results(meters []*lagMeter) ([]result, error) {
	changes := r.changes
	o := outcome(changes, meters)
	deliveries := len(changes) * streamReplicas
	if len(o.samples) == 0 {
		return nil, fmt.Errorf("no change of the stream reached a replica: %d of %d lost", o.lost, deliveries)
	}
	lags := sortedLags(o.samples)
	p50, p99 := percentile(lags, 0.5), percentile(lags, 0.99)
	window := min(10*time.Second, r.streamFor/5)
	first := medianLag(o.samples, r.start, r.start.Add(window))
	lastMedian := medianLag(o.samples, r.end.Add(-window), r.end)
	growth := 0.0
	if first > 0 {
		growth = float64(lastMedian) / float64(first)
	}
	rate := float64(len(changes)) / r.end.Sub(r.start).Seconds()
	return []result{
		{name: "10 streaming: changes written", unit: "changes/s", figure: rate, bounds: []bound{goal(atLeast, streamTarget)},
			note: fmt.Sprintf("%d clients, single-row autocommitted UPDATEs of a %d-row broadcast catalog, paced to %.0f/s in all, for %v, while %d replicas (SQLite, httpsync) sync; %d committed, an UPDATE took %.2f ms on average, its commit included",
				streamClients, r.catalog, streamPace, r.streamFor, streamReplicas, len(changes), ms(r.each))},
		{name: "10 streaming: changes that did not arrive", unit: "changes", figure: float64(o.lost), bounds: []bound{ceilingAtAnySize(0)},
			note: fmt.Sprintf("of %d (%d changes × %d replicas), waited for up to %v after the stream: neither the change's version nor a later one of its row reached the replica", deliveries, len(changes), streamReplicas, streamCatchUp)},
		{name: "10 streaming: lag p50", unit: "ms", figure: ms(p50),
			note: fmt.Sprintf("from the change's updated_at (clock_timestamp() in the UPDATE, just before its commit) until the replica's Receive of it, or of a later version of its row, returned; %d of %d changes × replicas arrived, %d of them as a later version", len(lags), deliveries, o.superseded)},
		{name: "10 streaming: lag p99", unit: "ms", figure: ms(p99), bounds: append([]bound{ceiling(1000)}, r.c.logicalGoals(goal(atMost, 500))...),
			note: fmt.Sprintf("max %.0f ms; of the changes that arrived", ms(lags[len(lags)-1]))},
		{name: "10 streaming: lag growth", unit: "×", figure: growth, bounds: []bound{ceiling(2)},
			note: fmt.Sprintf("median lag of the changes written in the last %v of the stream (%.1f ms) over that of the first (%.1f ms)",
				window, ms(lastMedian), ms(first))},
	}, nil
}

// sortedLags are the samples' lags, in order.
func sortedLags(samples []lagSample) []time.Duration {
	lags := make([]time.Duration, len(samples))
	for i, s := range samples {
		lags[i] = s.lag
	}
	slices.Sort(lags)
	return lags
}

// medianLag is the median lag of the changes written in [from, to).
func medianLag(all []lagSample, from, to time.Time) time.Duration {
	var in []time.Duration
	for _, s := range all {
		if !s.sent.Before(from) && s.sent.Before(to) {
			in = append(in, s.lag)
		}
	}
	if len(in) == 0 {
		return 0
	}
	slices.Sort(in)
	return percentile(in, 0.5)
}

// streamUpdates runs single-row autocommitted UPDATEs from clients
// goroutines for d, paced to rate a second in all (a client that falls
// behind its pace by more than 100 ms does not catch up in a burst), and
// returns every change committed — the row's key and the updated_at the
// UPDATE set — and their mean time, from the statement's start until its
// commit returned.
func streamUpdates(ctx context.Context, pool *pgxpool.Pool, rows []Item, keys []string, clients int, rate float64, d time.Duration) ([]change, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	const sql = `UPDATE bench.items SET price = price + 1, updated_at = clock_timestamp() WHERE id = $1 RETURNING updated_at`
	every := time.Duration(float64(clients) / rate * float64(time.Second))
	var busy atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	made := make([][]change, clients)
	for w := range clients {
		wg.Go(func() {
			next := time.Now().Add(time.Duration(w) * every / time.Duration(clients))
			for i := w; ctx.Err() == nil; i += clients {
				if wait := time.Until(next); wait > 0 {
					if !sleepCtx(ctx, wait) {
						return
					}
				} else if wait < -100*time.Millisecond {
					next = time.Now()
				}
				next = next.Add(every)
				began := time.Now()
				var at time.Time
				if err := pool.QueryRow(ctx, sql, rows[i%len(rows)].ID).Scan(&at); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				busy.Add(int64(time.Since(began)))
				made[w] = append(made[w], change{key: keys[i%len(rows)], version: at.UnixMicro()})
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, 0, fmt.Errorf("updating bench.items: %w", err)
	}
	all := slices.Concat(made...)
	if len(all) == 0 {
		return nil, 0, nil
	}
	return all, time.Duration(busy.Load() / int64(len(all))), nil
}
