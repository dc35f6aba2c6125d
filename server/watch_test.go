package server_test

import (
	"context"
	"strings"
	"sync/atomic"
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
// stay and the watch sees them at every look: the watch's kicks do not
// cut the backoff short.
func TestRunBacksOffAFailingPassDespiteNotesWaiting(t *testing.T) {
	sh := newShop(t, server.Options{PassEvery: 2 * time.Second, PollEvery: 5 * time.Millisecond})
	var passes atomic.Int64
	sh.s.OnPassDone(func() { passes.Add(1) })
	ctx, cancel := context.WithCancel(sh.ctx)
	done := make(chan error, 1)
	go func() { done <- sh.s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// Notes of products, then the table gone from under them: every pass
	// fails reading it, and the notes stay.
	sh.exec(`ALTER TABLE shop.products RENAME TO products_away`)
	sh.exec(`INSERT INTO shop.products_away (id, shop_id, name, price_cents) VALUES (gen_random_uuid(), $1, 'apple', 1)`, sh.shopA)
	start := passes.Load()
	time.Sleep(time.Second) // the window over which passes are counted
	if n := passes.Load() - start; n > 3 {
		t.Errorf("%d passes in a second while every pass fails; want the backoff (at most 3)", n)
	}
}
