package pgtest

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestClusterStopsAndStartsAgainKeepingItsData checks that a test's own
// cluster refuses connections once stopped, and answers again, under the
// same address and with what it held, once started again.
func TestClusterStopsAndStartsAgainKeepingItsData(t *testing.T) {
	t.Parallel()
	c := NewCluster(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := ping(ctx, c.URL(), 2*time.Second); err == nil {
		t.Fatal("the stopped cluster still accepts connections")
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatalf("the cluster started again refuses connections: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT n FROM kept").Scan(&n); err != nil || n != 42 {
		t.Fatalf("the cluster started again holds %d (%v); want 42", n, err)
	}
}
