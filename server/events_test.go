package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// eventsAfter reads every event after pos, a page of limit at a time,
// and returns them and the position after the last.
func eventsAfter(t *testing.T, s *server.Server, pos server.EventPosition, limit int) ([]server.Event, server.EventPosition) {
	t.Helper()
	var all []server.Event
	for range 1000 {
		evs, next, err := s.Events(context.Background(), pos, limit)
		if err != nil {
			t.Fatalf("Events(%q, %d): %v", pos, limit, err)
		}
		if next == "" {
			t.Fatalf("Events(%q, %d) returned an empty position", pos, limit)
		}
		all, pos = append(all, evs...), next
		if len(evs) < limit {
			return all, pos
		}
	}
	t.Fatal("Events never ends")
	return nil, ""
}

// positionNow is the position of now.
func positionNow(t *testing.T, s *server.Server) server.EventPosition {
	t.Helper()
	pos, err := s.EventPositionNow(context.Background(), nil)
	if err != nil || pos == "" {
		t.Fatalf("EventPositionNow: %q, %v", pos, err)
	}
	return pos
}

// kinds lists the events' kinds.
func kinds(evs []server.Event) []server.EventKind {
	out := make([]server.EventKind, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

// Each kind the engine writes is reported, with what it names: a
// provisioning ended, rows filed (by table, with their keys), a wish
// answered, a replica come online and gone offline — the last two once
// each, though two servers announce them.
func TestEventsReportEachKind(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	start := positionNow(t, w.s)
	r := w.register() // provisioned
	row := w.setting(r, "footer", "Thank you", time.Now())
	row.Value = "Merci"
	wished := w.desire(row, "")
	w.pass()
	w.drain(r)
	w.answer(r, wished, syncpb.WishState_WISH_STATE_WAITING, "the printer is off")

	other, err := server.New(w.ctx, w.pool, w.codecs, server.Options{Replicas: "shop.registers(id)"})
	if err != nil {
		t.Fatal(err)
	}
	// Both servers announce, four times each, at once.
	announce := func() {
		t.Helper()
		errs := make(chan error, 8)
		for i := range 8 {
			s := []*server.Server{w.s, other}[i%2]
			go func() { errs <- s.AnnouncePresence(w.ctx) }()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	w.exec(`UPDATE sync_replicas SET last_poll = now(), poll_window = interval '10 seconds' WHERE id = $1`, r)
	announce()
	w.exec(`UPDATE sync_replicas SET last_poll = now() - interval '1 hour' WHERE id = $1`, r)
	announce()

	evs, _ := eventsAfter(t, w.s, start, 100)
	want := []server.EventKind{server.Provisioned, server.RecordsFiled, server.WishAnswered, server.ReplicaOnline, server.ReplicaOffline}
	if fmt.Sprint(kinds(evs)) != fmt.Sprint(want) {
		t.Fatalf("the events are %v, want %v", kinds(evs), want)
	}
	ids := map[int64]bool{}
	for _, e := range evs {
		if e.Replica != r || e.At.IsZero() || ids[e.ID] || e.Resent {
			t.Errorf("event %+v: want replica %s, a time, an id of its own, not resent", e, r)
		}
		ids[e.ID] = true
	}
	key := w.key(row)
	if f := evs[1]; f.Table != "settings" || len(f.Keys) != 1 || f.Keys[0] != key {
		t.Errorf("the rows filed read %+v, want table settings and key %v", f, key)
	}
	if a := evs[2]; a.Table != "settings" || len(a.Keys) != 1 || a.Keys[0] != key || a.Wish != wished.Number || a.State != server.WishWaiting {
		t.Errorf("the answer reads %+v, want the wish %d of key %v, waiting", a, wished.Number, key)
	}
	if got := server.RecordsFiled.String(); got != "records filed" {
		t.Errorf("RecordsFiled reads %q", got)
	}
	if got := server.CommandAnswered.String(); got != "command answered" {
		t.Errorf("CommandAnswered reads %q", got)
	}
}

// rowQuerier is what a pool and a transaction have in common.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// insertEvent writes an event as the engine does, through q, and returns
// its id.
func insertEvent(t *testing.T, q rowQuerier, table string) int64 {
	t.Helper()
	var id int64
	if err := q.QueryRow(context.Background(), `INSERT INTO sync_events (kind, replica, tbl) VALUES (1, $1, $2) RETURNING id`,
		uuid.Nil, table).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// tables lists the events' tables.
func tables(evs []server.Event) string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Table)
	}
	return strings.Join(out, ",")
}

// A transaction that drew its event's id first and commits after another
// is still reported — after the other, once it commits — where reading by
// id past the last would skip it; and a read paged within the other's
// events finishes them before it moves on.
func TestEventsFindATransactionThatCommitsAfterALaterOne(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	ctx := sh.ctx
	pos := positionNow(t, sh.s)

	early, err := sh.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	earlyID := insertEvent(t, early, "early")

	late, err := sh.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	lateID := insertEvent(t, late, "late1")
	insertEvent(t, late, "late2")
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if earlyID >= lateID {
		t.Fatalf("the early transaction's id %d is not below the late one's %d", earlyID, lateID)
	}

	// A page of one, while the early transaction is still open.
	evs, pos, err := sh.s.Events(ctx, pos, 1)
	if err != nil || tables(evs) != "late1" {
		t.Fatalf("the first page reads %q, %v; want late1", tables(evs), err)
	}
	if err := early.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	evs, pos, err = sh.s.Events(ctx, pos, 1)
	if err != nil || tables(evs) != "late2" {
		t.Fatalf("the second page reads %q, %v; want late2", tables(evs), err)
	}
	rest, _ := eventsAfter(t, sh.s, pos, 10)
	if tables(rest) != "early" {
		t.Fatalf("after the late transaction's events come %q, want the early one's", tables(rest))
	}
}

// A host that stored a position resumes from it after a restart — a new
// server on the same database — with every event it had not read, once,
// in order: those filed before the restart and after.
func TestEventsResumeFromAPositionAfterARestartWithoutGaps(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	pos := positionNow(t, sh.s)
	var receipts []uuid.UUID
	file := func() {
		t.Helper()
		id := uuid.New()
		receipts = append(receipts, id)
		rec := Receipt{RegisterID: r.id, ID: id, TotalCents: 100, ChangedAt: time.Now().UTC().Truncate(time.Microsecond)}
		if err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, rec)}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		file()
	}
	read, pos, err := sh.s.Events(sh.ctx, pos, 2)
	if err != nil || len(read) != 2 {
		t.Fatalf("the first read: %d events, %v", len(read), err)
	}

	// The restart: a new server; the old one is gone.
	restarted, err := server.New(sh.ctx, sh.pool, sh.codecs, withCapture(shopOptions))
	if err != nil {
		t.Fatal(err)
	}
	sh.s = restarted
	for range 3 {
		file()
	}
	rest, _ := eventsAfter(t, restarted, pos, 2)
	read = append(read, rest...)
	if len(read) != len(receipts) {
		t.Fatalf("%d events for %d uploads filed", len(read), len(receipts))
	}
	var keys []magicsync.Key
	for i, e := range read {
		want := receiptKey(t, sh, r.id, receipts[i])
		if e.Kind != server.RecordsFiled || e.Table != "receipts" || len(e.Keys) != 1 || e.Keys[0] != want {
			t.Errorf("event %d reads %+v, want the receipt %s filed", i, e, receipts[i])
		}
		keys = append(keys, e.Keys...)
	}

	// The rows the events name, in their order.
	rows, err := server.RowsOf[Receipt](sh.ctx, restarted, sh.pool, append(keys, receiptKey(t, sh, r.id, uuid.New())))
	if err != nil || len(rows) != len(receipts) {
		t.Fatalf("RowsOf the events' keys: %d rows, %v; want %d", len(rows), err, len(receipts))
	}
	for i, row := range rows {
		if row.ID != receipts[i] || row.TotalCents != 100 {
			t.Errorf("row %d reads %+v, want receipt %s of 100 cents", i, row, receipts[i])
		}
	}
}

// receiptKey is a receipt's key, as events name it.
func receiptKey(t *testing.T, sh *shop, register, id uuid.UUID) magicsync.Key {
	t.Helper()
	k, err := magicsync.KeyOf(sh.codecs, Receipt{RegisterID: register, ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Events older than the bound are trimmed, newer ones kept; reading
// after a position that had not seen the trimmed ones fails with
// ErrEventsTrimmed, saying what to do.
func TestEventsAfterATrimmedPositionFailWithErrEventsTrimmed(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	pos := positionNow(t, sh.s)
	insertEvent(t, sh.pool, "old")
	sh.exec(`UPDATE sync_events SET at = now() - interval '8 days'`)
	insertEvent(t, sh.pool, "new")
	if err := sh.s.TrimEvents(sh.ctx, 7*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := sh.count(`SELECT count(*) FROM sync_events WHERE tbl = 'new'`); n != 1 || sh.count(`SELECT count(*) FROM sync_events`) != 1 {
		t.Errorf("after the trim, %d events are kept, want the new one", sh.count(`SELECT count(*) FROM sync_events`))
	}
	_, _, err := sh.s.Events(sh.ctx, pos, 10)
	if !errors.Is(err, server.ErrEventsTrimmed) || !strings.Contains(err.Error(), "take stock again") {
		t.Fatalf("Events after a trimmed position: %v, want ErrEventsTrimmed saying what to do", err)
	}
	err = sh.s.FollowEvents(sh.ctx, pos, func(context.Context, []server.Event, server.EventPosition) error {
		t.Error("FollowEvents called fn after a trimmed position")
		return nil
	})
	if !errors.Is(err, server.ErrEventsTrimmed) {
		t.Fatalf("FollowEvents after a trimmed position: %v, want ErrEventsTrimmed", err)
	}
}

// A position that is not one Events returned is refused, not read as now;
// one ahead of the database is taken for events missed.
func TestEventsRefuseAPositionTheyDidNotReturn(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	for _, bad := range []server.EventPosition{"x", "1:2", "1:2:3;4", "1:2:;1:2:;x;1", "-1:2:"} {
		if _, _, err := sh.s.Events(sh.ctx, bad, 10); err == nil || errors.Is(err, server.ErrEventsTrimmed) {
			t.Errorf("Events(%q): %v, want an error about the position", bad, err)
		}
	}
	// A position ahead of the database: of a database restored from an
	// older copy, say.
	if _, _, err := sh.s.Events(sh.ctx, "9000000000000:9000000000000:", 10); !errors.Is(err, server.ErrEventsTrimmed) {
		t.Errorf("Events after a position ahead of the database: %v, want ErrEventsTrimmed", err)
	}
}

// filed keeps the RecordsFiled events of evs.
func filed(evs []server.Event) []server.Event {
	var out []server.Event
	for _, e := range evs {
		if e.Kind == server.RecordsFiled {
			out = append(out, e)
		}
	}
	return out
}

// Delivery is at least once: a host that fails before it stores the
// position gets the same events again from the position it stored; the
// events filed while it follows come in a batch of their own, in a process
// that Runs.
func TestFollowEventsDeliversABatchAgainUntilItsPositionIsStored(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	runCtx, stopRun := context.WithCancel(sh.ctx)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = sh.s.Run(runCtx)
	}()
	defer func() { stopRun(); <-ran }()

	stored := positionNow(t, sh.s)
	send := func() uuid.UUID {
		t.Helper()
		id := uuid.New()
		rec := Receipt{RegisterID: r.id, ID: id, TotalCents: 100, ChangedAt: time.Now().UTC().Truncate(time.Microsecond)}
		if err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, rec)}}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := send()

	// The host fails before it stores the position.
	errCrash := errors.New("the host crashed")
	var seen []server.Event
	err := sh.s.FollowEvents(sh.ctx, stored, func(_ context.Context, evs []server.Event, _ server.EventPosition) error {
		seen = append(seen, filed(evs)...)
		return errCrash
	})
	if !errors.Is(err, errCrash) || len(seen) != 1 {
		t.Fatalf("FollowEvents returned %v after %d events; want the host's error after 1", err, len(seen))
	}

	// It follows again from the position it stored.
	ctx, cancel := context.WithCancel(sh.ctx)
	defer cancel()
	batches := make(chan []server.Event)
	followed := make(chan error, 1)
	go func() {
		followed <- sh.s.FollowEvents(ctx, stored, func(ctx context.Context, evs []server.Event, next server.EventPosition) error {
			if evs = filed(evs); len(evs) == 0 {
				stored = next // the register's coming online, say
				return nil
			}
			select {
			case batches <- evs:
				stored = next
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	receive := func(want uuid.UUID) {
		t.Helper()
		select {
		case evs := <-batches:
			if len(evs) != 1 || len(evs[0].Keys) != 1 || evs[0].Keys[0] != receiptKey(t, sh, r.id, want) {
				t.Fatalf("the batch reads %+v, want the receipt %s filed", evs, want)
			}
		case err := <-followed:
			t.Fatalf("FollowEvents returned %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("no batch came")
		}
	}
	receive(first) // again
	second := send()
	receive(second)
	cancel()
	if err := <-followed; err != nil {
		t.Fatalf("FollowEvents returned %v as its context ended, want nil", err)
	}
}

// RecordsFiled names the rows an upload filed — upserted and deleted —
// not those refused (by the database, or another register's); an upload
// sent again is filed again, once more, and says so; an upload the server
// had filed already writes no event.
func TestRecordsFiledNamesTheRowsFiledNotThoseRefused(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	other := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	other.sync()
	t0 := time.Now().UTC().Truncate(time.Microsecond)
	kept := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: 5, ChangedAt: t0}
	if err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, kept)}}); err != nil {
		t.Fatal(err)
	}
	pos := positionNow(t, sh.s)

	bad := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: -1, ChangedAt: t0} // the database refuses it
	good := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: 7, ChangedAt: t0}
	foreign := Receipt{RegisterID: other.id, ID: uuid.New(), TotalCents: 9, ChangedAt: t0}
	part := receiptsUp(t, sh, bad, good, foreign)
	part.Deletes = [][]byte{[]byte(receiptKey(t, sh, r.id, kept.ID))}
	up := &syncpb.Up{Tables: []*syncpb.TableChanges{part}}
	if err := r.send(up); err != nil {
		t.Fatal(err)
	}
	if err := r.sendSeq(r.seq, up); err != nil { // the same upload again
		t.Fatal(err)
	}
	resent := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: 3, ChangedAt: t0}
	if err := r.send(&syncpb.Up{Resent: true, Tables: []*syncpb.TableChanges{receiptsUp(t, sh, resent)}}); err != nil {
		t.Fatal(err)
	}

	evs, _ := eventsAfter(t, sh.s, pos, 10)
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2 (the upload, and the one sent again after a provisioning): %+v", len(evs), evs)
	}
	want := []magicsync.Key{receiptKey(t, sh, r.id, good.ID), receiptKey(t, sh, r.id, kept.ID)}
	if e := evs[0]; e.Kind != server.RecordsFiled || fmt.Sprint(e.Keys) != fmt.Sprint(want) || e.Resent {
		t.Errorf("the upload's event names %v (resent %v), want %v", e.Keys, e.Resent, want)
	}
	if e := evs[1]; len(e.Keys) != 1 || e.Keys[0] != receiptKey(t, sh, r.id, resent.ID) || !e.Resent {
		t.Errorf("the event of rows sent again reads %+v, want the receipt %s, resent", e, resent.ID)
	}
}

// The announcer locks the replicas' rows in id order, as a batch of
// messages does: a transaction that holds the lower of two rows, as
// buildDeltas locks them, takes the higher at once while the announcer
// waits, and neither ends in a deadlock — even when the higher row comes
// first in the table, where an update's scan would lock it first.
func TestAnnouncingPresenceNeverDeadlocksWithABatchOfMessages(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	a, b := w.register(), w.register()
	lo, hi := a, b
	if strings.Compare(lo.String(), hi.String()) > 0 {
		lo, hi = hi, lo
	}
	start := positionNow(t, w.s)
	// An update writes a row's new version after the others: lo's comes
	// last in the table, where a scan meets it after hi's.
	w.exec(`UPDATE sync_replicas SET last_poll = now(), poll_window = interval '10 seconds' WHERE id = $1`, hi)
	w.exec(`UPDATE sync_replicas SET last_poll = now(), poll_window = interval '10 seconds' WHERE id = $1`, lo)
	var loFirst bool
	if err := w.pool.QueryRow(w.ctx, `SELECT (SELECT ctid FROM sync_replicas WHERE id = $1) < (SELECT ctid FROM sync_replicas WHERE id = $2)`,
		lo, hi).Scan(&loFirst); err != nil || loFirst {
		t.Fatalf("the table does not hold %s after %s (%v): the test cannot tell", lo, hi, err)
	}

	batch, err := w.pool.Begin(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer batch.Rollback(w.ctx) //nolint:errcheck // after Commit, a no-op
	lockRow := func(id uuid.UUID) error {
		_, err := batch.Exec(w.ctx, `SELECT 1 FROM sync_replicas WHERE id = $1 FOR NO KEY UPDATE`, id)
		return err
	}
	if _, err := batch.Exec(w.ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
		t.Fatal(err)
	}
	if err := lockRow(lo); err != nil {
		t.Fatal(err)
	}
	announced := make(chan error, 1)
	go func() { announced <- w.s.AnnouncePresence(w.ctx) }()
	waitForALockWait(t, w.pool)
	if err := lockRow(hi); err != nil {
		t.Fatalf("locking the second replica's row while the announcer waits: %v", err)
	}
	if err := batch.Commit(w.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-announced; err != nil {
		t.Fatalf("announcing: %v", err)
	}
	evs, _ := eventsAfter(t, w.s, start, 100)
	online := map[uuid.UUID]bool{}
	for _, e := range evs {
		if e.Kind == server.ReplicaOnline {
			online[e.Replica] = true
		}
	}
	if !online[lo] || !online[hi] || len(online) != 2 {
		t.Fatalf("the replicas announced online are %v, want %s and %s", online, lo, hi)
	}
}

// waitForALockWait returns once a session of the pool's database waits
// for a lock.
func waitForALockWait(t *testing.T, pool rowQuerier) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no session waited for a lock within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Replicas removed from the replicas table are let go, by the pass that
// plans the removal and by a new server's first pass alike, and the
// others stay.
func TestReplicasRemovedFromTheirTableAreLetGo(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	a, b, kept := w.register(), w.register(), w.register()
	held := func() map[uuid.UUID]bool {
		t.Helper()
		rows, err := w.pool.Query(w.ctx, `SELECT id FROM sync_replicas`)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			t.Fatal(err)
		}
		out := map[uuid.UUID]bool{}
		for _, id := range ids {
			out[id] = true
		}
		return out
	}

	w.exec(`DELETE FROM shop.registers WHERE id = $1`, a)
	w.pass()
	if got := held(); got[a] || !got[b] || !got[kept] {
		t.Fatalf("after the pass the engine holds %v; want %s let go, %s and %s kept", got, a, b, kept)
	}
	if _, _, err := w.s.Endpoint().Next(w.ctx, a, server.Applied{}); !errors.Is(err, server.ErrUnknownReplica) {
		t.Fatalf("Next of a replica let go: %v, want ErrUnknownReplica", err)
	}

	w.exec(`DELETE FROM shop.registers WHERE id = $1`, b)
	other, err := server.New(w.ctx, w.pool, w.codecs, withCapture(server.Options{Replicas: shoptest.Replicas}))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Pass(w.ctx); err != nil {
		t.Fatal(err)
	}
	if got := held(); got[b] || !got[kept] {
		t.Fatalf("after a new server's first pass the engine holds %v; want %s let go, %s kept", got, b, kept)
	}
}
