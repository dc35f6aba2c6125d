package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// TestHeadOfficeStartsBesideAnOperatorWritingProducts starts a head
// office over a database another head office prepared, while an
// operator's transaction writing the products is open (a rolling
// restart while the head office works): it comes up without waiting for
// that transaction, because it leaves a prepared database's tables as
// they are. Preparing them again would queue locks (ALTER TABLE, the
// triggers replaced) behind the operator's, and every reader of the
// products — the other head offices' passes and polls — behind those.
func TestHeadOfficeStartsBesideAnOperatorWritingProducts(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	tl := &testLog{t: t}
	t.Cleanup(tl.close)
	log := slog.New(slog.NewTextHandler(tl, &slog.HandlerOptions{Level: slog.LevelError}))
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	first, err := startHeadOffice(ctx, dbURL, "127.0.0.1:0", "", len(registerNames), testPoll, log)
	if err != nil {
		t.Fatal(err)
	}
	defer first.wait()
	defer stop()

	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	operator, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer operator.Rollback(context.Background()) //nolint:errcheck // the test's end
	if _, err := operator.Exec(t.Context(), "LOCK TABLE shop.products IN ROW EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	startCtx, cancel := context.WithTimeout(ctx, settle)
	defer cancel()
	second, err := startHeadOffice(startCtx, dbURL, "127.0.0.1:0", "", len(registerNames), testPoll, log)
	if err != nil {
		t.Fatalf("a head office starting while an operator's transaction writes the products: %v; want it up", err)
	}
	if err := second.hooks.Pass(startCtx); err != nil {
		t.Errorf("the second head office's first pass: %v", err)
	}
	cancel()
	second.wait()
	if err := operator.Commit(t.Context()); err != nil {
		t.Errorf("the operator's transaction, open while a head office started: %v", err)
	}
}
