package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/server"
)

// tracedShop opens a shop over a pool whose statements trace records.
func tracedShop(t *testing.T) (*shop, *statements) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(shopserver.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	trace := &statements{}
	cfg.ConnConfig.Tracer = trace
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return openShop(t, pool, shopCodecs(t)), trace
}

// With Options.AuthCacheFor, a replica calling again and again costs the
// database one reading of its credentials per AuthCacheFor, not one per
// call; and a rotation by this Server takes effect at once: the old secret
// is refused on the very next call.
func TestAuthenticateReadsCredentialsOncePerAuthCacheForAndForgetsThemOnRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sh, trace := tracedShop(t)
	s, err := server.New(ctx, sh.pool, sh.codecs, server.Options{Replicas: shopOptions.Replicas, AuthCacheFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	id := sh.register(sh.shopA).id
	old, err := s.Credentials(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	trace.take()
	for range 50 {
		if err := s.Endpoint().Authenticate(ctx, id, old); err != nil {
			t.Fatal(err)
		}
	}
	if ran := trace.take(); len(ran) != 1 {
		t.Fatalf("50 calls within AuthCacheFor ran %d statements; want 1", len(ran))
	}
	fresh, err := s.Credentials(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Endpoint().Authenticate(ctx, id, old); !errors.Is(err, server.ErrUnauthorized) {
		t.Fatalf("the rotated secret: Authenticate = %v; want ErrUnauthorized at once", err)
	}
	if err := s.Endpoint().Authenticate(ctx, id, fresh); err != nil {
		t.Fatalf("the new secret: %v", err)
	}
	// With a negative AuthCacheFor, every call reads them.
	uncached, err := server.New(ctx, sh.pool, sh.codecs, server.Options{Replicas: shopOptions.Replicas, AuthCacheFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	trace.take()
	for range 3 {
		if err := uncached.Endpoint().Authenticate(ctx, id, fresh); err != nil {
			t.Fatal(err)
		}
	}
	if ran := trace.take(); len(ran) != 3 {
		t.Fatalf("3 calls with a negative AuthCacheFor ran %d statements; want 3", len(ran))
	}
}

// A secret issued anew by one process stops the old one working in the
// other processes serving the same database as soon as their Run hears of
// it, not only once their cache of credentials expires.
func TestARotationInOneProcessReachesTheOthersCaches(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sh, _ := tracedShop(t)
	id := sh.register(sh.shopA).id
	old, err := sh.s.Credentials(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	other, err := server.New(ctx, sh.pool, sh.codecs, server.Options{Replicas: shopOptions.Replicas, AuthCacheFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	listening := make(chan struct{}, 1)
	other.OnListening(func() {
		select {
		case listening <- struct{}{}:
		default:
		}
	})
	done := make(chan error, 1)
	go func() { done <- other.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-listening
	if err := other.Endpoint().Authenticate(ctx, id, old); err != nil {
		t.Fatal(err) // now cached, for an hour
	}
	if _, err := sh.s.Credentials(ctx, id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := other.Endpoint().Authenticate(ctx, id, old)
		if errors.Is(err, server.ErrUnauthorized) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("10s after the rotation in another process, the old secret still works here (cached for an hour)")
		}
		time.Sleep(5 * time.Millisecond) // the notification has no signal here but its effect
	}
}

// A replica polling again and again — each newer long-poll replacing the
// older — commits its poll at most once a second: the others only read.
// Before, every poll committed an UPDATE, and waited for the disk.
func TestPollsOfAReplicaCommitAtMostOnceASecond(t *testing.T) {
	t.Parallel()
	sh, trace := tracedShop(t)
	id := sh.register(sh.shopA).id
	settleCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Past its provisioning, nothing is queued for it.
	for {
		ctx, stop := context.WithTimeout(settleCtx, 50*time.Millisecond)
		m, ok, err := sh.s.Endpoint().Next(ctx, id, server.Applied{})
		stop()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if err := sh.s.Endpoint().Ack(settleCtx, id, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	trace.take()
	start := time.Now()
	for range 30 {
		ctx, stop := context.WithTimeout(settleCtx, 20*time.Millisecond)
		if _, _, err := sh.s.Endpoint().Next(ctx, id, server.Applied{}); err != nil {
			t.Fatal(err)
		}
		stop()
	}
	elapsed := time.Since(start)
	updates := 0
	for _, q := range trace.take() {
		if strings.Contains(q, "SET last_seen") {
			updates++
		}
	}
	if most := int(elapsed/time.Second) + 1; updates > most {
		t.Fatalf("30 polls in %v committed %d updates of the replica's row; want at most %d", elapsed, updates, most)
	}
}

// The polls of many replicas are written together, at most once a second
// for all of them: an idle fleet's polls cost no commit each. Before, each
// replica's poll committed an UPDATE of its own row (once a second each).
func TestPollsOfManyReplicasAreWrittenTogether(t *testing.T) {
	t.Parallel()
	sh, trace := tracedShop(t)
	ctx := context.Background()
	const n = 10
	fakes := make([]*fake, n)
	for i := range fakes {
		fakes[i] = sh.register(sh.shopA)
		fakes[i].sync()
	}
	trace.take()
	start := time.Now()
	var lastRound time.Time
	for range 3 {
		lastRound = time.Now()
		for _, f := range fakes {
			pctx, stop := context.WithTimeout(ctx, 5*time.Millisecond)
			if _, _, err := sh.s.Endpoint().Next(pctx, f.id, server.Applied{}); err != nil {
				t.Fatal(err)
			}
			stop()
		}
	}
	elapsed := time.Since(start)
	writes := 0
	for _, q := range trace.take() {
		if strings.Contains(q, "SET last_seen") {
			writes++
		}
	}
	if most := int(elapsed/time.Second) + 1; writes > most {
		t.Fatalf("%d polls of %d replicas in %v wrote the polls %d times; want at most %d", 3*n, n, elapsed, writes, most)
	}
	// What Status shows is written first: every replica's poll of the
	// last round, or one written less than a second before it (a poll
	// written is not written again for half its window, a second at
	// least). Not Online: a loaded machine can outlast the 4 s a replica
	// with a 5 ms window is online for before Status reads.
	for i, f := range fakes {
		// The database's clock and the test's are the same machine's.
		if st := statusOf(t, sh, f.id); st.LastSeen.Before(lastRound.Add(-time.Second)) {
			t.Errorf("replica %d polled at %v or later, yet Status says it was last seen %v", i, lastRound, st.LastSeen)
		}
	}
}

// Writing the polls seen waits for a replica's row that another
// transaction holds, and then writes it: a busy replica, its row locked by
// one acknowledgement or build after another, is shown online all the
// same. (Writing polls locks the rows in id order, as every statement that
// locks many replicas' rows does, so the wait never deadlocks.)
func TestAPollIsWrittenOnceItsRowIsFree(t *testing.T) {
	t.Parallel()
	sh, _ := tracedShop(t)
	ctx := context.Background()
	f := sh.register(sh.shopA)
	f.sync()
	seen0 := statusOf(t, sh, f.id).LastSeen // every poll so far written

	tx, err := sh.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT 1 FROM public.sync_replicas WHERE id = $1 FOR UPDATE`, f.id); err != nil {
		t.Fatal(err)
	}
	sh.s.ForgetPollsWritten()
	pctx, stop := context.WithTimeout(ctx, 20*time.Millisecond)
	_, _, err = sh.s.Endpoint().Next(pctx, f.id, server.Applied{})
	stop()
	if err != nil {
		t.Fatal(err)
	}
	statused := make(chan error, 1)
	go func() {
		_, err := sh.s.Status(ctx)
		statused <- err
	}()
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-statused; err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, sh, f.id); !st.LastSeen.After(seen0) {
		t.Errorf("the poll made while its row was held was never written: last seen %v, before the poll %v", st.LastSeen, seen0)
	}
}

// A replica that polls again soon after its poll was written is not
// written again until half its window passed (10 s at most): a fleet
// taking a broadcast, each replica polling again as soon as its message
// came, writes no polls. The polls here have a window of 30 s, fresh for
// 10 s, and come more than the floor of a second after the first: the
// statements are counted, and a machine slow enough to take 10 s over
// four polls fails the test, saying so, rather than skip it.
func TestAPollSoonAfterTheLastWrittenIsNotWrittenAgain(t *testing.T) {
	t.Parallel()
	const window, fresh = 30 * time.Second, 10 * time.Second
	sh, trace := tracedShop(t)
	ctx := context.Background()
	f := sh.register(sh.shopA)
	f.sync()
	statusOf(t, sh, f.id) // writes the polls of the sync
	sh.s.ForgetPollsWritten()
	trace.take()
	poll := func() {
		pctx, stop := context.WithTimeout(ctx, window)
		defer stop()
		go func() {
			for !sh.s.WaitingForChanges(f.id) {
				time.Sleep(time.Millisecond)
			}
			stop()
		}()
		if _, _, err := sh.s.Endpoint().Next(pctx, f.id, server.Applied{}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now() // no later than the first poll
	poll()
	statusOf(t, sh, f.id) // writes the first
	if n := countPollWrites(trace.take()); n != 1 {
		t.Fatalf("the first poll was written %d times; want once", n)
	}
	// Past the second a poll stays fresh whatever its window: only the
	// window keeps the next ones from being written.
	time.Sleep(time.Until(start.Add(1500 * time.Millisecond)))
	for range 3 {
		poll()
	}
	statusOf(t, sh, f.id)
	if took := time.Since(start); took >= fresh {
		t.Fatalf("four polls took %v, beyond the %v a poll written stays fresh: too slow a machine to tell whether they were written again", took, fresh)
	}
	if n := countPollWrites(trace.take()); n != 0 {
		t.Fatalf("polls with a %v window, within %v of the last written, were written again (%d writes)", window, fresh, n)
	}
}

// countPollWrites counts the statements that write polls among ran.
func countPollWrites(ran []string) int {
	n := 0
	for _, q := range ran {
		if strings.Contains(q, "SET last_seen") {
			n++
		}
	}
	return n
}
