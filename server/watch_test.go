package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync/server"
)

// A transaction whose notes a pass could not see yet — it had noted its
// keys but not committed when the pass began — is planned once it commits,
// without waiting for PassEvery: after the sequence moved, the watch looks
// for notes to take, and finds them once the writer committed.
func TestWatchFindsNotesCommittedAfterTheSequenceMoved(t *testing.T) {
	t.Parallel()
	sh := newShop(t, server.Options{PassEvery: time.Hour})
	seen, pendingUntil := int64(-1), time.Time{}
	look := func() bool {
		t.Helper()
		due, err := sh.s.WatchOnce(sh.ctx, &seen, &pendingUntil)
		if err != nil {
			t.Fatal(err)
		}
		return due
	}
	look() // the first look: the sequence as it stands
	sh.pass()
	if look() {
		t.Fatal("a pass is due with nothing written")
	}
	tx, err := sh.pool.Begin(sh.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(sh.ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.Exec(sh.ctx, `INSERT INTO shop.products (id, shop_id, name, price_cents) VALUES (gen_random_uuid(), $1, 'late', 1)`, sh.shopA); err != nil {
		t.Fatal(err)
	}
	if !look() {
		t.Fatal("no pass due after a writer noted keys")
	}
	sh.pass() // the pass that look kicked: it cannot see the notes
	if look() {
		t.Fatal("a pass is due again before the writer committed")
	}
	if err := tx.Commit(sh.ctx); err != nil {
		t.Fatal(err)
	}
	if !look() {
		t.Fatal("no pass due once the writer committed the notes the last pass could not see")
	}
	sh.pass()
	if look() {
		t.Fatal("a pass is still due after the notes were taken")
	}
}

// The host's transactions notify nobody: a notifying commit holds
// PostgreSQL's cluster-wide notify lock through its WAL flush, which made
// the host's writes commit one at a time.
func TestTriggersNotifyNobody(t *testing.T) {
	t.Parallel()
	sh := newShop(t, server.Options{})
	rows, err := sh.pool.Query(sh.ctx, `SELECT p.proname, p.prosrc FROM pg_proc p
		JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'public' AND p.proname LIKE 'sync\_%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var name, src string
		if err := rows.Scan(&name, &src); err != nil {
			t.Fatal(err)
		}
		seen++
		if strings.Contains(src, "pg_notify") {
			t.Errorf("function %s notifies:\n%s", name, src)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen == 0 {
		t.Fatal("no engine function found to look at")
	}
}

// A pass that keeps failing backs off, though the notes it cannot take
// stay and the watch sees them at every look: the watch's kicks (every
// PollEvery, 5 ms) do not cut the backoff short. Run does pass, and fail,
// again and again (each failure logged, the first as a warning), and two
// failed passes are never closer than PassEvery, the shortest wait after a
// failure: the watch alone would make them milliseconds apart.
func TestRunBacksOffAFailingPassDespiteNotesWaiting(t *testing.T) {
	t.Parallel()
	const passEvery = 300 * time.Millisecond
	logs := newRecords()
	sh := newShop(t, server.Options{PassEvery: passEvery, PollEvery: 5 * time.Millisecond, Logger: slog.New(logs)})
	listening := make(chan struct{}, 1)
	sh.s.OnListening(func() {
		select {
		case listening <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(sh.ctx)
	done := make(chan error, 1)
	go func() { done <- sh.s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// Listening is what cuts a backoff short; it began before the passes
	// fail, so that it cuts no wait but, at most, the first one's.
	select {
	case <-listening:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not listen within 20 s")
	}
	// Notes of products, then the table gone from under them: every pass
	// fails reading it, and the notes stay.
	sh.exec(`ALTER TABLE shop.products RENAME TO products_away`)
	sh.exec(`INSERT INTO shop.products_away (id, shop_id, name, price_cents) VALUES (gen_random_uuid(), $1, 'apple', 1)`, sh.shopA)

	const fails, want = "planning fails", 5
	logs.await(t, fmt.Sprintf("%d failed passes", want), func() bool { return len(logs.times(fails)) >= want })
	at := logs.times(fails)
	if n := logs.count(slog.LevelWarn, fails); n != 1 {
		t.Errorf("the failing passes were warned of %d times; want once, the others at debug level", n)
	}
	// From the second failure on, no wait was cut short.
	for i := 2; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < passEvery {
			t.Errorf("failed passes %d and %d came %v apart; want the backoff, PassEvery (%v) at least", i, i+1, gap, passEvery)
		}
	}
}

// times lists when the records whose message holds msg were logged, at
// any level, in order.
func (r *records) times(msg string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, rec := range r.all {
		if strings.Contains(rec.Message, msg) {
			out = append(out, rec.Time)
		}
	}
	return out
}

// Stopping Run while the watch looks at the host's writes is a stop, not
// a failure of the watch: nothing is logged at warning level or above.
// (The look is held in PostgreSQL, behind a rename of the sequence it
// reads not yet committed, until Run is stopped.)
func TestStoppingRunWhileTheWatchLooksWarnsOfNothing(t *testing.T) {
	t.Parallel()
	logs := newRecords()
	sh := newShop(t, server.Options{PassEvery: time.Hour, PollEvery: 5 * time.Millisecond, Logger: slog.New(logs)})
	listening := make(chan struct{}, 1)
	sh.s.OnListening(func() {
		select {
		case listening <- struct{}{}:
		default:
		}
	})
	var seq uint32
	if err := sh.pool.QueryRow(sh.ctx, `SELECT 'public.sync_touched_id_seq'::regclass::oid`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(sh.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sh.s.Run(ctx) }()
	select {
	case <-listening:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not listen within 20 s")
	}
	tx, err := sh.pool.Begin(sh.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(sh.ctx) //nolint:errcheck // the rename is never kept
	if _, err := tx.Exec(sh.ctx, `ALTER SEQUENCE public.sync_touched_id_seq RENAME TO sync_touched_id_seq_held`); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		var waiting bool
		if err := sh.pool.QueryRow(sh.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = $1 AND NOT granted)`, seq).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch did not look within 20 s")
		}
		time.Sleep(5 * time.Millisecond) // pg_locks signals nothing
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := tx.Rollback(sh.ctx); err != nil {
		t.Fatal(err)
	}
	for _, level := range []slog.Level{slog.LevelWarn, slog.LevelError} {
		if n := logs.count(level, ""); n != 0 {
			t.Errorf("%d records logged at level %v as Run stopped; want none", n, level)
		}
	}
}
