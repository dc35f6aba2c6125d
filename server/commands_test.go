package server_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// newCommandShop is a head office with commands on, its registers'
// settings declared.
func newCommandShop(t *testing.T) *wishShop {
	t.Helper()
	pool := newCapturePool(t)
	codecs := shoptest.Codecs(t, shoptest.Setting{}, shoptest.Currency{}, shoptest.Product{})
	opts := withCapture(server.Options{Replicas: shoptest.Replicas, Commands: true})
	shopserver.InstallTriggers(t, pool, codecs, opts)
	ctx := context.Background()
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	w := &wishShop{t: t, ctx: ctx, pool: pool, s: s, codecs: codecs, shop: uuid.New(), seq: map[uuid.UUID]uint64{}, applied: map[uuid.UUID]uint64{}}
	w.exec(`INSERT INTO shop.shops VALUES ($1, 'A')`, w.shop)
	return w
}

// issue asks replica to run a command, in a transaction of its own.
func (w *wishShop) issue(req server.CommandRequest) uuid.UUID {
	w.t.Helper()
	var id uuid.UUID
	w.inTx(func(tx pgx.Tx) error {
		var err error
		id, err = server.IssueCommand(w.ctx, w.s, tx, req)
		return err
	})
	return id
}

// commandsIn lists the commands the messages carried.
func commandsIn(msgs []*syncpb.ToReplica) []*syncpb.Command {
	var out []*syncpb.Command
	for _, m := range msgs {
		out = append(out, m.GetDown().GetCommands()...)
	}
	return out
}

// say sends a register's word on a command.
func (w *wishShop) say(replica, id uuid.UUID, state syncpb.CommandState, reason string, result []byte) {
	w.t.Helper()
	w.upload(replica, &syncpb.Up{CommandAnswers: []*syncpb.CommandAnswer{{Id: id[:], State: state, Reason: reason,
		Result: result, AnsweredAt: time.Now().UnixMicro()}}})
}

func (w *wishShop) commandOf(id uuid.UUID) server.Command {
	w.t.Helper()
	c, err := w.s.CommandOf(w.ctx, w.pool, id)
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

// A command goes to its replica alone, and its answers move it through
// delivered and running to succeeded, with the handler's result; once it
// ended, the replica is told it is withdrawn.
func TestACommandReachesItsReplicaAndItsAnswersAreShown(t *testing.T) {
	t.Parallel()
	w := newCommandShop(t)
	reg, other := w.register(), w.register()
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	id := w.issue(server.CommandRequest{Replica: reg, Name: "print-test-page", Params: []byte(`{"copies":2}`), Note: "from the office", Deadline: deadline})
	if c := w.commandOf(id); c.State != server.CommandQueued || c.Name != "print-test-page" || !c.Deadline.Equal(deadline) {
		t.Fatalf("just issued: %+v; want queued, named, with its deadline", c)
	}
	w.pass()
	got := commandsIn(w.drain(reg))
	if len(got) != 1 || !bytes.Equal(got[0].Id, id[:]) || got[0].Name != "print-test-page" || string(got[0].Params) != `{"copies":2}` ||
		got[0].Note != "from the office" || got[0].Deadline != deadline.UnixMicro() || got[0].Withdrawn {
		t.Fatalf("the register was sent %v; want the command", got)
	}
	if others := commandsIn(w.drain(other)); len(others) != 0 {
		t.Fatalf("another register was sent %v; want nothing", others)
	}
	for _, step := range []struct {
		say  syncpb.CommandState
		want server.CommandState
	}{
		{syncpb.CommandState_COMMAND_STATE_DELIVERED, server.CommandDelivered},
		{syncpb.CommandState_COMMAND_STATE_RUNNING, server.CommandRunning},
		{syncpb.CommandState_COMMAND_STATE_DELIVERED, server.CommandRunning}, // an older word changes nothing
		{syncpb.CommandState_COMMAND_STATE_SUCCEEDED, server.CommandSucceeded},
		{syncpb.CommandState_COMMAND_STATE_FAILED, server.CommandSucceeded}, // an end is an end
	} {
		w.say(reg, id, step.say, "", []byte("printed"))
		if c := w.commandOf(id); c.State != step.want {
			t.Fatalf("after the register said %v: %v; want %v", step.say, c.State, step.want)
		}
	}
	c := w.commandOf(id)
	if string(c.Result) != "printed" || c.EndedAt.IsZero() {
		t.Errorf("ended: result %q, ended at %v; want the handler's result and an end time", c.Result, c.EndedAt)
	}
	w.pass()
	got = commandsIn(w.drain(reg))
	if len(got) != 1 || !got[0].Withdrawn || !bytes.Equal(got[0].Id, id[:]) {
		t.Fatalf("after it ended, the register was sent %v; want it withdrawn", got)
	}
}

// A command its replica has not started can be cancelled; one it started
// cannot, and a replica that started one before it heard of the cancel
// has its word taken: what happened stands.
func TestCancellingACommandBeforeAndAfterItStarted(t *testing.T) {
	t.Parallel()
	w := newCommandShop(t)
	reg := w.register()
	cancel := func(id uuid.UUID) server.CommandState {
		var st server.CommandState
		w.inTx(func(tx pgx.Tx) error {
			var err error
			st, err = w.s.CancelCommand(w.ctx, tx, id, "not needed")
			return err
		})
		return st
	}
	early := w.issue(server.CommandRequest{Replica: reg, Name: "recount-drawer"})
	if st := cancel(early); st != server.CommandCancelled {
		t.Fatalf("cancelling a queued command: %v; want cancelled", st)
	}
	if c := w.commandOf(early); c.State != server.CommandCancelled || c.Reason != "not needed" {
		t.Fatalf("cancelled: %+v", c)
	}
	running := w.issue(server.CommandRequest{Replica: reg, Name: "recount-drawer"})
	w.say(reg, running, syncpb.CommandState_COMMAND_STATE_RUNNING, "", nil)
	if st := cancel(running); st != server.CommandRunning {
		t.Fatalf("cancelling a running command: %v; want it left running", st)
	}
	raced := w.issue(server.CommandRequest{Replica: reg, Name: "recount-drawer"})
	cancel(raced)
	w.say(reg, raced, syncpb.CommandState_COMMAND_STATE_SUCCEEDED, "", []byte("42.00"))
	if c := w.commandOf(raced); c.State != server.CommandSucceeded || string(c.Result) != "42.00" {
		t.Fatalf("a command the register ran before it heard the cancel: %+v; want succeeded, with its result", c)
	}
	_, err := w.s.CancelCommand(w.ctx, nil, uuid.New(), "")
	if err == nil {
		t.Fatal("cancelling with no transaction passed")
	}
	var st server.CommandState
	tx, err := w.s.Begin(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(w.ctx) //nolint:errcheck // read only
	if st, err = w.s.CancelCommand(w.ctx, tx, uuid.New(), ""); !errors.Is(err, server.ErrUnknownCommand) {
		t.Fatalf("cancelling an unknown command: %v, %v; want ErrUnknownCommand", st, err)
	}
}

// A command whose deadline passed before it started shows expired, and its
// replica is told it is withdrawn; one that started before its deadline
// does not expire.
func TestACommandPastItsDeadlineExpires(t *testing.T) {
	t.Parallel()
	w := newCommandShop(t)
	reg := w.register()
	soon := time.Now().Add(50 * time.Millisecond)
	late := w.issue(server.CommandRequest{Replica: reg, Name: "recount-drawer", Deadline: soon})
	started := w.issue(server.CommandRequest{Replica: reg, Name: "print-test-page", Deadline: soon})
	w.say(reg, started, syncpb.CommandState_COMMAND_STATE_RUNNING, "", nil)
	w.pass()
	w.drain(reg)
	time.Sleep(time.Until(soon) + 10*time.Millisecond) // the deadline is a time: nothing signals it
	if err := w.s.ExpireCommands(w.ctx); err != nil {
		t.Fatal(err)
	}
	if c := w.commandOf(late); c.State != server.CommandExpired || c.Reason == "" {
		t.Fatalf("past its deadline: %+v; want expired, saying why", c)
	}
	if c := w.commandOf(started); c.State != server.CommandRunning {
		t.Fatalf("started before its deadline: %v; want running", c.State)
	}
	w.pass()
	got := commandsIn(w.drain(reg))
	if len(got) != 1 || !got[0].Withdrawn || !bytes.Equal(got[0].Id, late[:]) {
		t.Fatalf("after it expired, the register was sent %v; want it withdrawn", got)
	}
}

// Commands lists those needing attention first, and counts every state;
// a scope narrows it.
func TestCommandsListsThoseNeedingAttentionFirst(t *testing.T) {
	t.Parallel()
	w := newCommandShop(t)
	a, b := w.register(), w.register()
	ok := w.issue(server.CommandRequest{Replica: a, Name: "print-test-page"})
	failed := w.issue(server.CommandRequest{Replica: a, Name: "print-test-page"})
	queued := w.issue(server.CommandRequest{Replica: b, Name: "recount-drawer"})
	w.say(a, ok, syncpb.CommandState_COMMAND_STATE_SUCCEEDED, "", nil)
	w.say(a, failed, syncpb.CommandState_COMMAND_STATE_FAILED, "out of paper", nil)
	list, err := w.s.Commands(w.ctx, server.CommandScope{})
	if err != nil {
		t.Fatal(err)
	}
	var order []uuid.UUID
	for _, c := range list.Commands {
		order = append(order, c.ID)
	}
	if want := []uuid.UUID{failed, queued, ok}; len(order) != 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Errorf("listed %v; want failed, queued, succeeded: %v", order, want)
	}
	if list.Counts[server.CommandFailed] != 1 || list.Counts[server.CommandQueued] != 1 || list.Counts[server.CommandSucceeded] != 1 {
		t.Errorf("counts %v", list.Counts)
	}
	if list.Commands[0].Reason != "out of paper" {
		t.Errorf("the failed command's reason: %q", list.Commands[0].Reason)
	}
	mine, err := w.s.Commands(w.ctx, server.CommandScope{Replica: b})
	if err != nil {
		t.Fatal(err)
	}
	if len(mine.Commands) != 1 || mine.Commands[0].ID != queued {
		t.Errorf("register b's commands: %v; want the queued one", mine.Commands)
	}
	named, err := w.s.Commands(w.ctx, server.CommandScope{Name: "print-test-page"})
	if err != nil {
		t.Fatal(err)
	}
	if len(named.Commands) != 2 {
		t.Errorf("print-test-page commands: %d; want 2", len(named.Commands))
	}
}

// What cannot be a command is refused before anything is written, with
// an error a caller can tell apart; so is a command of no known replica,
// and every call of a server whose commands are off.
func TestCommandsRefuseWhatCannotBeOne(t *testing.T) {
	t.Parallel()
	w := newCommandShop(t)
	reg := w.register()
	for _, tc := range []struct {
		name string
		req  server.CommandRequest
		want error
	}{
		{"no name", server.CommandRequest{Replica: reg}, server.ErrBadCommand},
		{"a name too long", server.CommandRequest{Replica: reg, Name: string(bytes.Repeat([]byte("x"), server.MaxCommandNameBytes+1))}, server.ErrBadCommand},
		{"a name not text", server.CommandRequest{Replica: reg, Name: "a\x00b"}, server.ErrBadCommand},
		{"an unknown replica", server.CommandRequest{Replica: uuid.New(), Name: "x"}, server.ErrUnknownReplica},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := w.s.Begin(w.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(w.ctx) //nolint:errcheck // refused
			if _, err := server.IssueCommand(w.ctx, w.s, tx, tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("issued with %v; want %v", err, tc.want)
			}
		})
	}
	off := newWishShop(t)
	tx, err := off.s.Begin(off.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(off.ctx) //nolint:errcheck // refused
	if _, err := server.IssueCommand(off.ctx, off.s, tx, server.CommandRequest{Replica: reg, Name: "x"}); !errors.Is(err, server.ErrCommandsOff) {
		t.Fatalf("a server without commands issued one with %v; want ErrCommandsOff", err)
	}
}

// Each change a replica's answer makes to a command is an event a host
// can follow, naming the command and where it stands; an answer that
// changes nothing is none.
func TestACommandsAnswersAreEvents(t *testing.T) {
	t.Parallel()
	w := newCommandShop(t)
	reg := w.register()
	start := positionNow(t, w.s)
	id := w.issue(server.CommandRequest{Replica: reg, Name: "print-test-page"})
	w.say(reg, id, syncpb.CommandState_COMMAND_STATE_RUNNING, "", nil)
	w.say(reg, id, syncpb.CommandState_COMMAND_STATE_DELIVERED, "", nil) // older: nothing
	w.say(reg, id, syncpb.CommandState_COMMAND_STATE_SUCCEEDED, "", []byte("ok"))
	evs, _ := eventsAfter(t, w.s, start, 100)
	var got []server.CommandState
	for _, e := range evs {
		if e.Kind != server.CommandAnswered {
			continue
		}
		if e.Command != id || e.Replica != reg {
			t.Errorf("an event names command %s of %s; want %s of %s", e.Command, e.Replica, id, reg)
		}
		got = append(got, e.CommandState)
	}
	if want := []server.CommandState{server.CommandRunning, server.CommandSucceeded}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("the command's events say %v; want %v", got, want)
	}
}

// Status, and StatusOf without a Server, count each replica's commands by
// where they stand, those under way and those ended alike.
func TestStatusCountsEachReplicasCommands(t *testing.T) {
	t.Parallel()
	w := newCommandShop(t)
	reg, other := w.register(), w.register()
	done := w.issue(server.CommandRequest{Replica: reg, Name: "print-test-page"})
	w.issue(server.CommandRequest{Replica: reg, Name: "recount-drawer"})
	w.pass()
	w.drain(reg)
	w.say(reg, done, syncpb.CommandState_COMMAND_STATE_SUCCEEDED, "", nil)

	sts, err := w.s.Status(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	of, err := server.StatusOf(w.ctx, w.pool, "")
	if err != nil {
		t.Fatal(err)
	}
	for how, list := range map[string][]server.ReplicaStatus{"Status": sts, "StatusOf": of} {
		counts := map[uuid.UUID]map[server.CommandState]int{}
		for _, st := range list {
			counts[st.ID] = st.Commands
		}
		if got := counts[reg]; len(got) != 2 || got[server.CommandSucceeded] != 1 || got[server.CommandQueued] != 1 {
			t.Errorf("%s counts the register's commands %v; want one succeeded, one queued", how, got)
		}
		if got, ok := counts[other]; !ok || got != nil {
			t.Errorf("%s counts the other register's commands %v (listed %v); want none", how, got, ok)
		}
	}
}
