//go:build unix

package replica

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/sqlitetest"
)

// crashChildEnv, set, makes TestProcessKilledBeforeCommitLeavesDatabaseAsBefore
// the child that dies: it names the database file and the driver.
const crashChildEnv = "MAGICSYNC_REPLICA_CRASH_CHILD"

// crashMessage is the message the child dies applying: more rows than
// SQLite's page cache holds, so that some reach the WAL before the commit.
func crashMessage(t testing.TB, b builder) []byte {
	rows := make([]Product, 20_000)
	for i := range rows {
		rows[i] = product(i, 999)
	}
	return b.down(2, b.upserts(declarers(rows)...))
}

func declarers(rows []Product) []magicsync.Declarer {
	out := make([]magicsync.Declarer, len(rows))
	for i := range rows {
		out[i] = rows[i]
	}
	return out
}

func TestProcessKilledBeforeCommitLeavesDatabaseAsBefore(t *testing.T) {
	t.Parallel()
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(t, path, os.Getenv(crashChildEnv+"_DRIVER"))
		return
	}
	if testing.Short() {
		t.Skip("kills a child process; not under -short")
	}
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		path := sqlitetest.NewPath(t)
		db := sqlitetest.OpenPath(t, d, path, sqlitetest.Safe())
		mustExec(t, db, shopSchema)
		ctx := context.Background()
		if err := Install(ctx, db, shopCodecs(t)); err != nil {
			t.Fatal(err)
		}
		r, err := New(ctx, db, shopCodecs(t), Me(register), newRecorder(), quietSettings())
		if err != nil {
			t.Fatal(err)
		}
		b := builder{t, r.codecs}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(product(1, 100)))); err != nil {
			t.Fatal(err)
		}
		r.Close()

		cmd := exec.Command(os.Args[0], "-test.run", "^TestProcessKilledBeforeCommitLeavesDatabaseAsBefore$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path, crashChildEnv+"_DRIVER="+d.Label)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the child did not die by SIGKILL before its commit: %v\n%s", err, out)
		}

		// What the killed process left is what a power cut leaves: the
		// database as it was before the message.
		if n := count(t, db, "SELECT count(*) FROM products"); n != 1 {
			t.Fatalf("the killed message left %d products; want 1", n)
		}
		if n := count(t, db, "SELECT price_cents FROM products"); n != 100 {
			t.Fatalf("the killed message changed the price to %d", n)
		}
		if n := count(t, db, "SELECT last_applied FROM sync_replica"); n != 1 {
			t.Fatalf("last applied = %d after the killed message; want 1", n)
		}
		if n := count(t, db, "SELECT applying FROM sync_replica"); n != 0 {
			t.Fatal("the killed message left the replica marked as applying")
		}
		// Redelivered after the restart, it applies whole.
		r, err = New(ctx, db, shopCodecs(t), Me(register), newRecorder(), quietSettings())
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := r.Endpoint().Receive(ctx, crashMessage(t, b)); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, "SELECT count(*) FROM products WHERE price_cents = 999"); n != 20_000 {
			t.Fatalf("the redelivered message left %d products at the new price; want 20000", n)
		}
	})
}

// crashChild applies the crash message and is killed just before its
// commit.
func crashChild(t *testing.T, path, label string) {
	var d sqlitetest.Driver
	for _, each := range sqlitetest.Drivers() {
		if each.Label == label {
			d = each
		}
	}
	db := sqlitetest.OpenPath(t, d, path, sqlitetest.Safe())
	r, err := New(context.Background(), db, shopCodecs(t), Me(register), newRecorder(), quietSettings())
	if err != nil {
		t.Fatal(err)
	}
	r.beforeCommit = func(context.Context) error {
		return syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	_, err = r.Endpoint().Receive(context.Background(), crashMessage(t, builder{t, r.codecs}))
	t.Fatalf("Receive returned (%v) though the process was killed before its commit", err)
}
