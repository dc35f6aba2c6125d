//go:build unix

package replica

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// wishCrashChildEnv, set, makes TestWishIsOfferedAgainAfterADeathBeforeItsAnswer
// the child that dies: it names the database file and the driver.
const wishCrashChildEnv = "MAGICSYNC_REPLICA_WISH_CRASH_CHILD"

// A replica that stops after the handler ran and before the answer was
// recorded offers the same wish again: handlers must be idempotent.
func TestWishIsOfferedAgainAfterADeathBeforeItsAnswer(t *testing.T) {
	t.Parallel()
	if path := os.Getenv(wishCrashChildEnv); path != "" {
		wishCrashChild(t, path, os.Getenv(wishCrashChildEnv+"_DRIVER"))
		return
	}
	if testing.Short() {
		t.Skip("kills a child process; not under -short")
	}
	d := sqlitetest.Modernc()
	path := sqlitetest.NewPath(t)
	db := sqlitetest.OpenPath(t, d, path, sqlitetest.Safe())
	mustExec(t, db, shopSchema)
	ctx := context.Background()
	if err := Install(ctx, db, shopCodecs(t)); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "INSERT INTO settings VALUES (?, 'footer', 'Thanks', ?)", register, t0)
	r, err := New(ctx, db, shopCodecs(t), Me(register), newRecorder(), quietSettings())
	if err != nil {
		t.Fatal(err)
	}
	w := &wishShop{r: r}
	w.down(t, 1, &syncpb.Wish{Table: "settings", Key: []byte(keyOf(t, r.codecs, footer("footer"))), Wish: 1,
		Columns: []string{"value"}, Wanted: wire.AppendTuple(nil, []codec.Value{wire.TextValue("x")})})
	r.Close()

	cmd := exec.Command(os.Args[0], "-test.run", "^TestWishIsOfferedAgainAfterADeathBeforeItsAnswer$", "-test.count=1")
	cmd.Env = append(os.Environ(), wishCrashChildEnv+"="+path, wishCrashChildEnv+"_DRIVER="+d.Label)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child did not die by SIGKILL in its handler: %v\n%s", err, out)
	}
	if n, _, _ := w.held(t, footer("footer")); n != 1 {
		t.Fatalf("wish %d held", n)
	}
	if _, state, _ := w.held(t, footer("footer")); state != WishPending {
		t.Fatalf("state %v after the death", state)
	}

	// The next process offers the same wish again.
	offered := make(chan Wish[Setting], 1)
	s := quietSettings()
	s.Wishes = Wishes{Handle(handlerFunc[Setting](func(_ context.Context, wish Wish[Setting]) Outcome {
		offered <- wish
		return Applied()
	}))}
	r, err = New(ctx, db, shopCodecs(t), Me(register), newRecorder(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var wg sync.WaitGroup
	if err := r.offerPass(ctx, &wg, true); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	select {
	case wish := <-offered:
		if wish.Number != 1 || wish.Wanted.Value != "x" {
			t.Fatalf("offered %+v", wish)
		}
	default:
		t.Fatal("the wish was not offered again")
	}
	w.r = r
	if _, state, _ := w.held(t, footer("footer")); state != WishApplied {
		t.Fatalf("state %v", state)
	}
}

// wishCrashChild offers the wish to a handler that carries it out and dies
// before it answers.
func wishCrashChild(t *testing.T, path, label string) {
	var d sqlitetest.Driver
	for _, each := range sqlitetest.Drivers() {
		if each.Label == label {
			d = each
		}
	}
	db := sqlitetest.OpenPath(t, d, path, sqlitetest.Safe())
	s := quietSettings()
	s.Wishes = Wishes{Handle(handlerFunc[Setting](func(context.Context, Wish[Setting]) Outcome {
		// The device took the value; the process dies before the answer.
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}))}
	r, err := New(context.Background(), db, shopCodecs(t), Me(register), newRecorder(), s)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	if err := r.offerPass(context.Background(), &wg, true); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	t.Fatal("the handler returned though the process was killed")
}
