package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

// Refusals that are not about the rows — a token rotated under a running
// register, a wrong address, an offline batch larger than the server's
// body limit — keep the rows queued, say why, and every row is filed once
// the cause is mended. Real PostgreSQL, real SQLite, the HTTP transport.

// httpRegister is a register over the HTTP transport, over its own SQLite
// file, which a test may stop and start again with other settings.
type httpRegister struct {
	t    testing.TB
	id   uuid.UUID
	db   *sql.DB
	h    *headOffice
	r    *replica.Replica
	stop func()
}

func (h *headOffice) httpRegister(d sqlitetest.Driver) *httpRegister {
	h.t.Helper()
	shop := h.addShop()
	id := uuid.New()
	h.exec("INSERT INTO shop.registers (id, shop_id) VALUES ($1, $2)", id, shop)
	db := sqlitetest.OpenPath(h.t, d, sqlitetest.NewPath(h.t), sqlitetest.Safe())
	if _, err := db.Exec(sqliteSchema); err != nil {
		h.t.Fatal(err)
	}
	if err := replica.Install(context.Background(), db, h.codecs); err != nil {
		h.t.Fatal(err)
	}
	return &httpRegister{t: h.t, id: id, db: db, h: h, stop: func() {}}
}

// start runs the register against the server at base with token, in
// messages of at most maxRows rows (0: the default).
func (g *httpRegister) start(base, token string, maxRows int) {
	g.t.Helper()
	g.stop()
	ctx := context.Background()
	client := httpsync.NewClient(base, g.id, token, httpsync.ClientOptions{PollWait: 200 * time.Millisecond,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Logger: quiet()})
	r, err := replica.New(ctx, g.db, g.h.codecs, replica.Me(g.id), client, replica.Settings{
		Idle: 20 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		DigestsEvery: -1, MaxRows: maxRows, Logger: quiet(),
	})
	if err != nil {
		g.t.Fatal(err)
	}
	g.r = r
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(runCtx) })
	wg.Go(func() { _ = client.ReceiveLoop(runCtx, r.Endpoint()) })
	var once sync.Once
	g.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	g.t.Cleanup(g.stop)
}

func (g *httpRegister) ring(n int) {
	g.t.Helper()
	tx, err := g.db.Begin()
	if err != nil {
		g.t.Fatal(err)
	}
	for range n {
		if _, err := tx.Exec("INSERT INTO receipts (register_id, id, total_cents, changed_at) VALUES (?, ?, ?, ?)", g.id, uuid.New(), 100, at); err != nil {
			g.t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		g.t.Fatal(err)
	}
	if g.r != nil {
		g.r.Nudge()
	}
}

// allFiled waits until the server holds want receipts of the register and
// the register has nothing left to send: a minute, as thousands of rows
// on modernc.org/sqlite under the race detector take seconds each way.
func (g *httpRegister) allFiled(want int) {
	g.t.Helper()
	eventuallyWithin(g.t, time.Minute, fmt.Sprintf("all %d receipts filed", want), func() (bool, string) {
		n := g.h.count("SELECT count(*) FROM shop.receipts WHERE register_id = $1", g.id)
		var pending int
		if err := g.db.QueryRow("SELECT count(*) FROM sync_pending").Scan(&pending); err != nil {
			return false, err.Error()
		}
		return n == want && pending == 0, fmt.Sprintf("%d filed, %d waiting on the register", n, pending)
	})
}

// refusedKeepingRows waits until the register's main lane says why the
// server refuses it, and checks that nothing went to the backlog.
func (g *httpRegister) refusedKeepingRows(want string) {
	g.t.Helper()
	eventually(g.t, "the lane saying why the server refuses it", func() (bool, string) {
		st, err := g.r.Status(context.Background())
		if err != nil {
			return false, err.Error()
		}
		if st.Backlog != 0 {
			g.t.Fatalf("status = %+v; rows went to the backlog", st)
		}
		p := st.Lanes[0].Problem
		return strings.Contains(p, want) && st.Lanes[0].Unsent > 0, fmt.Sprintf("status %+v", st)
	})
}

func serveHTTP(t testing.TB, h *headOffice, opts headoffice.HandlerOptions) *httptest.Server {
	t.Helper()
	opts.Logger = quiet()
	if opts.PollWait == 0 {
		opts.PollWait = 200 * time.Millisecond
	}
	srv := httptest.NewServer(headoffice.Handler(h.s, opts))
	t.Cleanup(srv.Close)
	return srv
}

func tokenOf(t testing.TB, h *headOffice, id uuid.UUID) string {
	t.Helper()
	secret, err := h.s.Credentials(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return httpsync.JoinToken(id, secret)
}

func TestTokenRotatedUnderARunningRegisterKeepsItsRowsUntilTheNewToken(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		h := newHeadOffice(t)
		srv := serveHTTP(t, h, headoffice.HandlerOptions{})
		g := h.httpRegister(d)
		g.start(srv.URL, tokenOf(t, h, g.id), 0)
		g.ring(5)
		g.allFiled(5)
		rotated := tokenOf(t, h, g.id) // the old token stops working
		g.ring(7)
		g.refusedKeepingRows("401")
		g.start(srv.URL, rotated, 0)
		g.allFiled(12)
	})
}

func TestWrongServerPathKeepsTheRowsUntilTheRightOne(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		h := newHeadOffice(t)
		mux := http.NewServeMux()
		mux.Handle("/office/", http.StripPrefix("/office", headoffice.Handler(h.s, headoffice.HandlerOptions{PollWait: 200 * time.Millisecond, Logger: quiet()})))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		g := h.httpRegister(d)
		token := tokenOf(t, h, g.id)
		g.ring(4)
		g.start(srv.URL+"/wrong", token, 0)
		g.refusedKeepingRows("404")
		g.start(srv.URL+"/office", token, 0)
		g.allFiled(4)
	})
}

func TestOfflineBatchLargerThanTheBodyLimitIsSplitAndAllFiled(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		h := newHeadOffice(t)
		srv := serveHTTP(t, h, headoffice.HandlerOptions{MaxBodyBytes: 64 << 10})
		g := h.httpRegister(d)
		g.ring(3000) // rung while offline: one batch, ~250 KiB in one message
		g.start(srv.URL, tokenOf(t, h, g.id), 0)
		g.allFiled(3000)
		st, err := g.r.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Backlog != 0 {
			t.Fatalf("status = %+v; want nothing in the backlog", st)
		}
	})
}
