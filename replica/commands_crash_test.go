//go:build unix

package replica

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// commandCrashChildEnv, set, makes
// TestAReplicaKilledInsideAHandlerAnswersInterruptedAndNeverRunsItAgain the
// child that dies: it names the database file and the driver.
const commandCrashChildEnv = "MAGICSYNC_REPLICA_COMMAND_CRASH_CHILD"

// A replica SIGKILLed while a command's handler runs answers the command
// interrupted when it starts again, and never runs it again: a command
// need not be safe to run twice.
func TestAReplicaKilledInsideAHandlerAnswersInterruptedAndNeverRunsItAgain(t *testing.T) {
	t.Parallel()
	if path := os.Getenv(commandCrashChildEnv); path != "" {
		commandCrashChild(t, path, os.Getenv(commandCrashChildEnv+"_DRIVER"))
		return
	}
	if testing.Short() {
		t.Skip("kills a child process; not under -short")
	}
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		path := sqlitetest.NewPath(t)
		db := sqlitetest.OpenPath(t, d, path, sqlitetest.Safe())
		mustExec(t, db, shopSchema)
		c := newCommandShop(t, db, nil)
		cmd := command("recount-drawer", "")
		c.deliver(t, 1, cmd)
		c.r.Close()

		child := exec.Command(os.Args[0], "-test.run", "^TestAReplicaKilledInsideAHandlerAnswersInterruptedAndNeverRunsItAgain$", "-test.count=1")
		child.Env = append(os.Environ(), commandCrashChildEnv+"="+path, commandCrashChildEnv+"_DRIVER="+d.Label)
		out, err := child.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the child did not die by SIGKILL in its handler: %v\n%s", err, out)
		}
		if st, _ := c.stateOf(t, cmd); st != CommandRunning {
			t.Fatalf("after the death the command is %v; want running, as the child recorded it before its handler", st)
		}

		ran := make(chan struct{}, 1)
		again := newCommandShop(t, db, Commands{"recount-drawer": func(context.Context, Command) ([]byte, error) {
			ran <- struct{}{}
			return nil, nil
		}})
		runReplica(t, again.r)
		a := again.answered(t, cmd, syncpb.CommandState_COMMAND_STATE_INTERRUPTED)
		if !strings.Contains(a.Reason, "stopped while its handler ran") {
			t.Errorf("interrupted, saying %q", a.Reason)
		}
		// A message after the answer: had the command run again, it would
		// have run before this one was taken.
		later := command("noop", "")
		again.deliver(t, 2, later)
		again.answered(t, later, syncpb.CommandState_COMMAND_STATE_FAILED)
		select {
		case <-ran:
			t.Fatal("the command ran again after the replica was killed inside its handler")
		default:
		}
		if st, _ := again.stateOf(t, cmd); st != CommandInterrupted {
			t.Errorf("state %v; want interrupted", st)
		}
	})
}

// commandCrashChild runs the command to a handler that dies inside.
func commandCrashChild(t *testing.T, path, label string) {
	var d sqlitetest.Driver
	for _, each := range sqlitetest.Drivers() {
		if each.Label == label {
			d = each
		}
	}
	db := sqlitetest.OpenPath(t, d, path, sqlitetest.Safe())
	c := newCommandShop(t, db, Commands{"recount-drawer": func(context.Context, Command) ([]byte, error) {
		// Counting, when the power goes.
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.r.Run(ctx)
	t.Fatalf("the handler did not run within 10 s (replica %v)", uuid.UUID(register))
}
