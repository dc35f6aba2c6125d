package server_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// countCommits counts the COMMITs among statements run.
func countCommits(ran []string) int {
	n := 0
	for _, q := range ran {
		if strings.EqualFold(strings.TrimSpace(q), "commit") {
			n++
		}
	}
	return n
}

// The acknowledgements of many replicas that arrive while one batch of
// them commits are taken together, in one transaction; one that is
// refused (an id never issued) is refused alone, and the others of its
// batch stand.
func TestAcksOfManyReplicasCommitTogether(t *testing.T) {
	t.Parallel()
	sh, trace := tracedShop(t)
	const n = 12
	fakes := make([]*fake, n)
	for i := range fakes {
		fakes[i] = sh.register(sh.shopA)
		fakes[i].sync()
	}
	sh.product(sh.shopA, "tea", 250)
	sh.pass()
	ids := make([]uint64, n)
	for i, f := range fakes {
		m, ok := f.next(5e9)
		if !ok {
			t.Fatalf("replica %d got no message for the new product", i)
		}
		ids[i] = m.Id
	}

	// The first batches (one per transaction allowed at once) wait until
	// every acknowledgement is queued; the rest then go as one batch.
	allQueued := make(chan struct{})
	var mu sync.Mutex
	queued := 0
	sh.s.OnAckQueued(func(int) {
		mu.Lock()
		defer mu.Unlock()
		if queued++; queued == n+1 {
			close(allQueued)
		}
	})
	var sizes []int
	sh.s.OnAckBatch(func(size int) {
		mu.Lock()
		sizes = append(sizes, size)
		mu.Unlock()
		<-allQueued
	})
	trace.take()
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i, f := range fakes {
		wg.Go(func() { errs[i] = sh.s.Endpoint().Ack(context.Background(), f.id, ids[i]) })
	}
	// One more, of an id the server never issued the first replica.
	wg.Go(func() { errs[n] = sh.s.Endpoint().Ack(context.Background(), fakes[0].id, ids[0]+100) })
	wg.Wait()

	for i, err := range errs[:n] {
		if err != nil {
			t.Errorf("ack of replica %d: %v", i, err)
		}
	}
	if !errors.Is(errs[n], server.ErrNotIssued) {
		t.Errorf("ack of an id never issued: %v; want ErrNotIssued", errs[n])
	}
	if commits := countCommits(trace.take()); commits > 3 {
		t.Errorf("%d acknowledgements committed %d times (batches %v); want at most 3", n+1, commits, sizes)
	}
	for i, f := range fakes {
		st := statusOf(t, sh, f.id)
		if st.Queued != 0 {
			t.Errorf("replica %d: %d messages still queued after its acknowledgement", i, st.Queued)
		}
	}
}

// A change that wakes many replicas waiting for their next message has
// their messages built together, in one transaction, not one each, and
// without a statement of each replica's own; and each replica gets the
// change.
func TestAChangeWakingManyReplicasBuildsTheirMessagesTogether(t *testing.T) {
	t.Parallel()
	sh, trace := tracedShop(t)
	const n = 12
	fakes := make([]*fake, n)
	for i := range fakes {
		fakes[i] = sh.register(sh.shopA)
		fakes[i].sync()
	}
	const wait = 30 * time.Second
	nexts := make([]<-chan nextResult, n)
	for i, f := range fakes {
		nexts[i] = nextAsync(sh.ctx, sh.s, f.id, wait)
		waitUntilWaiting(t, sh.s, f.id, nexts[i])
	}
	allQueued := make(chan struct{})
	var mu sync.Mutex
	queued := 0
	sh.s.OnDeltaQueued(func(int) {
		mu.Lock()
		defer mu.Unlock()
		if queued++; queued == n {
			close(allQueued)
		}
	})
	var sizes []int
	sh.s.OnDeltaBatch(func(size int) {
		mu.Lock()
		sizes = append(sizes, size)
		mu.Unlock()
		<-allQueued
	})
	trace.take()
	sh.product(sh.shopA, "tea", 250)
	sh.pass()
	for i, next := range nexts {
		res := <-next
		if res.err != nil || !res.ok {
			t.Fatalf("replica %d: Next returned %v, %v after the change", i, res.ok, res.err)
		}
		fakes[i].apply(res.msg)
		fakes[i].expect("products", "tea")
	}
	mu.Lock()
	defer mu.Unlock()
	stores, reads := 0, 0
	for _, q := range trace.take() {
		if strings.Contains(q, "INSERT INTO public.sync_outbox") {
			stores++
		}
		if strings.Contains(q, "FROM public.sync_replicas r WHERE r.id = $1") {
			reads++
		}
	}
	// A woken replica's state is read by its batch, not by a statement of
	// its own.
	if reads > 0 {
		t.Errorf("the %d woken replicas read their state %d times, one statement each", n, reads)
	}
	if stores > 3 {
		t.Errorf("%d replicas' messages were stored by %d statements, each in a transaction of its own (batches %v); want at most 3", n, stores, sizes)
	}
}

// A long poll woken later than the bound of its statements still gets its
// message: the bound counts from each look, not from the poll's start.
// Before, a poll woken more than 15 seconds in failed. (The register moves
// to another shop, so its next message is a provisioning: no batch of
// deltas builds it.)
func TestALongPollWokenLateGetsItsMessage(t *testing.T) {
	t.Parallel()
	sh, _ := tracedShop(t)
	f := sh.register(sh.shopA)
	sh.product(sh.shopB, "tea", 250)
	sh.pass()
	f.sync()
	const bound = 200 * time.Millisecond
	sh.s.SetPollQueryTimeout(bound)
	next := nextAsync(sh.ctx, sh.s, f.id, 30*time.Second)
	waitUntilWaiting(t, sh.s, f.id, next)
	// Waiting past the bound is the point of this test.
	time.Sleep(2 * bound)
	sh.exec(`UPDATE shop.registers SET shop_id = $1 WHERE id = $2`, sh.shopB, f.id)
	sh.pass()
	res := <-next
	if res.err != nil || !res.ok {
		t.Fatalf("woken after %v (its statements bounded by %v), Next returned %v, %v", 2*bound, bound, res.ok, res.err)
	}
	sh.s.SetPollQueryTimeout(15 * time.Second)
	f.apply(res.msg)
	if err := sh.s.Endpoint().Ack(sh.ctx, f.id, res.msg.Id); err != nil {
		t.Fatal(err)
	}
	f.sync()
	f.expect("products", "tea")
}

// A delta built for many replicas at once never skips a message queued
// for one of them while the batch waited for its row: an upload's
// confirmation (Filed) committed by another transaction that held the
// replica's row is delivered first. Before, the batch locked the rows and
// looked for queued messages in one statement, whose snapshot, taken
// before the wait, missed the confirmation; the delta took the next id,
// and its acknowledgement deleted the confirmation unsent, so the
// replica's rows stayed unconfirmed until it sent them again.
func TestADeltaWaitingForAReplicasRowDeliversWhatWasQueuedMeanwhile(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	ctx := context.Background()
	f := sh.register(sh.shopA)
	f.sync()
	sh.product(sh.shopA, "tea", 250)
	sh.pass()

	// Another transaction holds the replica's row and queues a
	// confirmation, as filing an upload does.
	tx, err := sh.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var filedID uint64
	if err := tx.QueryRow(ctx, `UPDATE sync_replicas SET next_id = next_id + 1 WHERE id = $1 RETURNING next_id - 1`, f.id).Scan(&filedID); err != nil {
		t.Fatal(err)
	}
	body, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: filedID, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Lane: "telemetry", Sequence: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO sync_outbox (replica, id, kind, body) VALUES ($1, $2, 'filed', $3)`, f.id, int64(filedID), body); err != nil {
		t.Fatal(err)
	}

	type result struct {
		msg server.Message
		ok  bool
		err error
	}
	got := make(chan result, 1)
	go func() {
		nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		m, ok, err := sh.s.Endpoint().Next(nctx, f.id, server.Applied{})
		got <- result{m, ok, err}
	}()
	// The poll's build waits for the row.
	for {
		var waiting bool
		if err := sh.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case r := <-got:
			t.Fatalf("Next returned (message %d, %v, %v) while the replica's row was held", r.msg.ID, r.ok, r.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || !r.ok {
		t.Fatalf("Next: %v, %v", r.ok, r.err)
	}
	if r.msg.ID != filedID {
		t.Fatalf("Next handed out message %d while the confirmation %d queued before it was not delivered; acknowledging %d would delete it unsent", r.msg.ID, filedID, r.msg.ID)
	}
}
