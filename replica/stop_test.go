package replica

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/sqlitetest"
)

// TestStoppedWhileASendIsRecordedLeavesNothingWaitingAsSent: a lane stopped
// while it records a message as sent — its context ending during the
// COMMIT, which modernc.org/sqlite then reports as the context's error
// though the commit went through — leaves no row marked sent that no
// uplink was given. Such a row waited as unconfirmed until ResendAfter (a
// register unplugged when the shop stopped: its readings unconfirmed for
// a minute after the restart).
func TestStoppedWhileASendIsRecordedLeavesNothingWaitingAsSent(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		cc := &commitCanceler{}
		db := cc.open(t, d)
		mustExec(t, db, shopSchema)
		if err := Install(context.Background(), db, shopCodecs(t)); err != nil {
			t.Fatal(err)
		}
		s := quietSettings()
		clock := newFakeClock()
		s.Clock = clock // ResendAfter never passes
		up := newRecorder()
		offline := atomic.Bool{}
		offline.Store(true)
		up.fail = func(ctx context.Context, lane string) error {
			if offline.Load() {
				return TransportError(true, context.DeadlineExceeded)
			}
			return nil
		}
		r, err := New(context.Background(), db, shopCodecs(t), Me(register), up, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.whoAmI(context.Background()); err != nil {
			t.Fatal(err)
		}
		mustExec(t, db, "INSERT INTO positions VALUES (?, 1, 1.5, ?)", register, t0)
		lane := r.lane(r.laneOf["positions"].name)

		// Stopped while the lane's message is recorded as sent.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cc.cancel.Store(&cancel)
		_, _ = r.sendOnce(ctx, lane)
		if cc.cancel.Load() != nil {
			t.Fatal("the lane committed nothing")
		}
		st, err := r.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, ls := range st.Lanes {
			if ls.Name == lane.name && (ls.Unsent != 1 || ls.Unconfirmed != 0) {
				t.Fatalf("after a stop while recording a send no uplink took: %d unsent, %d unconfirmed; want 1 unsent, 0 unconfirmed", ls.Unsent, ls.Unconfirmed)
			}
		}

		// Started again, online: the row goes at once, not after ResendAfter.
		offline.Store(false)
		if _, err := r.sendOnce(context.Background(), lane); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-up.got:
			if tableOf(got.msg.Up, "positions") == nil {
				t.Fatalf("the message sent carries no position: %v", got.msg)
			}
		default:
			t.Fatal("the position waits as sent: nothing was sent before ResendAfter")
		}
	})
}

// commitCanceler opens a database through its driver that, once armed
// with a cancel function, ends that context as soon as the next COMMIT run
// by Exec went through, and reports the end as modernc.org/sqlite reports a
// context that ends while its statement runs: the call fails with the
// context's error, though the statement was done. A COMMIT under a
// context that cannot end succeeds.
type commitCanceler struct {
	d      driver.Driver
	dsn    string
	cancel atomic.Pointer[context.CancelFunc]
}

func (c *commitCanceler) open(t testing.TB, d sqlitetest.Driver) *sql.DB {
	t.Helper()
	// The underlying driver, as database/sql registered it.
	probe := sqlitetest.Open(t, d)
	c.d = probe.Driver()
	c.dsn = d.DSN(sqlitetest.NewPath(t), sqlitetest.Safe())
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	return db
}

func (c *commitCanceler) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.d.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &cancelConn{Conn: conn, c: c}, nil
}

func (c *commitCanceler) Driver() driver.Driver { return c.d }

// cancelConn passes every call to the driver's connection.
type cancelConn struct {
	driver.Conn
	c *commitCanceler
}

func (cc *cancelConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ex, ok := cc.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	res, err := ex.ExecContext(ctx, query, args)
	if err == nil && strings.EqualFold(strings.TrimSpace(query), "COMMIT") {
		if cancel := cc.c.cancel.Swap(nil); cancel != nil {
			(*cancel)()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	return res, err
}

func (cc *cancelConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := cc.Conn.(driver.QueryerContext); ok {
		return q.QueryContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

func (cc *cancelConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := cc.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return cc.Prepare(query)
}

func (cc *cancelConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := cc.Conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return cc.Begin()
}

func (cc *cancelConn) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := cc.Conn.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (cc *cancelConn) Ping(ctx context.Context) error {
	if p, ok := cc.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (cc *cancelConn) ResetSession(ctx context.Context) error {
	if r, ok := cc.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (cc *cancelConn) IsValid() bool {
	if v, ok := cc.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}
