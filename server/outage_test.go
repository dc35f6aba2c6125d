package server_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/server"
)

// records keeps the log records of one test, and signals each new one.
type records struct {
	mu   sync.Mutex
	all  []slog.Record
	more chan struct{}
}

func newRecords() *records { return &records{more: make(chan struct{}, 1)} }

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.all = append(r.all, rec.Clone())
	r.mu.Unlock()
	select {
	case r.more <- struct{}{}:
	default:
	}
	return nil
}

// count counts the records at level whose message holds msg.
func (r *records) count(level slog.Level, msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.all {
		if rec.Level == level && strings.Contains(rec.Message, msg) {
			n++
		}
	}
	return n
}

// await waits, up to a deadline, until ok holds of the records.
func (r *records) await(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !ok() {
		select {
		case <-r.more:
		case <-deadline:
			t.Fatalf("not within 20 s: %s", what)
		}
	}
}

// TestRunLivesThroughADatabaseOutage stops PostgreSQL under a running
// Run: Run keeps trying, with one warning for the whole outage (the many
// failed attempts go to debug level), plans again by itself once the
// database is back, saying so, and still returns nil as soon as its
// context ends.
func TestRunLivesThroughADatabaseOutage(t *testing.T) {
	t.Parallel()
	cluster := pgtest.NewCluster(t)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, cluster.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, shopSchema); err != nil {
		t.Fatal(err)
	}
	codecs := shopCodecs(t)
	if err := server.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	sql, err := server.Triggers(codecs, shopOptions)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
	logs := newRecords()
	opts := shopOptions
	opts.PassEvery = 10 * time.Millisecond
	opts.Logger = slog.New(logs)
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	listening := make(chan struct{}, 1)
	s.OnListening(func() {
		select {
		case listening <- struct{}{}:
		default:
		}
	})
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- s.Run(runCtx) }()
	<-listening

	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	const fails = "planning fails"
	// Several attempts failed: the first warned, the others at debug level.
	logs.await(t, "three failed passes", func() bool { return logs.count(slog.LevelDebug, fails) >= 3 })
	select {
	case err := <-ran:
		t.Fatalf("Run returned while the database was away: %v", err)
	default:
	}
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	logs.await(t, "a pass that works again", func() bool { return logs.count(slog.LevelInfo, "planning works again") == 1 })
	select {
	case <-listening:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not listen again within 20 s of the database coming back")
	}
	if n := logs.count(slog.LevelWarn, fails); n != 1 {
		t.Errorf("the outage was warned of %d times; want once", n)
	}
	if n := logs.count(slog.LevelError, ""); n != 0 {
		t.Errorf("%d errors logged over the outage; want none (one warning)", n)
	}
	if n := logs.count(slog.LevelWarn, "listening for notifications failed"); n != 1 {
		t.Errorf("the lost notifications were warned of %d times; want once", n)
	}
	stop()
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run returned %v at the end of its context; want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of its context's end")
	}
}
