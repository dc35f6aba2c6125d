package server_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// rollCommand rolls a command out in a transaction of its own.
func (w *wishShop) rollCommand(req server.CommandRequest, scope server.RolloutScope, opts server.RolloutOptions) server.CommandRollout {
	w.t.Helper()
	var ro server.CommandRollout
	w.inTx(func(tx pgx.Tx) error {
		var err error
		ro, err = server.RollCommand(w.ctx, w.s, tx, req, scope, opts)
		return err
	})
	return ro
}

// rolledStatus advances the command rollouts and reads one.
func (w *wishShop) rolledStatus(id int64) server.CommandRolloutStatus {
	w.t.Helper()
	if err := w.s.AdvanceCommandRollouts(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	st, err := w.s.CommandRolloutStatus(w.ctx, id)
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// issuedTo lists the rollout's commands by replica.
func (w *wishShop) issuedTo(name string) map[uuid.UUID]uuid.UUID {
	w.t.Helper()
	list, err := w.s.Commands(w.ctx, server.CommandScope{Name: name})
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[uuid.UUID]uuid.UUID{}
	for _, c := range list.Commands {
		out[c.Replica] = c.ID
	}
	return out
}

// A command rolled out in stages goes to the first stage in the host's
// transaction, to the rest once every command of the first stage ended,
// and the rollout is done once every command ended.
func TestACommandRolledOutInStagesReachesTheRestOnceTheFirstEnded(t *testing.T) {
	t.Parallel()
	w := newCommandShop(t)
	regs := []uuid.UUID{w.register(), w.register(), w.register(), w.register()}
	ro := w.rollCommand(server.CommandRequest{Name: "print-test-page", Note: "every till"},
		server.RolloutScope{Replicas: regs}, server.RolloutOptions{FirstStage: 2})
	if ro.Replicas != 4 || ro.Issued != 2 {
		t.Fatalf("rolled out %+v; want 4 replicas, 2 issued", ro)
	}
	first := w.issuedTo("print-test-page")
	if len(first) != 2 || first[regs[0]] == uuid.Nil || first[regs[1]] == uuid.Nil {
		t.Fatalf("the first stage went to %v; want the first two replicas", first)
	}
	w.say(regs[0], first[regs[0]], syncpb.CommandState_COMMAND_STATE_SUCCEEDED, "", nil)
	if st := w.rolledStatus(ro.ID); st.Issued != 2 || st.State != server.RolloutRunning {
		t.Fatalf("with the first stage half ended: %+v; want it waiting", st)
	}
	w.say(regs[1], first[regs[1]], syncpb.CommandState_COMMAND_STATE_SUCCEEDED, "", nil)
	if st := w.rolledStatus(ro.ID); st.Issued != 4 {
		t.Fatalf("with the first stage ended: %d issued; want 4", st.Issued)
	}
	all := w.issuedTo("print-test-page")
	for _, r := range regs[2:] {
		w.say(r, all[r], syncpb.CommandState_COMMAND_STATE_SUCCEEDED, "", nil)
	}
	st := w.rolledStatus(ro.ID)
	if st.State != server.RolloutDone || st.Counts[server.CommandSucceeded] != 4 || st.Command.Name != "print-test-page" || st.Command.Note != "every till" {
		t.Fatalf("with every command ended: %+v; want done, 4 succeeded", st)
	}
}

// A command rollout whose failures pass its threshold aborts: it issues
// no further command, cancels those not started, and says why.
func TestACommandRolloutAbortsAboveItsThresholdAndCancelsWhatDidNotStart(t *testing.T) {
	t.Parallel()
	w := newCommandShop(t)
	for range 5 {
		w.register()
	}
	ro := w.rollCommand(server.CommandRequest{Name: "recount-drawer"}, server.RolloutScope{All: true},
		server.RolloutOptions{FirstStage: 4, AbortAbovePercent: 40, AbortAfter: 2})
	cmds := w.issuedTo("recount-drawer")
	var order []uuid.UUID
	for r := range cmds {
		order = append(order, r)
	}
	w.say(order[0], cmds[order[0]], syncpb.CommandState_COMMAND_STATE_FAILED, "the drawer is jammed", nil)
	if st := w.rolledStatus(ro.ID); st.State != server.RolloutRunning {
		t.Fatalf("after one failure of one ended (AbortAfter 2): %v; want running", st.State)
	}
	w.say(order[1], cmds[order[1]], syncpb.CommandState_COMMAND_STATE_RUNNING, "", nil)
	w.say(order[2], cmds[order[2]], syncpb.CommandState_COMMAND_STATE_FAILED, "the drawer is jammed", nil)
	st := w.rolledStatus(ro.ID)
	if st.State != server.RolloutAborted || !strings.Contains(st.Reason, "2 of the 2") || !strings.Contains(st.Reason, "the drawer is jammed") {
		t.Fatalf("after two failures of two ended: %v %q; want aborted, naming the counts and the reason", st.State, st.Reason)
	}
	if st.Issued != 4 {
		t.Errorf("%d issued; want the first stage's 4, and no more", st.Issued)
	}
	if c := w.commandOf(cmds[order[3]]); c.State != server.CommandCancelled {
		t.Errorf("a command not started: %v; want cancelled", c.State)
	}
	if c := w.commandOf(cmds[order[1]]); c.State != server.CommandRunning {
		t.Errorf("a command running: %v; want it left running", c.State)
	}
	if err := w.s.AbortCommandRollout(w.ctx, ro.ID, "again"); err == nil {
		t.Error("aborting an aborted rollout passed")
	}
}
