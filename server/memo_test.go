package server_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/server"
)

// simRep is a replica as httpsync's client plays it: each poll says the
// last message it applied and that message's SHA-256; what comes is
// acknowledged, and the next poll says it.
type simRep struct {
	id      uuid.UUID
	applied uint64
	sum     []byte
}

// poll asks s for the next message, waiting up to wait.
func (r *simRep) poll(ctx context.Context, s *server.Server, wait time.Duration) (server.Message, bool, error) {
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return s.Endpoint().Next(pctx, r.id, server.Applied{ID: r.applied, Sum: r.sum})
}

// took acknowledges m through s and notes it applied.
func (r *simRep) took(ctx context.Context, s *server.Server, m server.Message) error {
	if err := s.Endpoint().Ack(ctx, r.id, m.ID); err != nil {
		return err
	}
	r.applied, r.sum = m.ID, sumOf(m.Body)
	return nil
}

// settleOn polls (through each server in turn), acknowledges (through the
// next) and applies until a poll finds nothing due.
func (r *simRep) settleOn(ctx context.Context, servers ...*server.Server) error {
	for i := 0; ; i++ {
		if i > 1000 {
			return fmt.Errorf("replica %s does not settle", r.id)
		}
		m, ok, err := r.poll(ctx, servers[i%len(servers)], 300*time.Millisecond)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if err := r.took(ctx, servers[(i+1)%len(servers)], m); err != nil {
			return err
		}
	}
}

// running runs s until the test ends, and returns once its listener has
// heard its own heartbeat (what it remembers of the replicas is trusted
// from then on). listened receives each time the listener LISTENs.
func running(t *testing.T, s *server.Server) (listened <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	heard := make(chan struct{}, 1)
	l := make(chan struct{}, 16)
	s.OnHeartbeat(func() {
		select {
		case heard <- struct{}{}:
		default:
		}
	})
	s.OnListening(func() {
		select {
		case l <- struct{}{}:
		default:
		}
	})
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case <-heard:
	case <-time.After(30 * time.Second):
		t.Fatal("Run's listener never heard its heartbeat")
	}
	<-l // the first LISTEN, before the heartbeat
	return l
}

// heardAgain waits for s's listener to LISTEN again (after its connection
// was closed) and to hear its heartbeat.
func heardAgain(t *testing.T, listened <-chan struct{}) {
	t.Helper()
	select {
	case <-listened:
	case <-time.After(30 * time.Second):
		t.Fatal("Run's listener did not listen again")
	}
}

// restartDatabase closes every connection to the test's database but the
// caller's, as a restart of PostgreSQL (or its restore from a backup)
// does.
func restartDatabase(t *testing.T, sh *shop) {
	t.Helper()
	sh.exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	// A restarted database leaves the pool's idle connections dead, and
	// pgxpool pings only those idle for a second: the first call on one
	// would fail. Its connections are made anew, as after a real restart
	// once the pool has noticed.
	sh.pool.Reset()
}

// isRunsOwn reports whether a statement is Run's background work at its
// own rate, whatever the fleet: the watch of the host's writes and the
// listener's heartbeat.
func isRunsOwn(sql string) bool {
	return strings.Contains(sql, "sync_touched_id_seq") || strings.Contains(sql, "EXISTS (SELECT 1 FROM public.sync_touched)") ||
		strings.Contains(sql, "sync_replicas'::regclass")
}

// isPlanning reports whether a statement is a pass's own (the planning of
// the keys written, once per change whatever the fleet) or the test's
// write of the change.
func isPlanning(sql string) bool {
	for _, s := range []string{"sync_touched", "sync_rows", "sync_digests", "sync_groups g SET head", "FROM public.sync_groups WHERE id = ANY",
		"pg_try_advisory_xact_lock", "INSERT INTO shop.", "SELECT pg_notify($1, $2)"} {
		if strings.Contains(sql, s) {
			return true
		}
	}
	return false
}

// A change reaching a fleet of 500 replicas, each polling again once it
// acknowledged the message (as httpsync's client does), costs the database
// at most a quarter of a statement per delivery, besides the pass that
// plans the change (once, whatever the fleet): the poll after the
// acknowledgement says what this process issued and knows acknowledged,
// and parks without reading the replica's state; the builds and the
// acknowledgements go in batches. Before, every such poll read the
// replica's state (a statement per delivery at least). About 0.17 here
// (some 7 batches of acknowledgements and 4 of builds); the batches
// are smaller, and more, the more slowly the fleet's acknowledgements
// arrive: 0.2 under the race detector on a loaded machine.
func TestADeliveryToAFleetCostsAQuarterOfAStatement(t *testing.T) {
	t.Parallel()
	sh, trace := tracedShop(t)
	running(t, sh.s)
	fleetDeliveryCost(t, sh, trace, 0.25, sh.s)
}

// With two processes behind a balancer, each poll of a replica going to
// the other process than the one that answered its last, a delivery costs
// less than half a statement: that process knows nothing of the message
// the other issued, and reads the replica's state — in one statement with
// the other polls arriving meanwhile. Before, each such poll read alone (a
// statement per delivery at least; 1.5 where the acknowledgement came with
// the poll). The batches are smaller than with one process (each takes
// half the fleet), and on a loaded machine smaller still: about 0.2 a
// delivery here, 0.38 under load.
func TestADeliveryThroughTwoProcessesInTurnCostsLessThanHalfAStatement(t *testing.T) {
	t.Parallel()
	sh, trace := tracedShop(t)
	s2 := twoServers(t, sh, shopOptions)
	running(t, sh.s)
	running(t, s2)
	fleetDeliveryCost(t, sh, trace, 0.45, sh.s, s2)
}

// fleetDeliveryCost parks a fleet of 500 replicas in long polls, their
// polls and acknowledgements going to servers in turn, writes a change
// for all of them, and fails the test if the deliveries cost more than
// most statements each, besides the planning.
func fleetDeliveryCost(t *testing.T, sh *shop, trace *statements, most float64, servers ...*server.Server) {
	t.Helper()
	const n = 500
	ctx, cancel := context.WithCancel(sh.ctx)
	defer cancel()
	reps := make([]*simRep, n)
	for i := range reps {
		reps[i] = &simRep{id: sh.register(sh.shopA).id}
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, 16) // provisionings at once
	settled := make(chan error, n)
	for _, r := range reps {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			settled <- r.settleOn(ctx, servers...)
		})
	}
	wg.Wait()
	for range n {
		if err := <-settled; err != nil {
			t.Fatal(err)
		}
	}
	// Parked in long polls; each message acknowledged, then polled again,
	// the poll after a message through the next server.
	var got atomic.Int64
	errs := make(chan error, n)
	for _, r := range reps {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				m, ok, err := r.poll(ctx, servers[i%len(servers)], time.Minute)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				if !ok {
					continue
				}
				if err := r.took(ctx, servers[(i+1)%len(servers)], m); err != nil {
					errs <- err
					return
				}
				got.Add(1)
			}
		})
	}
	defer wg.Wait()
	defer cancel()
	allParked := func(want int64) bool {
		if got.Load() < want {
			return false
		}
		for _, r := range reps {
			if !slices.ContainsFunc(servers, func(s *server.Server) bool { return s.WaitingForChanges(r.id) }) {
				return false
			}
		}
		return true
	}
	waitUntil(t, errs, 30*time.Second, "the fleet parked", func() bool { return allParked(0) })
	trace.take()
	sh.product(sh.shopA, "apple", 1)
	waitUntil(t, errs, 60*time.Second, "every replica took the change and parked again", func() bool { return allParked(n) })
	var counted []string
	for _, q := range trace.take() {
		if !isRunsOwn(q) && !isPlanning(q) {
			counted = append(counted, q)
		}
	}
	t.Logf("%d deliveries cost %d statements besides the planning, %.3f each", n, len(counted), float64(len(counted))/n)
	if per := float64(len(counted)) / n; per > most {
		t.Fatalf("%d deliveries cost %d statements, %.2f each; want at most %.2f. The most frequent:\n%s", n, len(counted), per, most, mostFrequent(counted, 40))
	}
}

// waitUntil waits for cond, failing the test after d or on an error.
func waitUntil(t *testing.T, errs <-chan error, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v passed, and not yet: %s", d, what)
		}
		time.Sleep(2 * time.Millisecond) // no signal but the waiters' state
	}
}

// mostFrequent lists the k statements most often run among ran.
func mostFrequent(ran []string, k int) string {
	count := map[string]int{}
	for _, q := range ran {
		count[q]++
	}
	keys := make([]string, 0, len(count))
	for q := range count {
		keys = append(keys, q)
	}
	slices.SortFunc(keys, func(a, b string) int { return count[b] - count[a] })
	var b strings.Builder
	for _, q := range keys[:min(k, len(keys))] {
		fmt.Fprintf(&b, "%5d  %.160s\n", count[q], strings.Join(strings.Fields(q), " "))
	}
	return b.String()
}

// twoServers opens a second Server over the shop's database, with a pool
// of its own, as a second process would.
func twoServers(t *testing.T, sh *shop, opts server.Options) *server.Server {
	t.Helper()
	pool2, err := pgxpool.NewWithConfig(sh.ctx, sh.pool.Config().Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool2.Close)
	s2, err := server.New(sh.ctx, pool2, sh.codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s2
}

// Two processes serve one replica, its polls and acknowledgements going to
// either in turn. A message one issued whose answer was lost (the replica
// never saw it) is handed out by the other at the replica's next poll, the
// same message under the same id, at once — not once the long-poll window
// ran out, though the other remembered the replica as having nothing due.
func TestAMessageIssuedByOneProcessAndLostIsDeliveredByTheOtherAtOnce(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	ctx := sh.ctx
	s1 := sh.s
	s2 := twoServers(t, sh, shopOptions)
	running(t, s1)
	running(t, s2)
	r := &simRep{id: sh.register(sh.shopA).id}
	sh.product(sh.shopA, "pear", 1)
	if err := r.settleOn(ctx, s1, s2); err != nil {
		t.Fatal(err)
	}
	// Both have served the replica's word as it stands, and remember it
	// with nothing due.
	for _, s := range []*server.Server{s1, s2, s1, s2} {
		if _, ok, err := r.poll(ctx, s, 100*time.Millisecond); err != nil || ok {
			t.Fatalf("a settled replica's poll: ok %v, %v", ok, err)
		}
	}
	// A long poll on s1 takes the change; its answer never reaches the
	// replica.
	type answer struct {
		m   server.Message
		ok  bool
		err error
	}
	lost := make(chan answer, 1)
	go func() {
		m, ok, err := r.poll(ctx, s1, time.Minute)
		lost <- answer{m, ok, err}
	}()
	waitUntil(t, nil, 30*time.Second, "the poll on s1 parked", func() bool { return s1.WaitingForChanges(r.id) })
	sh.product(sh.shopA, "apple", 2)
	a := <-lost
	if a.err != nil || !a.ok {
		t.Fatalf("the poll on s1: ok %v, %v", a.ok, a.err)
	}
	// The replica asks s2, saying what it applied before.
	start := time.Now()
	m, ok, err := r.poll(ctx, s2, time.Minute)
	took := time.Since(start)
	if err != nil || !ok {
		t.Fatalf("the poll on s2 after s1's answer was lost: ok %v, %v (after %v)", ok, err, took)
	}
	if m.ID != a.m.ID || string(m.Body) != string(a.m.Body) {
		t.Fatalf("s2 handed out message %d; s1 issued %d (same bytes: %v)", m.ID, a.m.ID, string(m.Body) == string(a.m.Body))
	}
	if took > 10*time.Second {
		t.Fatalf("s2 handed out the lost message after %v: it waited on what it remembered", took)
	}
	if err := r.took(ctx, s2, m); err != nil {
		t.Fatal(err)
	}
	// And on: s1 takes the word of the message s2 handed out.
	if _, ok, err := r.poll(ctx, s1, 100*time.Millisecond); err != nil || ok {
		t.Fatalf("the settled replica's poll on s1: ok %v, %v", ok, err)
	}
}

// While Run's listener hears, a known replica's credentials are read once,
// not once per AuthCacheFor, and an unknown replica's still once per
// AuthCacheFor (a replica added to the host's table is found); a rotation
// in another process refuses the old secret here once Run hears of it; and
// a listener whose connection closed forgets every credential read.
func TestCredentialsAreKeptWhileRunHearsAndForgottenWhenItStops(t *testing.T) {
	t.Parallel()
	const cacheFor = 20 * time.Millisecond
	sh, trace := tracedShop(t)
	ctx := sh.ctx
	opts := server.Options{Replicas: shopOptions.Replicas, AuthCacheFor: cacheFor}
	s, err := server.New(ctx, sh.pool, sh.codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	id := sh.register(sh.shopA).id
	// Issued before s listens: the rotation's notification is not heard.
	old, err := sh.s.Credentials(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	listened := running(t, s)
	unknown := uuid.New()
	// The readings of credentials the calls cost.
	count := func(calls int, who uuid.UUID, secret string) int {
		t.Helper()
		trace.take()
		for range calls {
			err := s.Endpoint().Authenticate(ctx, who, secret)
			if who == id && err != nil {
				t.Fatal(err)
			}
			time.Sleep(cacheFor) // time passing, beyond AuthCacheFor each call
		}
		n := 0
		for _, q := range trace.take() {
			if strings.Contains(q, "SELECT secret FROM") {
				n++
			}
		}
		return n
	}
	count(1, id, old)
	if n := count(5, id, old); n != 0 {
		t.Errorf("5 calls of a known replica, each past AuthCacheFor, read its credentials %d times; want none while Run hears", n)
	}
	if n := count(5, unknown, "x"); n < 4 {
		t.Errorf("5 calls of an unknown replica, each past AuthCacheFor, read %d times; want one each (a replica added is found)", n)
	}
	// A rotation in another process (sh.s) is heard.
	fresh, err := sh.s.Credentials(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, nil, 10*time.Second, "the old secret refused after a rotation elsewhere", func() bool {
		return errors.Is(s.Endpoint().Authenticate(ctx, id, old), server.ErrUnauthorized)
	})
	if err := s.Endpoint().Authenticate(ctx, id, fresh); err != nil {
		t.Fatal(err)
	}
	// The listener's connection closes (the database restarted): what was
	// read is forgotten, and read again at the next call.
	restartDatabase(t, sh)
	heardAgain(t, listened)
	if n := count(1, id, fresh); n != 1 {
		t.Errorf("the first call after the listener's connection closed read the credentials %d times; want once", n)
	}
}

// engineRow is what the engine records of a replica that a restore from an
// older backup takes back.
type engineRow struct {
	nextID, acked, lastApplied, lastDown int64
	grps, acks, sents                    []int64
}

// backup reads what the engine records of a replica now.
func backup(t *testing.T, sh *shop, id uuid.UUID) engineRow {
	t.Helper()
	var b engineRow
	err := sh.pool.QueryRow(sh.ctx, `SELECT next_id, acked, last_applied, last_down,
			(SELECT array_agg(grp ORDER BY grp) FROM public.sync_memberships WHERE replica = $1),
			(SELECT array_agg(acked_pos ORDER BY grp) FROM public.sync_memberships WHERE replica = $1),
			(SELECT array_agg(sent_pos ORDER BY grp) FROM public.sync_memberships WHERE replica = $1)
		FROM public.sync_replicas WHERE id = $1`, id).Scan(&b.nextID, &b.acked, &b.lastApplied, &b.lastDown, &b.grps, &b.acks, &b.sents)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// restore puts back what backup read, as a restore from that backup would.
func (b engineRow) restore(t *testing.T, sh *shop, id uuid.UUID) {
	t.Helper()
	sh.exec(`UPDATE public.sync_replicas SET next_id = $2, acked = $3, last_applied = $4, last_down = $5 WHERE id = $1`,
		id, b.nextID, b.acked, b.lastApplied, b.lastDown)
	sh.exec(`UPDATE public.sync_memberships m SET acked_pos = u.a, sent_pos = u.s
		FROM unnest($2::bigint[], $3::bigint[], $4::bigint[]) u(g, a, s) WHERE m.replica = $1 AND m.grp = u.g`, id, b.grps, b.acks, b.sents)
	sh.exec(`DELETE FROM public.sync_issued WHERE replica = $1 AND id >= $2`, id, b.nextID)
	sh.exec(`DELETE FROM public.sync_outbox WHERE replica = $1 AND id >= $2`, id, b.nextID)
}

// A database restored from an older backup while the process runs is
// detected from the replica's word at its next poll, though the process
// remembered that word as the last message it issued: a restore closes the
// connections (the listener's too), and a listener that stops hearing
// forgets. Restored without closing them (the engine's rows put back in
// place), it is detected at the replica's next message: the build finds
// the replica's ids behind what the process issued, fails the poll, and
// the replica's next poll is judged against the database.
func TestARestoreIsDetectedThoughTheProcessRemembersTheReplica(t *testing.T) {
	t.Parallel()
	for _, closed := range []bool{true, false} {
		t.Run(fmt.Sprintf("connections closed %v", closed), func(t *testing.T) {
			t.Parallel()
			sh := newShop(t, shopOptions)
			ctx := sh.ctx
			listened := running(t, sh.s)
			r := &simRep{id: sh.register(sh.shopA).id}
			if err := r.settleOn(ctx, sh.s); err != nil {
				t.Fatal(err)
			}
			before := backup(t, sh, r.id)
			sh.product(sh.shopA, "apple", 1)
			m, ok, err := r.poll(ctx, sh.s, 30*time.Second)
			if err != nil || !ok {
				t.Fatalf("the change: ok %v, %v", ok, err)
			}
			if err := r.took(ctx, sh.s, m); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := r.poll(ctx, sh.s, 100*time.Millisecond); err != nil || ok {
				t.Fatalf("the settled replica's poll: ok %v, %v", ok, err)
			}
			before.restore(t, sh, r.id)
			if closed {
				restartDatabase(t, sh)
				heardAgain(t, listened)
			} else {
				sh.product(sh.shopA, "pear", 2)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				_, _, err := r.poll(ctx, sh.s, 200*time.Millisecond)
				if st := statusOf(t, sh, r.id); st.Provisioning && strings.Contains(st.ProvisionReason, "restored from an older backup") {
					return
				}
				if err != nil {
					t.Logf("a poll failed, as a replica sees a retry: %v", err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("30s after the restore, the replica's word (message %d) is not judged: status %+v", r.applied, statusOf(t, sh, r.id))
				}
			}
		})
	}
}
