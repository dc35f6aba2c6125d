package server_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/testenv"
	"github.com/magicsync/magicsync/server"
)

// logicalOptions are the shop's options with capture by logical
// replication.
func logicalOptions() server.Options {
	opts := shopOptions
	opts.Capture = server.CaptureLogical
	return opts
}

// newLogicalShop opens the shop on the server with wal_level=logical, its
// publication made and no trigger installed, and runs the server until
// the test ends. before runs on the pool before the server is opened.
func newLogicalShop(t *testing.T, before func(sh *shop)) *shop {
	t.Helper()
	pool := shopserver.NewLogicalPool(t)
	codecs := shopCodecs(t)
	ctx := context.Background()
	opts := logicalOptions()
	sql, err := server.Publication(codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, sql); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	sh := &shop{t: t, ctx: ctx, pool: pool, codecs: codecs, shopA: uuid.New(), shopB: uuid.New()}
	sh.exec(`INSERT INTO shop.shops VALUES ($1, 'A'), ($2, 'B')`, sh.shopA, sh.shopB)
	if before != nil {
		before(sh)
	}
	if sh.s, err = server.New(ctx, pool, codecs, opts); err != nil {
		t.Fatal(err)
	}
	sh.runServer(t)
	return sh
}

// runServer runs the shop's server until the test ends or stopRun, a new
// one under CaptureLogical when the last was stopped.
func (sh *shop) runServer(t *testing.T) {
	t.Helper()
	if sh.s == nil {
		s, err := server.New(sh.ctx, sh.pool, sh.codecs, logicalOptions())
		if err != nil {
			t.Fatal(err)
		}
		sh.s = s
	}
	runCtx, stop := context.WithCancel(sh.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sh.s.Run(runCtx)
	}()
	sh.stop = func() { stop(); <-done }
	t.Cleanup(sh.stopRun)
}

// stopRun stops the server runServer ran, and forgets it.
func (sh *shop) stopRun() {
	if sh.stop != nil {
		sh.stop()
		sh.stop, sh.s = nil, nil
	}
}

// await takes, applies and acknowledges messages until cond holds, or
// fails the test after a while, saying what never came.
func (f *fake) await(what string, cond func() bool) {
	t := f.sh.t
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("replica %s: %s never came", f.id, what)
		}
		m, ok := f.next(time.Second)
		if !ok {
			continue
		}
		f.apply(m)
		if err := f.sh.s.Endpoint().Ack(f.sh.ctx, f.id, m.Id); err != nil {
			t.Fatal(err)
		}
	}
}

// With capture by logical replication, the host's tables carry no
// trigger, and what it writes reaches a replica all the same: a row
// written before the server first ran, an insert, an update, a delete,
// and a TRUNCATE.
func TestLogicalCaptureCarriesEveryKindOfWriteWithoutTriggers(t *testing.T) {
	t.Parallel()
	var before uuid.UUID
	sh := newLogicalShop(t, func(sh *shop) { before = sh.product(sh.shopA, "written-before", 100) })
	var triggers int
	if err := sh.pool.QueryRow(sh.ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'shop.products'::regclass AND NOT tgisinternal`).Scan(&triggers); err != nil {
		t.Fatal(err)
	}
	if triggers != 0 {
		t.Fatalf("shop.products carries %d triggers under CaptureLogical, want none", triggers)
	}
	f := sh.register(sh.shopA)
	holds := func(names ...string) func() bool {
		return func() bool { return slices.Equal(f.names("products"), names) }
	}
	f.await("the product written before the server ran", holds("written-before"))

	tea := sh.product(sh.shopA, "tea", 250)
	f.await("an inserted product", holds("tea", "written-before"))

	sh.exec(`UPDATE shop.products SET name = 'green tea' WHERE id = $1`, tea)
	f.await("an updated product", holds("green tea", "written-before"))

	sh.exec(`DELETE FROM shop.products WHERE id = $1`, before)
	f.await("a deleted product's removal", holds("green tea"))

	sh.exec(`TRUNCATE shop.products`)
	f.await("a truncated table's removal", holds())
}

// Every row written is planned, however soon after its commit the slot
// hands its change on: PostgreSQL decodes a transaction's commit before
// the transaction shows in the other sessions' snapshots, and a pass that
// read the row in that moment would find it missing and plan nothing, its
// note spent. Products are inserted from eight connections at once, each
// in a transaction of its own and never written again; every one must be
// held by the engine in the end.
func TestEveryRowWrittenIsPlannedHoweverSoonTheSlotHandsItOn(t *testing.T) {
	t.Parallel()
	sh := newLogicalShop(t, nil)
	const writers, each = 8, 150
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			for i := range each {
				// Committed durably, as a host's are: the commit wakes the
				// slot's sender as soon as its WAL is flushed, before the
				// transaction shows (the tests' server commits
				// asynchronously otherwise, and the sender learns late).
				err := pgx.BeginFunc(sh.ctx, sh.pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(sh.ctx, `SET LOCAL synchronous_commit = on`); err != nil {
						return err
					}
					_, err := tx.Exec(sh.ctx, `INSERT INTO shop.products (id, shop_id, name, price_cents) VALUES (gen_random_uuid(), $1, $2, 1)`,
						sh.shopA, fmt.Sprint("item ", i))
					return err
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	sh.pass()
	var held int
	if err := sh.pool.QueryRow(sh.ctx, `SELECT count(*) FROM public.sync_rows WHERE tbl = 'products'`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != writers*each {
		t.Fatalf("the engine holds %d of the %d products written: the changes of %d were spent on a pass that could not see them yet",
			held, writers*each, writers*each-held)
	}
}

// The slot's reader writes the notes of a transaction's changes only once
// other sessions see it committed: while it runs, the reader waits, and
// goes on when it commits.
func TestTheReaderWaitsUntilATransactionShowsCommitted(t *testing.T) {
	t.Parallel()
	sh := newLogicalShop(t, nil)
	tx, err := sh.pool.Begin(sh.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(sh.ctx) //nolint:errcheck // after Commit, a no-op
	var full uint64
	if err := tx.QueryRow(sh.ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&full); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sh.s.AwaitVisible(sh.ctx, uint32(full)) }()
	select {
	case err := <-done:
		t.Fatalf("the reader went on (%v) while transaction %d ran", err, full)
	case <-time.After(200 * time.Millisecond): // nothing signals a wait that goes on
	}
	if err := tx.Commit(sh.ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the reader still waits for transaction %d, committed", full)
	}
}

// Under logical capture the slot's reader kicks the planner when its
// notes commit, and the watch, seeing the same notes, does not kick it
// again: a change written alone costs one pass, not two (one of them
// empty).
func TestAChangeReadFromTheSlotIsPlannedByOnePass(t *testing.T) {
	t.Parallel()
	var passes atomic.Int64
	sh := newLogicalShop(t, nil)
	sh.stopRun()
	opts := logicalOptions()
	opts.PassEvery = time.Hour // no pass but those the changes ask for
	s, err := server.New(sh.ctx, sh.pool, sh.codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	s.OnPassDone(func() { passes.Add(1) })
	sh.s = s
	sh.runServer(t)
	const n = 40
	held := func() (count int) {
		if err := sh.pool.QueryRow(sh.ctx, `SELECT count(*) FROM public.sync_rows WHERE tbl = 'products'`).Scan(&count); err != nil {
			t.Fatal(err)
		}
		return count
	}
	start := held()
	from := passes.Load()
	for i := range n {
		// Committed durably, as a host's are, so that the slot's sender
		// learns of it at once.
		err := pgx.BeginFunc(sh.ctx, sh.pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(sh.ctx, `SET LOCAL synchronous_commit = on;
				INSERT INTO shop.products (id, shop_id, name, price_cents) VALUES (gen_random_uuid(), '`+sh.shopA.String()+`', 'item', 1)`)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for held() < start+i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("product %d was not planned within 10 s", i)
			}
			time.Sleep(time.Millisecond) // nothing signals a pass's commit here
		}
	}
	if got := passes.Load() - from; got > n*9/8 {
		t.Errorf("%d changes written one at a time took %d passes; want about one each (at most %d)", n, got, n*9/8)
	}
}

// New refuses CaptureLogical on a database that lacks what it needs —
// the publication, on a server with wal_level=logical — saying what to
// run.
func TestNewSaysWhatCaptureLogicalLacks(t *testing.T) {
	t.Parallel()
	pool := shopserver.NewLogicalPool(t)
	_, err := server.New(context.Background(), pool, shopCodecs(t), logicalOptions())
	if err == nil {
		t.Fatal("New took CaptureLogical without the publication")
	}
	for _, want := range []string{"publication magicsync lacks", `"shop"."products"`, "server.Publication", "CREATE PUBLICATION"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New's refusal does not say %q:\n%v", want, err)
		}
	}
}

// On a server with wal_level=replica, New refuses CaptureLogical saying
// how to set wal_level, and the way back (CaptureTriggers).
func TestNewSaysWalLevelMustBeLogical(t *testing.T) {
	t.Parallel()
	pool := shopserver.NewPool(t)
	var level string
	if err := pool.QueryRow(context.Background(), `SHOW wal_level`).Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level == "logical" {
		t.Skip("the test binary's server runs wal_level=logical: nothing to refuse")
	}
	_, err := server.New(context.Background(), pool, shopCodecs(t), logicalOptions())
	if err == nil {
		t.Fatal("New took CaptureLogical on a server with wal_level=" + level)
	}
	for _, want := range []string{"wal_level=" + level, "wal_level = logical", "CaptureTriggers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New's refusal does not say %q:\n%v", want, err)
		}
	}
}

// slotKillEnv names the database the child of
// TestHeadOfficeKilledMidTransactionPlansEveryChangeOnce reads the slot
// of, until it kills itself.
const slotKillEnv = "MAGICSYNC_TEST_SLOT_KILL_DATABASE"

// A head office killed (SIGKILL) while it reads a large transaction from
// the slot, some of its changes noted and committed, leaves nothing out
// and nothing twice: the next reads the transaction again from the last
// position confirmed, and every change is planned exactly once.
func TestHeadOfficeKilledMidTransactionPlansEveryChangeOnce(t *testing.T) {
	if url := os.Getenv(slotKillEnv); url != "" {
		slotKillChild(t, url)
		return
	}
	t.Parallel()
	if testing.Short() {
		t.Skip("kills a child process; not under -short")
	}
	const n = 6000 // more than one batch of notes
	sh := newLogicalShop(t, func(sh *shop) {
		sh.exec(`INSERT INTO shop.products (id, shop_id, name, price_cents)
			SELECT gen_random_uuid(), $1, 'p' || i, 100 FROM generate_series(1, $2) i`, sh.shopA, n)
	})
	f := sh.register(sh.shopA)
	f.await("the products", func() bool { return len(f.names("products")) == n })
	sh.stopRun()
	var before int64
	if err := sh.pool.QueryRow(sh.ctx, `SELECT coalesce(max(pos), 0) FROM sync_log`).Scan(&before); err != nil {
		t.Fatal(err)
	}

	// One transaction changes every product's name.
	sh.exec(`UPDATE shop.products SET name = name || '-new'`)

	cmd := exec.Command(os.Args[0], "-test.run", "^TestHeadOfficeKilledMidTransactionPlansEveryChangeOnce$", "-test.count=1")
	cmd.Env = append(os.Environ(), slotKillEnv+"="+sh.pool.Config().ConnString())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child did not die by SIGKILL in the middle of the transaction: %v\n%s", err, out)
	}

	// The child noted part of the transaction (and may have planned it)
	// before it died: the next reads those changes again.
	var left int
	if err := sh.pool.QueryRow(sh.ctx, `SELECT (SELECT count(*) FROM sync_touched WHERE tbl = 'products')
		+ (SELECT count(*) FROM sync_log WHERE tbl = 'products' AND pos > $1)`, before).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left == 0 || left >= n {
		t.Fatalf("the killed head office left %d notes and log entries of the %d changes; want some, not all", left, n)
	}
	s, err := server.New(sh.ctx, sh.pool, sh.codecs, logicalOptions())
	if err != nil {
		t.Fatal(err)
	}
	passed := make(chan struct{}, 1)
	s.OnPassDone(func() {
		select {
		case passed <- struct{}{}:
		default:
		}
	})
	sh.s = s
	sh.runServer(t)
	// Planned once every change was logged and no note is left to plan.
	var logged, keys int
	noted := true
	timeout := time.After(time.Minute)
	for keys < n || noted {
		select {
		case <-passed:
		case <-timeout:
			t.Fatalf("after the kill, the passes logged %d of the %d products changed (notes left: %v)", keys, n, noted)
		}
		if err := sh.pool.QueryRow(sh.ctx, `SELECT count(*), count(DISTINCT key), EXISTS (SELECT 1 FROM sync_touched)
			FROM sync_log WHERE tbl = 'products' AND pos > $1`, before).Scan(&logged, &keys, &noted); err != nil {
			t.Fatal(err)
		}
	}
	if keys != n || logged != n {
		t.Fatalf("after the kill, %d log entries for %d products changed (%d distinct); want each once", logged, n, keys)
	}
	f.await("every product's new name", func() bool {
		names := f.names("products")
		return len(names) == n && !slices.ContainsFunc(names, func(s string) bool { return !strings.HasSuffix(s, "-new") })
	})
}

// slotKillChild reads the slot of the database url names and kills
// itself (SIGKILL) once it committed notes of a transaction still
// streaming.
func slotKillChild(t *testing.T, url string) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(ctx, pool, shopCodecs(t), logicalOptions())
	if err != nil {
		t.Fatal(err)
	}
	s.OnSlotFlushed(func(inTx bool) {
		if inTx {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	})
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_ = s.Run(runCtx)
	t.Fatal("the head office read the slot a minute without a transaction to kill itself in")
}

// Slots names every slot of the engine's in the cluster, its own and one
// a head office removed left behind, with the WAL each holds back.
func TestSlotsNameASlotLeftBehindWithTheWALItHolds(t *testing.T) {
	t.Parallel()
	sh := newLogicalShop(t, nil)
	left := "magicsync_left_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	sh.exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, left)
	for range 3 {
		sh.product(sh.shopA, "tea", 250)
	}
	var database string
	if err := sh.pool.QueryRow(sh.ctx, `SELECT current_database()`).Scan(&database); err != nil {
		t.Fatal(err)
	}
	slots, err := server.Slots(sh.ctx, sh.pool)
	if err != nil {
		t.Fatal(err)
	}
	var own, behind *server.SlotStatus
	for i, sl := range slots {
		switch {
		case sl.Name == left:
			behind = &slots[i]
		case sl.Database == database:
			own = &slots[i]
		}
	}
	if own == nil || !strings.HasPrefix(own.Name, "magicsync_") {
		t.Errorf("Slots lists no slot of the engine's for database %s: %+v", database, slots)
	}
	if behind == nil {
		t.Fatalf("Slots does not list the slot left behind, %s: %+v", left, slots)
	}
	if behind.Active || behind.Database != database || behind.Retained <= 0 || behind.Lost {
		t.Errorf("the slot left behind reads %+v; want it not read, of %s, holding WAL back", *behind, database)
	}
}

// A pass asked for while Run reads the slot plans what was committed
// before it was asked: it waits until Run's reader confirmed as much,
// rather than planning what the slot has not yet noted.
func TestAPassWhileRunReadsTheSlotWaitsForWhatWasCommitted(t *testing.T) {
	t.Parallel()
	sh := newLogicalShop(t, nil)
	var database string
	if err := sh.pool.QueryRow(sh.ctx, `SELECT current_database()`).Scan(&database); err != nil {
		t.Fatal(err)
	}
	// Run's reader reads the slot before the first pass asks.
	for active := false; !active; {
		if err := sh.pool.QueryRow(sh.ctx, `SELECT coalesce(bool_or(active), false) FROM pg_replication_slots WHERE database = $1`, database).Scan(&active); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // nothing signals the reader's start
	}
	for i := range 3 {
		sh.product(sh.shopA, fmt.Sprint("tea ", i), 250)
		var written, confirmed string
		if err := sh.pool.QueryRow(sh.ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&written); err != nil {
			t.Fatal(err)
		}
		sh.pass()
		var behind bool
		if err := sh.pool.QueryRow(sh.ctx, `SELECT confirmed_flush_lsn::text, confirmed_flush_lsn < $2::pg_lsn
			FROM pg_replication_slots WHERE database = $1 AND slot_name LIKE 'magicsync\_%'`, database, written).Scan(&confirmed, &behind); err != nil {
			t.Fatal(err)
		}
		if behind {
			t.Fatalf("a pass returned with the slot confirmed at %s, before %s, where the product was written", confirmed, written)
		}
	}
}

// whatTheCaptureDecides are the package's tests of what the way of
// capture decides — rows' routes and the table options (Follows, Active,
// Retired, generated, unmirrored and replica-owned columns), provisioning,
// digests, settings and rollouts — which
// TestWhatTheCaptureDecidesHoldsUnderLogicalCapture runs again.
var whatTheCaptureDecides = regexp.MustCompile(`^(TestRowsReachTheRightReplicas|` +
	`TestAFollowerIsHeldExactlyWhereTheRowItFollowsIs|TestAFollowerArrivesAfterAndLeavesBeforeTheRowItFollows|` +
	`TestFollowersBeyondOnePassesBatchKeepTheirOrder|TestOnlyRowsTheActiveViewShowsAreHeld|TestARetiredRowGoesToNoReplicaThatLacksIt|` +
	`TestCatalogMessagesLeaveOutGeneratedAndUnmirroredColumns|TestAReplicaOwnedColumnIsNeverSentAndNeedNotExistOnTheServer|` +
	`TestGroupChangeProvisionsAgain|TestLargeDifferenceGoesAsSeveralMessages|TestCommitOrder|TestDigestDisagreementProvisions|` +
	`TestGroupMovedBackDuringProvisioningEndsInTheRightGroup|TestChangeDuringProvisioningSurvivesLogTrim|` +
	`TestGroupChangeWakesWaitingNext|TestBulkMoveProvisionsEveryMovedRegister|` +
	`TestAWishGoesToTheReplicaThatOwnsTheSetting|TestWishesOfAGroupAreThoseOfItsReplicas|TestASettingsDigestThatDisagreesProvisionsAgain|` +
	`TestARolloutFindsEachRegistersRowByAColumnsValue|TestARolloutToAGroupWishesExactlyItsReplicasInOneTransaction)$`)

// The package's tests of what the way of capture decides pass with the
// server capturing by logical replication: this test runs them again so
// (captureVar), on the server with wal_level=logical, four at a time —
// each test's slot has PostgreSQL decode the whole cluster's WAL.
func TestWhatTheCaptureDecidesHoldsUnderLogicalCapture(t *testing.T) {
	if logicalCapture() {
		t.Skip("already the run under logical capture")
	}
	t.Parallel()
	srv, err := pgtest.StartLogical(context.Background())
	if err != nil {
		testenv.Missing(t, err.Error(), "the tests under logical capture")
	}
	testenv.RunAgain(t, testenv.Rerun{
		Env:     []string{captureVar + "=logical", "DATABASE_URL=" + srv.URL()},
		How:     "under logical capture",
		Only:    whatTheCaptureDecides,
		LeftOut: regexp.MustCompile(`^TestWhatTheCaptureDecidesHoldsUnderLogicalCapture$`),
		AtLeast: 21, Parallel: 4,
	})
}
