package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/transport/natssync"
	"github.com/magicsync/magicsync/transport/natssync/embedded"
	"github.com/magicsync/magicsync/transport/natssync/headoffice"
)

// Benchmark 17 is benchmark 9 over NATS: simulated replicas, which speak
// the NATS transport as natssync's client does (a request on
// "magicsync.<id>.next" parked for the wait, saying the last message
// applied and its SHA-256; an "ack" request; again) but keep nothing,
// through one NATS server (package embedded, in a process of its own) to
// one head-office process (the engine and headoffice.Serve). The
// simulated replicas share natsReplicasPerConn to a connection, as the
// registers behind a shop's leaf node share its link to the hub: one
// connection each would measure the bench process's nats.go buffers, not
// the head office.

// natsReplicasPerConn is how many simulated replicas share a NATS
// connection.
const natsReplicasPerConn = 100

// natsSlack is how long a simulated next waits for its reply beyond the
// wait it asks for, as natssync's client does.
const natsSlack = 5 * time.Second

// natsServerSpec is the spec of a NATS server process.
type natsServerSpec struct{}

// runNATSServerChild runs an embedded NATS server until stdin ends. Events:
// "listening" (its URL); on "stats", its resident memory (RSSKB) and
// client connections (Count).
func runNATSServerChild(ctx context.Context, _ natsServerSpec, cio *childIO, _ *slog.Logger) error {
	ns, err := embedded.Start(embedded.Options{Name: "bench"})
	if err != nil {
		return fmt.Errorf("starting the NATS server: %w", err)
	}
	defer ns.Shutdown()
	cio.emit(event{Event: "listening", URL: ns.URL()})
	for {
		cmd, ok := cio.command(ctx)
		if !ok {
			return nil
		}
		switch cmd {
		case "stats", "stats gc":
			if cmd == "stats gc" {
				debug.FreeOSMemory()
			}
			cio.emit(event{Event: "stats", CPU: cpuSeconds(), RSSKB: residentKB(), PeakKB: peakRSS(), Count: ns.Clients()})
		default:
			cio.emit(event{Event: "error", Error: "unknown command " + cmd})
		}
	}
}

// serveNATS has the engine e serve over the NATS server at url, as a
// member of the head office's queue group, until the returned stop is
// called; it returns once the head office answers.
func serveNATS(ctx context.Context, url string, e headoffice.Engine, wait time.Duration, log *slog.Logger) (stop func() error, err error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- headoffice.Serve(sctx, nc, e, headoffice.Options{PollWait: wait, Logger: log})
	}()
	stop = func() error {
		cancel()
		err := <-served
		nc.Close()
		return err
	}
	// Serve subscribed once a request is answered.
	probe := natssync.Subject(natssync.DefaultPrefix, [16]byte{}, "schema")
	for deadline := time.Now().Add(time.Minute); ; {
		resp, err := nc.Request(probe, nil, time.Second)
		if err == nil && resp.Header.Get(natssync.HeaderStatus) != "" {
			return stop, nil
		}
		if time.Now().After(deadline) {
			_ = stop()
			return nil, fmt.Errorf("the head office does not answer over NATS: %v: %w", err, errTimeout)
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			_ = stop()
			return nil, ctx.Err()
		}
	}
}

// natsNext is one next over NATS, as natssync's client asks.
func (f *simFleet) natsNext(ctx context.Context, r *simReplica, wait time.Duration) (id uint64, body []byte, ok bool, err error) {
	m := nats.NewMsg(natssync.Subject(natssync.DefaultPrefix, r.id, "next"))
	m.Header.Set(natssync.HeaderAuthorization, r.auth)
	m.Header.Set(natssync.HeaderWait, strconv.FormatFloat(wait.Seconds(), 'f', 3, 64))
	if r.applied > 0 {
		m.Header.Set(natssync.HeaderApplied, strconv.FormatUint(r.applied, 10))
		m.Header.Set(natssync.HeaderSHA256, hex.EncodeToString(r.sum[:]))
	}
	rctx, cancel := context.WithTimeout(ctx, wait+natsSlack)
	defer cancel()
	f.inFlight.Add(1)
	resp, err := r.nc.RequestMsgWithContext(rctx, m)
	f.inFlight.Add(-1)
	if err != nil {
		return 0, nil, false, fmt.Errorf("replica %s: next: %w", r.id, err)
	}
	switch st := resp.Header.Get(natssync.HeaderStatus); st {
	case "204":
		f.polls.Add(1)
		return 0, nil, false, nil
	case "200":
	default:
		return 0, nil, false, natsRefused(resp, fmt.Sprintf("replica %s: next", r.id))
	}
	id, err = strconv.ParseUint(resp.Header.Get(natssync.HeaderMessageID), 10, 64)
	if err != nil {
		return 0, nil, false, fmt.Errorf("replica %s: the message's id: %w", r.id, err)
	}
	f.messages.Add(1)
	return id, resp.Data, true, nil
}

// natsAck acknowledges message id over NATS.
func (f *simFleet) natsAck(ctx context.Context, r *simReplica, id uint64) error {
	m := nats.NewMsg(natssync.Subject(natssync.DefaultPrefix, r.id, "ack"))
	m.Header.Set(natssync.HeaderAuthorization, r.auth)
	m.Header.Set(natssync.HeaderMessageID, strconv.FormatUint(id, 10))
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := r.nc.RequestMsgWithContext(rctx, m)
	if err != nil {
		return fmt.Errorf("replica %s: ack %d: %w", r.id, id, err)
	}
	if st := resp.Header.Get(natssync.HeaderStatus); len(st) != 3 || st[0] != '2' {
		return natsRefused(resp, fmt.Sprintf("replica %s: ack %d", r.id, id))
	}
	return nil
}

// natsRefused is the error of a reply other than a success: a
// *retryAfterError when it asked to wait.
func natsRefused(resp *nats.Msg, what string) error {
	err := fmt.Errorf("%s answered %s: %s", what, resp.Header.Get(natssync.HeaderStatus), resp.Header.Get(natssync.HeaderReason))
	if secs, e := strconv.Atoi(resp.Header.Get(natssync.HeaderRetryAfter)); e == nil && secs > 0 {
		return &retryAfterError{err: err, after: time.Duration(secs) * time.Second}
	}
	return err
}

// benchFleetNATS: benchmark 17 at each size.
func benchFleetNATS(ctx context.Context, c config) ([]result, error) {
	raiseFileLimit()
	sizes := []int{1_000, 20_000}
	if c.short {
		sizes = []int{200}
	}
	var out []result
	var parkedKB []int64
	for _, n := range sizes {
		rs, kb, err := fleetNATS(ctx, c, n)
		if err != nil {
			return nil, fmt.Errorf("%d replicas over NATS: %w", n, err)
		}
		if n <= httpBaselineUpTo {
			over, err := fleetSim(ctx, c, n)
			if err != nil {
				return nil, fmt.Errorf("%d replicas over HTTP, the baseline: %w", n, err)
			}
			withHTTPBaseline(rs, over, n)
		}
		out = append(out, rs...)
		parkedKB = append(parkedKB, kb)
	}
	if len(sizes) == 2 {
		out = append(out, result{name: fmt.Sprintf("17 head office RSS, %d vs %d replicas", sizes[1], sizes[0]), unit: "×",
			figure: float64(parkedKB[1]) / float64(parkedKB[0]), bounds: []bound{goal(atMost, 1.5)},
			note: fmt.Sprintf("the head office's VmRSS with every replica parked: %.1f MB at %d, %.1f MB at %d; flat when a parked next costs it little",
				float64(parkedKB[0])/1024, sizes[0], float64(parkedKB[1])/1024, sizes[1])})
	}
	return out, nil
}

// httpBaselineUpTo is the largest fleet benchmark 9 runs over HTTP, in
// one process: up to it, benchmark 17 runs it at the same size in the
// same run, its baseline.
const httpBaselineUpTo = 10_000

// httpFigures are the figures of benchmark 9 (suffixes of its results'
// names) that are the baselines of benchmark 17's (suffixes of theirs).
var httpFigures = map[string]string{
	"change reaches every replica":    "change reaches every replica",
	"reach p50":                       "reach p50",
	"reach p99":                       "reach p99",
	"head office RSS, all parked":     "server RSS, all parked",
	"head office RSS per parked next": "server RSS per parked poll",
}

// withHTTPBaseline sets the baselines of benchmark 17's results rs at n
// replicas to the figures of benchmark 9's, over, at the same size.
func withHTTPBaseline(rs, over []result, n int) {
	prefix9, prefix17 := fmt.Sprintf("9 fleet of %d: ", n), fmt.Sprintf("17 fleet of %d over NATS: ", n)
	for i := range rs {
		want, ok := httpFigures[strings.TrimPrefix(rs[i].name, prefix17)]
		if !ok {
			continue
		}
		for _, o := range over {
			if o.name == prefix9+want && !o.unmeasured {
				rs[i].baseline = o.figure
				rs[i].note += "; baseline: benchmark 9's " + want + ", over HTTP, same size, same run"
			}
		}
	}
}

// fleetNATS: n simulated replicas, each holding a broadcast catalog of
// five rows, are provisioned over NATS and park in their nexts; then one
// row is updated on the head office. Measured: from before the UPDATE
// until each replica read the message carrying the row; the head office's
// resident memory with every replica parked, and the NATS server's. It
// returns the results and the head office's parked VmRSS.
func fleetNATS(ctx context.Context, c config, n int) (_ []result, parkedKB int64, err error) {
	e, err := newServerEnv(ctx, c, 8, serverOptions(c))
	if err != nil {
		return nil, 0, err
	}
	defer e.close()
	r := &fleetRun{c: c, n: n, e: e}
	if err := r.adoptReplicas(ctx); err != nil {
		return nil, 0, err
	}
	ns, err := startChild("natsserver", natsServerSpec{})
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if err != nil {
			ns.kill()
		}
	}()
	listening, err := ns.next(ctx, "listening", time.Minute)
	if err != nil {
		return nil, 0, err
	}
	natsURL := listening.URL
	app := appName("server")
	r.pg = &pgMeter{pool: e.pool, apps: []string{app}}
	srv, _, err := startServerChild(ctx, serverChildSpec{DatabaseURL: e.db.url, MaxConns: 16, SQLStats: c.sqlStats, PollWait: parkWait, AppName: app, NATS: natsURL})
	if err != nil {
		return nil, 0, err
	}
	r.srv = srv
	defer func() {
		if err != nil {
			srv.kill()
		}
	}()
	alone, err := r.measureAlone(ctx)
	if err != nil {
		return nil, 0, err
	}
	ns0, err := serverStats(ctx, ns, true)
	if err != nil {
		return nil, 0, err
	}
	conns := make([]*nats.Conn, (n+natsReplicasPerConn-1)/natsReplicasPerConn)
	defer func() {
		for _, nc := range conns {
			if nc != nil {
				nc.Close()
			}
		}
	}()
	for i := range conns {
		if conns[i], err = nats.Connect(natsURL, nats.MaxReconnects(-1)); err != nil {
			return nil, 0, fmt.Errorf("connecting to NATS: %w", err)
		}
	}
	f := newSimFleet("", nil, r.tbl, r.ids, r.tokens)
	for i := range f.reps {
		f.reps[i].nc = conns[i/natsReplicasPerConn]
	}
	started := r.startFleetOf(ctx, f)
	defer r.stopFleet()
	provisioned, err := r.waitProvisioned(ctx, started)
	if err != nil {
		return nil, 0, err
	}
	parked, err := r.park(ctx)
	if err != nil {
		return nil, 0, err
	}
	nsParked, err := serverStats(ctx, ns, true)
	if err != nil {
		return nil, 0, err
	}
	b, err := r.broadcast(ctx)
	if err != nil {
		return nil, 0, err
	}
	r.stopFleet()
	exits, err := finishAll(ctx, srv, ns)
	if err != nil {
		return nil, 0, err
	}
	if f.failures.Load() > 0 {
		c.note("%d simulated replicas over NATS: %d failed requests, the first: %v", n, f.failures.Load(), f.firstError())
	}
	mb := func(kb int64) float64 { return float64(kb) / 1024 }
	name := fmt.Sprintf("17 fleet of %d over NATS: ", n)
	last, p50, p99 := b.reach[len(b.reach)-1], percentile(b.reach, 0.5), percentile(b.reach, 0.99)
	return []result{
		{name: name + "change reaches every replica", unit: "s", figure: last.Seconds(),
			note: fmt.Sprintf("simulated replicas (NATS, %d to a connection, no SQLite) parked in nexts; one broadcast row updated; first after %.0f ms; provisioning the fleet took %v",
				natsReplicasPerConn, ms(b.reach[0]), provisioned.Round(time.Millisecond))},
		{name: name + "reach p50", unit: "ms", figure: ms(p50), note: "per-replica time from before the UPDATE until the message carrying the row was read"},
		{name: name + "reach p99", unit: "ms", figure: ms(p99), bounds: []bound{goalOf("p99/p50", per(ms(p99), ms(p50)), "", atMost, 1.5)},
			note: fmt.Sprintf("per-replica time, as for p50; %.0f messages delivered, %d polls renewed, %d failed over the broadcast", b.delivered, b.renewed, b.failed)},
		{name: name + "head office RSS, all parked", unit: "MB", figure: mb(parked.RSSKB),
			note: fmt.Sprintf("VmRSS of the head-office process (engine and headoffice.Serve) after returning free memory to the system; %.1f MB before any replica; peak %.1f MB",
				mb(alone.before.RSSKB), mb(exits[0].PeakKB))},
		{name: name + "head office RSS per parked next", unit: "KB", figure: float64(parked.RSSKB-alone.before.RSSKB) / float64(n), bounds: []bound{goal(atMost, 40)},
			note: "(VmRSS parked − VmRSS before any replica) / replicas"},
		{name: name + "NATS server RSS per connection", unit: "KB", figure: per(float64(nsParked.RSSKB-ns0.RSSKB), float64(nsParked.Count-ns0.Count)),
			note: fmt.Sprintf("(VmRSS parked − VmRSS before) / connections: %d connections carrying %d parked requests, %.1f KB a parked request; %.1f MB parked, peak %.1f MB",
				nsParked.Count-ns0.Count, n, per(float64(nsParked.RSSKB-ns0.RSSKB), float64(n)), mb(nsParked.RSSKB), mb(exits[1].PeakKB))},
	}, parked.RSSKB, nil
}
