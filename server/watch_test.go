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
// without waiting for PassEvery: Run passes again when every transaction
// that was running as the notes appeared has ended.
func TestRunPlansAWriteThatCommitsAfterAPassBegan(t *testing.T) {
	sh := newShop(t, server.Options{PassEvery: time.Hour, PollEvery: 5 * time.Millisecond})
	r := sh.register(sh.shopA)
	// passes hears of each pass Run ran, as it ends, and whether it took
	// the planner's lock (a pass that did not plans nothing).
	passes := make(chan bool, 64)
	var locked bool
	sh.s.OnPassLocked(func() { locked = true })
	sh.s.OnPassDone(func() {
		select {
		case passes <- locked:
		default:
		}
		locked = false
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
	r.next(5 * time.Second) // the provisioning, once Run adopted the register

	tx, err := sh.pool.Begin(sh.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(sh.ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.Exec(sh.ctx, `INSERT INTO shop.products (id, shop_id, name, price_cents) VALUES (gen_random_uuid(), $1, 'late', 1)`, sh.shopA); err != nil {
		t.Fatal(err)
	}
	// The notes are made, uncommitted: the sequence moved, so Run passes;
	// wait for a pass that began after them, and ended — it could not see
	// them.
	for len(passes) > 0 {
		<-passes
	}
	for began := false; !began; {
		select {
		case began = <-passes:
		case <-time.After(5 * time.Second):
			t.Fatal("no pass after the notes were made")
		}
	}
	// A pass may have been under way as the test drained: take the next.
	select {
	case <-passes:
	case <-time.After(5 * time.Second):
		t.Fatal("no second pass after the notes were made")
	}
	if err := tx.Commit(sh.ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r.sync()
		if len(r.names("products")) == 1 {
			return
		}
	}
	t.Errorf("the product committed after a pass began was not planned (PassEvery is an hour): holds %v", r.names("products"))
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
