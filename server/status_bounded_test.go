package server_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/dashboard"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// Status reads a bounded amount of each replica, whatever it made the
// server store: the most recent StatusRejected rejected rows with their
// total, the first StatusBuild bytes of its build, its declared tables and
// at most StatusOtherTables others.
func TestStatusIsBoundedWithTotals(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "apple", 1)
	sh.pass()
	settle(t, sh, r)
	const stored = server.StatusRejected + 150
	sh.exec(`INSERT INTO public.sync_rejected (replica, side, tbl, key, reason, at)
		SELECT $1, 'server', 'receipts', int4send(i), 'refused ' || i, now() - (i || ' seconds')::interval FROM generate_series(1, $2) i`, r.id, stored)
	sh.exec(`UPDATE public.sync_replicas SET build = repeat('b', 100000) WHERE id = $1`, r.id)
	sh.exec(`INSERT INTO public.sync_replica_tables (replica, tbl, unsent) SELECT $1, 'zz unknown ' || i, 1 FROM generate_series(1, 500) i`, r.id)

	st := statusOf(t, sh, r.id)
	if len(st.Rejected) != server.StatusRejected || st.RejectedTotal != stored {
		t.Errorf("rejected: %d listed, total %d; want %d listed of %d", len(st.Rejected), st.RejectedTotal, server.StatusRejected, stored)
	}
	// The most recent (refused 1 is the newest), listed oldest first.
	if n := len(st.Rejected); n > 0 && (st.Rejected[n-1].Reason != "refused 1" || st.Rejected[0].Reason != "refused 100") {
		t.Errorf("listed from %q to %q; want the most recent, from \"refused 100\" to \"refused 1\"", st.Rejected[0].Reason, st.Rejected[n-1].Reason)
	}
	if len(st.Build) != server.StatusBuild {
		t.Errorf("build of %d bytes shown, want %d", len(st.Build), server.StatusBuild)
	}
	if tableOf(st, "products").Should != 1 {
		t.Errorf("products: %+v; a declared table must stay listed", tableOf(st, "products"))
	}
	others := 0
	for _, ts := range st.Tables {
		if strings.HasPrefix(ts.Table, "zz unknown ") {
			others++
		}
	}
	if others != server.StatusOtherTables {
		t.Errorf("%d undeclared tables listed, want %d", others, server.StatusOtherTables)
	}
}

// A catalog row the replica could not take is not held: the replica that
// refused one of its two products holds 1 of 2, not 2 of 2.
func TestStatusRefusedRowsAreNotHeld(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	apple := sh.product(sh.shopA, "apple", 1)
	sh.product(sh.shopA, "pear", 2)
	sh.pass()
	settle(t, sh, r)
	if pt := tableOf(statusOf(t, sh, r.id), "products"); pt.Holds != 2 || pt.Should != 2 {
		t.Fatalf("products before the refusal: holds %d of %d, want 2 of 2", pt.Holds, pt.Should)
	}
	appleKey := []byte(codec.KeyOfValues(wire.UUIDValue(apple)))
	if err := r.send(&syncpb.Up{
		LastApplied: r.applied,
		Rejected:    []*syncpb.Rejected{{Table: "products", Key: appleKey, Reason: "CHECK constraint failed: price", Message: r.applied}},
	}); err != nil {
		t.Fatal(err)
	}
	if pt := tableOf(statusOf(t, sh, r.id), "products"); pt.Holds != 1 || pt.Should != 2 {
		t.Errorf("products after the replica refused the apple: holds %d of %d, want 1 of 2", pt.Holds, pt.Should)
	}
}

// Status gives each table's kind from the server's declarations, not from
// its counts: receipts, with nothing filed, are a record.
func TestStatusTablesKindFromDeclarations(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "apple", 1)
	sh.pass()
	settle(t, sh, r)
	// A report of nothing unsent lists receipts with all counts zero.
	if err := r.send(&syncpb.Up{LastApplied: r.applied, Unsent: []*syncpb.Count{{Table: "receipts", Rows: 0}}}); err != nil {
		t.Fatal(err)
	}
	st := statusOf(t, sh, r.id)
	if rt := tableOf(st, "receipts"); rt.Mirror != magicsync.Record || rt.Filed != 0 || rt.Holds != 0 || rt.Should != 0 {
		t.Errorf("receipts: %+v, want a record with nothing filed", rt)
	}
	if pt := tableOf(st, "products"); pt.Mirror != magicsync.Catalog {
		t.Errorf("products: %+v, want a catalog", pt)
	}
	// And the dashboard shows receipts as a record: nothing "holds 0 of 0".
	rec := httptest.NewRecorder()
	dashboard.New(sh.s, dashboard.Options{Public: true, Logger: slog.New(slog.DiscardHandler)}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	page := rec.Body.String()
	if strings.Contains(page, "holds 0 of 0") || !strings.Contains(page, "received: 0") {
		t.Errorf("the page shows receipts as a catalog:\n%s", page)
	}
}

// ReportedAt is when the replica last uploaded rows, with its report on
// itself, not when it last polled: zero before its first upload.
func TestStatusSaysWhenTheReplicaReported(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	settle(t, sh, r)
	if st := statusOf(t, sh, r.id); !st.ReportedAt.IsZero() {
		t.Errorf("before any upload: reported at %v", st.ReportedAt)
	}
	before := time.Now()
	rec := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: 100, ChangedAt: time.Now()}
	if err := r.send(&syncpb.Up{LastApplied: r.applied, Tables: []*syncpb.TableChanges{receiptsUp(t, sh, rec)},
		Unsent: []*syncpb.Count{{Table: "receipts", Rows: 3}}}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	st := statusOf(t, sh, r.id)
	if st.ReportedAt.Before(before.Add(-time.Second)) || st.ReportedAt.After(after.Add(time.Second)) {
		t.Errorf("reported at %v; the upload was between %v and %v", st.ReportedAt, before, after)
	}
	settle(t, sh, r)
	if again := statusOf(t, sh, r.id); !again.ReportedAt.Equal(st.ReportedAt) {
		t.Errorf("a poll moved the report's time from %v to %v", st.ReportedAt, again.ReportedAt)
	}
}

// With its database away (here: its pool closed), the server's Ping and
// Status fail, and the dashboard says since when the database has been
// unreachable, answering 503 — the page, status.json and /healthz — with
// the time of the first failure.
func TestDashboardSaysDatabaseUnreachableSince(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	pool, err := pgxpool.NewWithConfig(sh.ctx, sh.pool.Config())
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(sh.ctx, pool, sh.codecs, shopOptions)
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	if err := s.Ping(sh.ctx); err != nil {
		t.Fatalf("ping with the database there: %v", err)
	}
	h := dashboard.New(s, dashboard.Options{Public: true, Logger: slog.New(slog.DiscardHandler)})
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	if rec := get("/"); rec.Code != http.StatusOK {
		t.Fatalf("GET / with the database there: %d", rec.Code)
	}
	pool.Close()
	if err := s.Ping(sh.ctx); err == nil {
		t.Error("ping with the pool closed: no error")
	}
	first := get("/")
	if first.Code != http.StatusServiceUnavailable || !strings.Contains(first.Body.String(), "Database unreachable since") {
		t.Fatalf("GET / with the database away: %d\n%s", first.Code, first.Body)
	}
	second := get("/status.json")
	if second.Code != http.StatusServiceUnavailable || !strings.Contains(second.Body.String(), `"unreachableSince"`) {
		t.Errorf("GET /status.json with the database away: %d %s", second.Code, second.Body)
	}
	health := get("/healthz")
	if health.Code != http.StatusServiceUnavailable || !strings.Contains(health.Body.String(), "database unreachable since") {
		t.Errorf("GET /healthz with the database away: %d %s", health.Code, health.Body)
	}
	// The time is the first failure's, the same on every answer.
	stamp := func(body string) string {
		_, after, _ := strings.Cut(body, `datetime="`)
		v, _, _ := strings.Cut(after, `"`)
		return v
	}
	if again := get("/"); stamp(again.Body.String()) != stamp(first.Body.String()) || stamp(first.Body.String()) == "" {
		t.Errorf("since %q, then %q: want the first failure's time, kept", stamp(first.Body.String()), stamp(again.Body.String()))
	}
}
