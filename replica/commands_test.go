package replica

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// commandShop is a replica of the shop that runs the commands handlers
// hold, and the uplink recording what it sends.
type commandShop struct {
	r  *Replica
	db *sql.DB
	up *recorder
	// seen holds every answer sent so far, by command id and state.
	seen map[string]map[syncpb.CommandState]*syncpb.CommandAnswer
}

func newCommandShop(t *testing.T, db *sql.DB, handlers Commands) *commandShop {
	t.Helper()
	ctx := context.Background()
	if err := Install(ctx, db, shopCodecs(t)); err != nil {
		t.Fatal(err)
	}
	s := quietSettings()
	s.Commands = handlers
	up := newRecorder()
	r, err := New(ctx, db, shopCodecs(t), Me(register), up, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &commandShop{r: r, db: db, up: up, seen: map[string]map[syncpb.CommandState]*syncpb.CommandAnswer{}}
}

// command is a command as the server sends it, issued now.
func command(name string, params string) *syncpb.Command {
	id := uuid.New()
	return &syncpb.Command{Id: id[:], Name: name, Params: []byte(params), IssuedAt: time.Now().UnixMicro()}
}

// deliver hands the replica message id carrying the commands.
func (c *commandShop) deliver(t testing.TB, id uint64, cs ...*syncpb.Command) {
	t.Helper()
	body, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: id, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Commands: cs}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.r.Endpoint().Receive(context.Background(), body); err != nil {
		t.Fatal(err)
	}
}

// answered waits until the replica sends an answer in state on command
// cmd, and returns it.
func (c *commandShop) answered(t testing.TB, cmd *syncpb.Command, state syncpb.CommandState) *syncpb.CommandAnswer {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if a := c.seen[string(cmd.Id)][state]; a != nil {
			return a
		}
		select {
		case s := <-c.up.got:
			for _, a := range s.msg.GetUp().GetCommandAnswers() {
				if c.seen[string(a.Id)] == nil {
					c.seen[string(a.Id)] = map[syncpb.CommandState]*syncpb.CommandAnswer{}
				}
				c.seen[string(a.Id)][a.State] = a
			}
		case <-deadline:
			t.Fatalf("no answer %v on command %q was sent within 10 s", state, cmd.Name)
			return nil
		}
	}
}

// stateOf reads where the replica holds a command.
func (c *commandShop) stateOf(t testing.TB, cmd *syncpb.Command) (CommandState, string) {
	t.Helper()
	var state CommandState
	var reason string
	if err := c.db.QueryRow("SELECT state, reason FROM sync_commands WHERE id = ?", cmd.Id).Scan(&state, &reason); err != nil {
		t.Fatal(err)
	}
	return state, reason
}

// A command runs once through the handler of its name, with its params,
// and its result goes up; the same command brought again — the message
// redelivered, or the server sending it again — does not run it again.
func TestACommandRunsOnceAndItsResultGoesUp(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		var runs atomic.Int32
		got := make(chan Command, 4)
		c := newCommandShop(t, shopDB(t, d), Commands{"print-test-page": func(_ context.Context, cmd Command) ([]byte, error) {
			runs.Add(1)
			got <- cmd
			return []byte("printed " + string(cmd.Params)), nil
		}})
		cmd := command("print-test-page", "2 copies")
		cmd.Note = "from the office"
		c.deliver(t, 1, cmd)
		runReplica(t, c.r)
		a := c.answered(t, cmd, syncpb.CommandState_COMMAND_STATE_SUCCEEDED)
		if string(a.Result) != "printed 2 copies" || a.AnsweredAt == 0 {
			t.Errorf("the answer: %v; want the handler's result and a time", a)
		}
		ran := <-got
		if ran.Name != "print-test-page" || string(ran.Params) != "2 copies" || ran.Note != "from the office" || uuid.UUID(cmd.Id) != ran.ID {
			t.Errorf("the handler was handed %+v", ran)
		}
		c.deliver(t, 1, cmd) // redelivered
		again := proto.Clone(cmd).(*syncpb.Command)
		again.Started = true
		c.deliver(t, 2, again) // sent again by the server
		c.deliver(t, 3)        // a message after both, run after them
		if st, _ := c.stateOf(t, cmd); st != CommandSucceeded {
			t.Errorf("state %v; want succeeded", st)
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("the handler ran %d times; want once", n)
		}
		st, err := c.r.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Commands[CommandSucceeded] != 1 {
			t.Errorf("Status counts the commands %v; want one succeeded", st.Commands)
		}
	})
}

// A command does not run past its deadline, nor when this build has no
// handler of its name, nor when its handler fails or panics: each answer
// says why.
func TestACommandThatCannotRunSaysWhy(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		var ran atomic.Int32
		c := newCommandShop(t, shopDB(t, d), Commands{
			"recount-drawer": func(context.Context, Command) ([]byte, error) { ran.Add(1); return nil, nil },
			"fails":          func(context.Context, Command) ([]byte, error) { return nil, errors.New("out of paper") },
			"panics":         func(context.Context, Command) ([]byte, error) { panic("printer on fire") },
			"too-much": func(context.Context, Command) ([]byte, error) {
				return make([]byte, MaxCommandResult+1), nil
			},
		})
		late := command("recount-drawer", "")
		late.Deadline = time.Now().Add(-time.Minute).UnixMicro()
		unknown, fails, panics, tooMuch := command("open-till", ""), command("fails", ""), command("panics", ""), command("too-much", "")
		c.deliver(t, 1, late, unknown, fails, panics, tooMuch)
		runReplica(t, c.r)
		for _, tc := range []struct {
			cmd   *syncpb.Command
			state syncpb.CommandState
			says  string
		}{
			{late, syncpb.CommandState_COMMAND_STATE_EXPIRED, "deadline passed"},
			{unknown, syncpb.CommandState_COMMAND_STATE_FAILED, `no handler for command "open-till"`},
			{fails, syncpb.CommandState_COMMAND_STATE_FAILED, "out of paper"},
			{panics, syncpb.CommandState_COMMAND_STATE_FAILED, "printer on fire"},
			{tooMuch, syncpb.CommandState_COMMAND_STATE_FAILED, "more than"},
		} {
			a := c.answered(t, tc.cmd, tc.state)
			if !strings.Contains(a.Reason, tc.says) {
				t.Errorf("command %q answered %v %q; want it to say %q", tc.cmd.Name, a.State, a.Reason, tc.says)
			}
		}
		if n := ran.Load(); n != 0 {
			t.Errorf("the command past its deadline ran %d times", n)
		}
	})
}

// A command the server takes back before the replica started it is not
// run; one the server says the replica started, which the replica holds
// no record of, is answered interrupted and not run either.
func TestACommandWithdrawnOrStartedElsewhereIsNotRun(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		var ran atomic.Int32
		c := newCommandShop(t, shopDB(t, d), Commands{"recount-drawer": func(context.Context, Command) ([]byte, error) {
			ran.Add(1)
			return nil, nil
		}})
		withdrawn, started := command("recount-drawer", ""), command("recount-drawer", "")
		started.Started = true
		c.deliver(t, 1, withdrawn, started)
		c.deliver(t, 2, &syncpb.Command{Id: withdrawn.Id, Withdrawn: true})
		if st, _ := c.stateOf(t, withdrawn); st != CommandCancelled {
			t.Errorf("a command withdrawn before it started: %v; want cancelled", st)
		}
		runReplica(t, c.r)
		a := c.answered(t, started, syncpb.CommandState_COMMAND_STATE_INTERRUPTED)
		if !strings.Contains(a.Reason, "no record") {
			t.Errorf("interrupted, saying %q", a.Reason)
		}
		if n := ran.Load(); n != 0 {
			t.Errorf("the handler ran %d times; want never", n)
		}
	})
}

// Inspect counts the commands by state and lists them, newest first, with
// what became of each: the one that ran with its answer, the one without
// a handler failed and why, from the file alone.
func TestInspectListsTheCommandsAndWhatBecameOfThem(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := shopDB(t, d)
		c := newCommandShop(t, db, Commands{"print-test-page": func(context.Context, Command) ([]byte, error) { return nil, nil }})
		printed := command("print-test-page", "")
		printed.Note = "from the office"
		printed.IssuedAt = time.Now().Add(-time.Minute).UnixMicro()
		unknown := command("recount-drawer", "")
		c.deliver(t, 1, printed, unknown)
		runReplica(t, c.r)
		c.answered(t, printed, syncpb.CommandState_COMMAND_STATE_SUCCEEDED)
		c.answered(t, unknown, syncpb.CommandState_COMMAND_STATE_FAILED)

		in, err := Inspect(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		if in.Commands[CommandSucceeded] != 1 || in.Commands[CommandFailed] != 1 || len(in.Commands) != 2 {
			t.Errorf("Inspect counts the commands %v; want one succeeded, one failed", in.Commands)
		}
		if len(in.CommandList) != 2 {
			t.Fatalf("Inspect lists %d commands; want 2", len(in.CommandList))
		}
		last, first := in.CommandList[0], in.CommandList[1]
		if last.ID != uuid.UUID(unknown.Id) || last.Name != "recount-drawer" || last.State != CommandFailed ||
			!strings.Contains(last.Reason, "recount-drawer") || last.AnsweredAt.IsZero() {
			t.Errorf("the command issued last reads %+v; want recount-drawer failed, saying it has no handler, answered", last)
		}
		if first.ID != uuid.UUID(printed.Id) || first.Note != "from the office" || first.State != CommandSucceeded ||
			!first.IssuedAt.Equal(time.UnixMicro(printed.IssuedAt).UTC()) || !first.Deadline.IsZero() || first.Withdrawn || first.Held {
			t.Errorf("the command issued first reads %+v; want print-test-page succeeded, with its note and time, no deadline", first)
		}
	})
}
