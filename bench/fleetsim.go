package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/transport/httpsync"
)

// Benchmark 9 measures the server alone against a fleet far larger than
// one machine could run replica engines for: simulated replicas, which
// speak the HTTP protocol as httpsync's client does (long-poll for the next
// message, saying the last one applied and its SHA-256; acknowledge what
// came; poll again) but keep nothing, all goroutines of the benchmark's
// process. The server — Run and the httpsync handler — runs in a process of
// its own, which counts its pool's statements and commits and reports them,
// with its CPU time and memory, on the command "stats".

// parkWait is the long-poll window of the simulated replicas until the
// broadcast has reached them: longer than provisioning the fleet takes, so
// that no poll runs out and renews during the broadcast, whose statements
// are counted per delivery.
const parkWait = 10 * time.Minute

// idleWait is the long-poll window of the simulated replicas once the
// broadcast reached them, the client's default.
const idleWait = 25 * time.Second

// provisionAtOnce bounds the simulated replicas being provisioned at once:
// ten thousand first polls at the same moment would only queue for the
// server's pool.
const provisionAtOnce = 32

// simReplica is one simulated replica's state, its goroutine's own.
type simReplica struct {
	id   uuid.UUID
	auth string // the Authorization header
	// rounds are the broadcasts whose row the replica acknowledged, a bit
	// each (a failed acknowledgement has the message come again).
	rounds uint64
	// applied is the last message acknowledged and sum its SHA-256: what
	// the next poll tells the server, as httpsync's client does.
	applied uint64
	sum     [sha256.Size]byte
	// nc, when set, is the NATS connection the replica speaks over
	// (benchmark 17), rather than HTTP.
	nc *nats.Conn
}

// simFleet is the simulated replicas and what they saw.
type simFleet struct {
	base string
	hc   *http.Client
	reps []simReplica
	tbl  string // the broadcast rows' table
	// round is the broadcast being watched for, nil before the first.
	round atomic.Pointer[simRound]

	provisionSlots chan struct{}
	provisioned    atomic.Int64
	allProvisioned chan struct{}
	inFlight       atomic.Int64 // polls sent and not answered
	polls          atomic.Int64 // polls answered 204: nothing came
	messages       atomic.Int64 // polls answered with a message
	failures       atomic.Int64
	firstErr       atomic.Pointer[error]
	lastErr        atomic.Pointer[error]
	// phase is the context of the polls in flight: ending it ends them.
	phaseMu     sync.Mutex
	phase       context.Context
	phaseCancel context.CancelFunc
}

// simRound is one broadcast the fleet watches for: the row it changes,
// and when each replica got it.
type simRound struct {
	num int // 0 for the first, < 64
	key []byte
	// at is when each replica (by index) read the message carrying the
	// row first, in Unix nanoseconds; zero until it did.
	at       []atomic.Int64
	reached  atomic.Int64 // replicas that read it
	acked    atomic.Int64 // and acknowledged it
	allRead  chan struct{}
	allAcked chan struct{}
}

// watch has the fleet watch for broadcast num, of the row of key, from now
// on, and returns it.
func (f *simFleet) watch(num int, key []byte) *simRound {
	r := &simRound{num: num, key: key, at: make([]atomic.Int64, len(f.reps)), allRead: make(chan struct{}), allAcked: make(chan struct{})}
	f.round.Store(r)
	return r
}

// reachTimes is when each replica that read the round's row did, as a
// time since start, in ascending order.
func (r *simRound) reachTimes(start time.Time) []time.Duration {
	out := make([]time.Duration, 0, len(r.at))
	for i := range r.at {
		if at := r.at[i].Load(); at != 0 {
			out = append(out, time.Unix(0, at).Sub(start))
		}
	}
	slices.Sort(out)
	return out
}

// currentPhase is the context polls are made under now.
func (f *simFleet) currentPhase() context.Context {
	f.phaseMu.Lock()
	defer f.phaseMu.Unlock()
	return f.phase
}

// startPhase makes polls from now on under a new context, and ends those
// made under the previous one.
func (f *simFleet) startPhase(ctx context.Context) {
	f.phaseMu.Lock()
	defer f.phaseMu.Unlock()
	if f.phaseCancel != nil {
		defer f.phaseCancel()
	}
	f.phase, f.phaseCancel = context.WithCancel(ctx)
}

// fail records a failed request.
func (f *simFleet) fail(err error) {
	f.failures.Add(1)
	f.firstErr.CompareAndSwap(nil, &err)
	f.lastErr.Store(&err)
}

// backOff records a failed request and waits as httpsync's client does
// after one: a while, at least as long as a Retry-After asked. It returns
// false when ctx ended.
func (f *simFleet) backOff(ctx context.Context, err error) bool {
	f.fail(err)
	pause := 100 * time.Millisecond
	if se, ok := errors.AsType[*retryAfterError](err); ok {
		pause = max(pause, se.after)
	}
	return sleepCtx(ctx, pause)
}

// run is replica i's loop: provisioning (one of provisionAtOnce at a
// time), then long-polls until ctx ends.
func (f *simFleet) run(ctx context.Context, i int) {
	r := &f.reps[i]
	select {
	case f.provisionSlots <- struct{}{}:
	case <-ctx.Done():
		return
	}
	provisioning := true
	defer func() {
		if provisioning {
			<-f.provisionSlots
		}
	}()
	// spread, once the broadcast reached the replica, makes its next
	// poll's window random, so that the fleet's polls run out evenly
	// over the window afterwards, as those of a fleet started at random
	// times do.
	spread := false
	for ctx.Err() == nil {
		pctx := f.currentPhase()
		wait := parkWait
		if r.rounds != 0 {
			// Past the broadcast: the client's window.
			wait = idleWait
		}
		if spread {
			wait = time.Duration((0.02 + 0.98*mrand.Float64()) * float64(idleWait))
			spread = false
		}
		id, body, ok, err := f.next(pctx, r, wait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if pctx.Err() != nil {
				continue // a new phase
			}
			if !f.backOff(ctx, err) {
				return
			}
			continue
		}
		if !ok {
			continue
		}
		m, err := wire.DecodeToReplica(body)
		if err != nil {
			f.fail(fmt.Errorf("replica %s, message %d: %w", r.id, id, err))
			continue
		}
		round := f.round.Load()
		carries := round != nil && r.rounds&(1<<round.num) == 0 && carries(m.GetDown().GetTables(), f.tbl, round.key)
		if carries && round.at[i].CompareAndSwap(0, time.Now().UnixNano()) && round.reached.Add(1) == int64(len(f.reps)) {
			close(round.allRead)
		}
		if err := f.ack(ctx, r, id); err != nil {
			if ctx.Err() != nil {
				return
			}
			if !f.backOff(ctx, err) {
				return
			}
			continue
		}
		r.applied, r.sum = id, sha256.Sum256(body)
		if provisioning && m.GetEndSnapshot() != nil {
			provisioning = false
			<-f.provisionSlots
			if f.provisioned.Add(1) == int64(len(f.reps)) {
				close(f.allProvisioned)
			}
		}
		if carries {
			r.rounds |= 1 << round.num
			spread = true
			if round.acked.Add(1) == int64(len(f.reps)) {
				close(round.allAcked)
			}
		}
	}
}

// carries reports whether a message's tables bring the row of key.
func carries(tables []*syncpb.TableChanges, tbl string, key []byte) bool {
	for _, t := range tables {
		if t.GetTable() != tbl {
			continue
		}
		for _, k := range t.GetUpsertKeys() {
			if bytes.Equal(k, key) {
				return true
			}
		}
	}
	return false
}

// next is one long-poll: GET /sync/{id}/next, as httpsync's client asks.
func (f *simFleet) next(ctx context.Context, r *simReplica, wait time.Duration) (id uint64, body []byte, ok bool, err error) {
	if r.nc != nil {
		return f.natsNext(ctx, r, wait)
	}
	url := f.base + "/sync/" + r.id.String() + "/next?wait=" + strconv.FormatFloat(wait.Seconds(), 'f', 3, 64)
	if r.applied > 0 {
		url += "&applied=" + strconv.FormatUint(r.applied, 10) + "&sha256=" + hex.EncodeToString(r.sum[:])
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, false, err
	}
	req.Header.Set("Authorization", r.auth)
	f.inFlight.Add(1)
	resp, err := f.hc.Do(req)
	f.inFlight.Add(-1)
	if err != nil {
		return 0, nil, false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		f.polls.Add(1)
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, nil, false, nil
	case http.StatusOK:
	default:
		return 0, nil, false, refused(resp, fmt.Sprintf("replica %s: GET next", r.id))
	}
	id, err = strconv.ParseUint(resp.Header.Get(httpsync.HeaderMessageID), 10, 64)
	if err != nil {
		return 0, nil, false, fmt.Errorf("replica %s: the message's id: %w", r.id, err)
	}
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, false, err
	}
	f.messages.Add(1)
	return id, body, true, nil
}

// ack acknowledges message id: POST /sync/{id}/ack/{msg}.
func (f *simFleet) ack(ctx context.Context, r *simReplica, id uint64) error {
	if r.nc != nil {
		return f.natsAck(ctx, r, id)
	}
	url := f.base + "/sync/" + r.id.String() + "/ack/" + strconv.FormatUint(id, 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", r.auth)
	resp, err := f.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return refused(resp, fmt.Sprintf("replica %s: POST ack/%d", r.id, id))
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// refused is the error of a request the server did not answer with a
// success: a *retryAfterError when it asked to wait.
func refused(resp *http.Response, what string) error {
	reason, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	err := fmt.Errorf("%s answered %s: %s", what, resp.Status, bytes.TrimSpace(reason))
	if secs, e := strconv.Atoi(resp.Header.Get("Retry-After")); e == nil && secs > 0 {
		return &retryAfterError{err: err, after: time.Duration(secs) * time.Second}
	}
	return err
}

// retryAfterError is an answer that asked, with Retry-After, to wait
// before asking again.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// sleepCtx sleeps for d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// bulkCredentials issues every replica a secret in one statement, as
// Credentials does one at a time (its SHA-256 stored), and returns their
// tokens. The replicas must be the engine's already (a pass adopted them).
func bulkCredentials(ctx context.Context, e *serverEnv, ids []uuid.UUID) ([]string, error) {
	tokens := make([]string, len(ids))
	hashes := make([][]byte, len(ids))
	for i, id := range ids {
		secret := rand.Text()
		h := sha256.Sum256([]byte(secret))
		hashes[i] = h[:]
		tokens[i] = httpsync.JoinToken(id, secret)
	}
	tag, err := e.pool.Exec(ctx, `UPDATE public.sync_replicas s SET secret = u.h FROM unnest($1::uuid[], $2::bytea[]) u(id, h) WHERE s.id = u.id`, ids, hashes)
	if err != nil {
		return nil, fmt.Errorf("issuing credentials: %w", err)
	}
	if tag.RowsAffected() != int64(len(ids)) {
		return nil, fmt.Errorf("issuing credentials: %d replicas of %d are the engine's", tag.RowsAffected(), len(ids))
	}
	return tokens, nil
}

// serverStats asks the server process for its counters.
func serverStats(ctx context.Context, srv *child, gc bool) (event, error) {
	cmd := "stats"
	if gc {
		cmd = "stats gc"
	}
	if err := srv.send(cmd); err != nil {
		return event{}, err
	}
	return srv.next(ctx, "stats", time.Minute)
}

// statsDelta is what a server did between two "stats" events.
type statsDelta struct {
	statements, commits, cpu float64
}

func deltaOf(a, b event) statsDelta {
	return statsDelta{statements: float64(b.Statements - a.Statements), commits: float64(b.Commits - a.Commits), cpu: b.CPU - a.CPU}
}

// benchFleetSim: benchmark 9 at each size.
func benchFleetSim(ctx context.Context, c config) ([]result, error) {
	raiseFileLimit()
	sizes := []int{1_000, 10_000}
	if c.short {
		sizes = []int{100}
	}
	var out []result
	for _, n := range sizes {
		rs, err := fleetSim(ctx, c, n)
		if err != nil {
			return nil, fmt.Errorf("%d replicas: %w", n, err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

// fleetSim: n simulated replicas, each holding a broadcast catalog of five
// rows, are provisioned and park in their long-polls; then one row is
// updated on the server. Measured: from before the UPDATE until each
// replica received the message carrying the row, and the server process's
// statements, commits and CPU time from before the UPDATE until the last
// acknowledgement of it, per message delivered; its resident memory with
// every replica parked; and, with the replicas idle, polling with a 25 s
// window whose renewals fall evenly over time, its CPU and its statements
// and commits per poll.
func fleetSim(ctx context.Context, c config, n int) (_ []result, err error) {
	e, err := newServerEnv(ctx, c, 8, serverOptions(c))
	if err != nil {
		return nil, err
	}
	defer e.close()
	r := &fleetRun{c: c, n: n, e: e}
	if err := r.adoptReplicas(ctx); err != nil {
		return nil, err
	}
	url, err := r.startServer(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.srv.kill()
		}
	}()
	var m fleetMeasures
	if m.alone, err = r.measureAlone(ctx); err != nil {
		return nil, err
	}
	started := r.startFleet(ctx, url)
	defer r.stopFleet()
	if m.provisioned, err = r.waitProvisioned(ctx, started); err != nil {
		return nil, err
	}
	if m.parked, err = r.park(ctx); err != nil {
		return nil, err
	}
	if m.broadcast, err = r.broadcast(ctx); err != nil {
		return nil, err
	}
	if m.idle, err = r.idle(ctx); err != nil {
		return nil, err
	}
	r.stopFleet()
	srvExit, err := r.srv.finish(ctx)
	if err != nil {
		return nil, err
	}
	m.peakKB = srvExit.PeakKB
	if r.f.failures.Load() > 0 {
		c.note("%d simulated replicas: %d failed requests, the first: %v", n, r.f.failures.Load(), r.f.firstError())
	}
	return r.results(m), nil
}

// fleetRun is one run of benchmark 9 at one size: the database, the server
// process, the simulated fleet polling it, and the meter of the PostgreSQL
// backends serving it.
type fleetRun struct {
	c config
	n int
	e *serverEnv
	// ids and tokens are the replicas' and their credentials; item is the
	// broadcast row the run updates, of table tbl, and key its key.
	ids    []uuid.UUID
	tokens []string
	item   uuid.UUID
	tbl    string
	key    []byte

	srv *child
	pg  *pgMeter
	f   *simFleet
	// stopPolls ends the simulated replicas' loops; wg waits for them.
	stopPolls context.CancelFunc
	wg        sync.WaitGroup
}

// fleetMeasures is what each phase of a fleetRun measured.
type fleetMeasures struct {
	alone       serverAlone
	provisioned time.Duration // from the replicas' start until all were provisioned
	parked      event         // the server's stats with every replica parked
	broadcast   fleetBroadcast
	idle        fleetIdle
	peakKB      int64 // the server process's peak resident memory
}

// serverAlone is the server measured before any replica polls: Run's own
// statements (its watch of the triggers' notes, its passes), to tell from
// the polls'.
type serverAlone struct {
	before event // the server's stats at the start, its memory included
	d      statsDelta
	secs   float64
}

// fleetBroadcast is what the server did from before the UPDATE of the
// broadcast row until the last acknowledgement of it.
type fleetBroadcast struct {
	pg0, pg1  backendCPU
	d         statsDelta
	took      time.Duration
	delivered float64 // messages
	renewed   int64   // polls that ran out meanwhile
	failed    int64   // requests that failed meanwhile
	// reach is, in ascending order, how long after the UPDATE each replica
	// read the message carrying the row.
	reach []time.Duration
}

// fleetIdle is what the server did while the replicas polled idle.
type fleetIdle struct {
	pg0, pg1 backendCPU
	d        statsDelta
	secs     float64
	polls    float64 // polls that ran out
	msgs     int64   // messages delivered meanwhile
}

// adoptReplicas adds n replicas and the broadcast catalog of five rows,
// has the engine adopt them, and issues the replicas their credentials.
func (r *fleetRun) adoptReplicas(ctx context.Context) error {
	start := time.Now()
	rows := items(5, 9)
	ids, err := r.e.adopt(ctx, r.n, rows)
	if err != nil {
		return err
	}
	tokens, err := bulkCredentials(ctx, r.e, ids)
	if err != nil {
		return err
	}
	if _, err := r.e.pool.Exec(ctx, `ANALYZE`); err != nil {
		return err
	}
	r.c.note("%d replicas adopted and issued credentials in %v", r.n, time.Since(start).Round(time.Millisecond))
	tc, err := codec.TableOf[Item](r.e.codecs)
	if err != nil {
		return err
	}
	key, err := tc.KeyOf(&rows[0])
	if err != nil {
		return err
	}
	r.ids, r.tokens, r.item, r.tbl, r.key = ids, tokens, rows[0].ID, tc.Name, []byte(key)
	return nil
}

// startServer starts the server process, its polls parking for parkWait,
// and returns the URL it listens on. The caller kills it on a later error.
func (r *fleetRun) startServer(ctx context.Context) (string, error) {
	app := appName("server")
	r.pg = &pgMeter{pool: r.e.pool, apps: []string{app}}
	srv, url, err := startServerChild(ctx, serverChildSpec{DatabaseURL: r.e.db.url, MaxConns: 16, SQLStats: r.c.sqlStats, PollWait: parkWait, AppName: app})
	if err != nil {
		return "", err
	}
	r.srv = srv
	return url, nil
}

// measureAlone measures the server with no replica polling, once its first
// pass is done and its pool's connections are open.
func (r *fleetRun) measureAlone(ctx context.Context) (serverAlone, error) {
	time.Sleep(time.Duration(r.c.scale(1000, 300)) * time.Millisecond)
	alone := time.Duration(r.c.scale(2000, 400)) * time.Millisecond
	s0, err := serverStats(ctx, r.srv, true)
	if err != nil {
		return serverAlone{}, err
	}
	time.Sleep(alone)
	s1, err := serverStats(ctx, r.srv, false)
	if err != nil {
		return serverAlone{}, err
	}
	return serverAlone{before: s0, d: deltaOf(s0, s1), secs: alone.Seconds()}, nil
}

// startFleet makes the simulated fleet, polling url, and starts every
// replica's loop; it returns when they started.
func (r *fleetRun) startFleet(ctx context.Context, url string) (started time.Time) {
	return r.startFleetOf(ctx, newSimFleet(url, httpClient(r.n+64), r.tbl, r.ids, r.tokens))
}

// startFleetOf starts every replica's loop of the simulated fleet f; it
// returns when they started.
func (r *fleetRun) startFleetOf(ctx context.Context, f *simFleet) (started time.Time) {
	fctx, stop := context.WithCancel(ctx)
	f.startPhase(fctx)
	r.f, r.stopPolls = f, stop
	started = time.Now()
	for i := range f.reps {
		r.wg.Go(func() { f.run(fctx, i) })
	}
	return started
}

// stopFleet ends the simulated replicas' loops and waits for them. It may
// be called again.
func (r *fleetRun) stopFleet() {
	r.stopPolls()
	r.wg.Wait()
	if r.f.hc != nil {
		r.f.hc.CloseIdleConnections()
	}
}

// waitProvisioned waits until every replica is provisioned and the server
// owes them nothing; it returns how long the provisioning took since the
// fleet started.
func (r *fleetRun) waitProvisioned(ctx context.Context, started time.Time) (time.Duration, error) {
	f, n := r.f, r.n
	if _, err := waitFor(ctx, f.allProvisioned, 10*time.Minute); err != nil {
		return 0, fmt.Errorf("%d of %d replicas provisioned (%d failed requests, the first: %v): %w", f.provisioned.Load(), n, f.failures.Load(), f.firstError(), err)
	}
	provisioned := time.Since(started)
	r.c.note("%d simulated replicas provisioned in %v", n, provisioned.Round(time.Millisecond))
	if err := waitQuiet(ctx, r.e, 2*time.Minute); err != nil {
		return 0, err
	}
	return provisioned, nil
}

// park waits until every replica's long-poll is in flight and has had time
// to park, and returns the server's stats then.
func (r *fleetRun) park(ctx context.Context) (event, error) {
	for deadline := time.Now().Add(time.Minute); r.f.inFlight.Load() < int64(r.n); {
		if time.Now().After(deadline) {
			return event{}, fmt.Errorf("%d of %d replicas polling: %w", r.f.inFlight.Load(), r.n, errTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Duration(r.c.scale(1000, 300)) * time.Millisecond)
	return serverStats(ctx, r.srv, true)
}

// broadcast updates the broadcast row and waits until every replica
// acknowledged it. Under -childprofile or -sqlstats, the server's profile
// starts just before.
func (r *fleetRun) broadcast(ctx context.Context) (fleetBroadcast, error) {
	f := r.f
	failed0 := f.failures.Load()
	if os.Getenv(profileDirEnv) != "" || r.c.sqlStats {
		if err := r.srv.send("profile"); err != nil {
			return fleetBroadcast{}, err
		}
	}
	pg0 := r.pg.sample(ctx)
	b0, err := serverStats(ctx, r.srv, false)
	if err != nil {
		return fleetBroadcast{}, err
	}
	polls0, msgs0 := f.polls.Load(), f.messages.Load()
	round := f.watch(0, r.key)
	start := time.Now()
	if _, err := r.e.pool.Exec(ctx, `UPDATE bench.items SET price = price + 1, updated_at = clock_timestamp() WHERE id = $1`, r.item); err != nil {
		return fleetBroadcast{}, err
	}
	if _, err := waitFor(ctx, round.allAcked, 2*time.Minute); err != nil {
		return fleetBroadcast{}, fmt.Errorf("%d of %d replicas reached, %d acknowledged (%d failed requests, the first: %v): %w",
			round.reached.Load(), r.n, round.acked.Load(), f.failures.Load(), f.firstError(), err)
	}
	b1, err := serverStats(ctx, r.srv, false)
	if err != nil {
		return fleetBroadcast{}, err
	}
	pg1 := r.pg.sample(ctx)
	return fleetBroadcast{pg0: pg0, pg1: pg1, d: deltaOf(b0, b1), took: time.Since(start),
		delivered: float64(f.messages.Load() - msgs0), renewed: f.polls.Load() - polls0, failed: f.failures.Load() - failed0,
		reach: round.reachTimes(start)}, nil
}

// idle measures the server while every replica polls with a 25 s window,
// their renewals spread evenly: the first of them after the broadcast had
// a random window.
func (r *fleetRun) idle(ctx context.Context) (fleetIdle, error) {
	f := r.f
	time.Sleep(time.Duration(r.c.scale(1000, 200)) * time.Millisecond)
	pg0 := r.pg.sample(ctx)
	i0, err := serverStats(ctx, r.srv, false)
	if err != nil {
		return fleetIdle{}, err
	}
	polls0, msgs0 := f.polls.Load(), f.messages.Load()
	idleFor := time.Duration(r.c.scale(10_000, 1_500)) * time.Millisecond
	idleStart := time.Now()
	time.Sleep(idleFor)
	i1, err := serverStats(ctx, r.srv, false)
	if err != nil {
		return fleetIdle{}, err
	}
	pg1 := r.pg.sample(ctx)
	return fleetIdle{pg0: pg0, pg1: pg1, d: deltaOf(i0, i1), secs: time.Since(idleStart).Seconds(),
		polls: float64(f.polls.Load() - polls0), msgs: f.messages.Load() - msgs0}, nil
}

// per is v / by, or zero when by is not positive.
func per(v, by float64) float64 {
	if by <= 0 {
		return 0
	}
	return v / by
}

// fleetSimBounds are the bounds of the time the change takes to reach
// every replica and of the server's peak memory. Ceilings, enforced at
// full sizes: the goals where this machine reaches them, else the figures
// reached here and a margin for a noisy machine. The goals beyond them are
// reported, met or NOT met.
func fleetSimBounds(n int) (reach, rss []bound) {
	if n > 1000 {
		return []bound{ceiling(30), goal(atMost, 3)}, []bound{ceiling(1024), goal(atMost, 400)}
	}
	return []bound{ceiling(3)}, []bound{ceiling(200)}
}

// results are benchmark 9's figures at this size, from what its phases
// measured.
func (r *fleetRun) results(m fleetMeasures) []result {
	name := fmt.Sprintf("9 fleet of %d: ", r.n)
	return slices.Concat(r.broadcastResults(name, m), r.memoryResults(name, m), r.idleResults(name, m))
}

// costs are what the run measured a delivery and a parked or idle poll to
// cost: the README extrapolates them.
func (r *fleetRun) costs(m fleetMeasures) *fleetCosts {
	n, b, id := r.n, m.broadcast, m.idle
	costs := &fleetCosts{source: fmt.Sprintf("benchmark 9, %d replicas, one head office", n), replicas: n,
		serverCPU: per(1000*b.d.cpu, b.delivered), statements: per(b.d.statements, b.delivered), rssKB: float64(m.parked.RSSKB-m.alone.before.RSSKB) / float64(n),
		idleServerPct: 100 * per(id.d.cpu, id.secs) / float64(n), idleMeasured: true}
	if secs, ok := r.pg.between(b.pg0, b.pg1); ok {
		costs.pgCPU, costs.pgMeasured = per(1000*secs, b.delivered), true
	}
	if secs, ok := r.pg.between(id.pg0, id.pg1); ok {
		costs.idlePGPct = 100 * per(secs, id.secs) / float64(n)
	}
	return costs
}

// broadcastResults are the figures of the broadcast: its reach, and what
// the server and PostgreSQL spent a delivery.
func (r *fleetRun) broadcastResults(name string, m fleetMeasures) []result {
	b, bg := m.broadcast, m.alone
	last, p50, p99 := b.reach[r.n-1], percentile(b.reach, 0.5), percentile(b.reach, 0.99)
	reachBounds, _ := fleetSimBounds(r.n)
	return []result{
		{name: name + "change reaches every replica", unit: "s", figure: last.Seconds(), bounds: reachBounds, costs: r.costs(m),
			note: fmt.Sprintf("simulated replicas (HTTP, no SQLite) parked in long-polls; one broadcast row updated; first after %.0f ms; provisioning the fleet took %v",
				ms(b.reach[0]), m.provisioned.Round(time.Millisecond))},
		{name: name + "reach p50", unit: "ms", figure: ms(p50), note: "per-replica time from before the UPDATE until the message carrying the row was read"},
		{name: name + "reach p99", unit: "ms", figure: ms(p99), bounds: []bound{goalOf("p99/p50", per(ms(p99), ms(p50)), "", atMost, 1.5)},
			note: "per-replica time, as for p50"},
		{name: name + "statements per delivery", unit: "stmts", figure: per(b.d.statements, b.delivered), bounds: []bound{ceiling(4)},
			note: fmt.Sprintf("server pool, from the UPDATE until the last acknowledgement (%v): %.0f statements, %.0f messages, of which Run's own at its rate alone %.2f a delivery; %d polls renewed, %d failed meanwhile",
				b.took.Round(time.Millisecond), b.d.statements, b.delivered, per(bg.d.statements/bg.secs*b.took.Seconds(), b.delivered), b.renewed, b.failed)},
		{name: name + "commits per delivery", unit: "commits", figure: per(b.d.commits, b.delivered), bounds: []bound{ceiling(0.25)},
			note: fmt.Sprintf("COMMITs and writes outside a transaction: %.0f", b.d.commits)},
		{name: name + "server CPU per delivery", unit: "ms", figure: per(1000*b.d.cpu, b.delivered),
			note: fmt.Sprintf("user + system time of the server process over the broadcast: %.2f s", b.d.cpu)},
		r.pg.result(name+"PostgreSQL CPU per delivery", "ms", b.pg0, b.pg1, func(secs float64) float64 { return per(1000*secs, b.delivered) },
			"user + system time of the backends of the server's pool (/proc/PID/stat), over the same span as its statements", goal(atMost, 0.03)),
	}
}

// memoryResults are the figures of the server's resident memory.
func (r *fleetRun) memoryResults(name string, m fleetMeasures) []result {
	mb := func(kb int64) float64 { return float64(kb) / 1024 }
	_, rssBounds := fleetSimBounds(r.n)
	return []result{
		{name: name + "server RSS, all parked", unit: "MB", figure: mb(m.parked.RSSKB),
			note: fmt.Sprintf("VmRSS after returning free memory to the system; %.1f MB before any replica", mb(m.alone.before.RSSKB))},
		{name: name + "server RSS per parked poll", unit: "KB", figure: float64(m.parked.RSSKB-m.alone.before.RSSKB) / float64(r.n), bounds: []bound{goal(atMost, 40)},
			note: "(VmRSS parked − VmRSS before any replica) / replicas"},
		{name: name + "server peak RSS", unit: "MB", figure: mb(m.peakKB), bounds: rssBounds,
			note: "VmHWM of the server process over the run, provisioning the fleet included"},
	}
}

// idleResults are the figures of the idle polling, the statements and
// commits a poll net of Run's own, at its rate measured alone.
func (r *fleetRun) idleResults(name string, m fleetMeasures) []result {
	bg, id := m.alone, m.idle
	netPolls := func(v, bgv float64) float64 { return per(max(v-bgv*id.secs/bg.secs, 0), id.polls) }
	bgNote := fmt.Sprintf("Run alone, before any replica: %.0f statements/s, %.1f commits/s, %.1f%% of a core",
		bg.d.statements/bg.secs, bg.d.commits/bg.secs, 100*bg.d.cpu/bg.secs)
	return []result{
		{name: name + "idle server CPU", unit: "% of a core", figure: 100 * per(id.d.cpu, id.secs), bounds: []bound{goal(atMost, 5)},
			note: fmt.Sprintf("%.1f s of idle polling, 25 s windows, %.0f polls ran out (%d messages); %s", id.secs, id.polls, id.msgs, bgNote)},
		r.pg.result(name+"idle PostgreSQL CPU", "% of a core", id.pg0, id.pg1, func(secs float64) float64 { return 100 * per(secs, id.secs) },
			"the backends of the server's pool over the same idle polling, Run's own included"),
		{name: name + "idle statements per poll", unit: "stmts", figure: netPolls(id.d.statements, bg.d.statements),
			note: fmt.Sprintf("net of Run's own (measured alone); %.2f counting them", per(id.d.statements, id.polls))},
		{name: name + "idle commits per poll", unit: "commits", figure: netPolls(id.d.commits, bg.d.commits), bounds: []bound{ceiling(0.1), goal(atMost, 0)},
			note: fmt.Sprintf("net of Run's own; %.3f counting them", per(id.d.commits, id.polls))},
	}
}

// lastError is the last failed request's error, or nil.
func (f *simFleet) lastError() error {
	if p := f.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// newSimFleet is a fleet of simulated replicas, not yet running, that
// poll base through hc; the broadcast rows it watches for are of table tbl.
func newSimFleet(base string, hc *http.Client, tbl string, ids []uuid.UUID, tokens []string) *simFleet {
	f := &simFleet{base: base, hc: hc, reps: make([]simReplica, len(ids)), tbl: tbl,
		provisionSlots: make(chan struct{}, provisionAtOnce), allProvisioned: make(chan struct{})}
	for i := range f.reps {
		f.reps[i] = simReplica{id: ids[i], auth: "Bearer " + tokens[i]}
	}
	return f
}

// firstError is the first failed request's error, or nil.
func (f *simFleet) firstError() error {
	if p := f.firstErr.Load(); p != nil {
		return *p
	}
	return nil
}
