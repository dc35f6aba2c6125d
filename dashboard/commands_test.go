package dashboard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/server"
)

var _ CommandLister = (*server.Server)(nil)

// commandSource lists fixed commands and command rollouts; off, it says
// commands are off.
type commandSource struct {
	fakeSource
	list     server.CommandList
	rollouts []server.CommandRolloutStatus
	off      bool
}

func (c commandSource) Commands(context.Context, server.CommandScope) (server.CommandList, error) {
	if c.off {
		return server.CommandList{}, server.ErrCommandsOff
	}
	return c.list, nil
}

func (c commandSource) CommandRollouts(context.Context) ([]server.CommandRolloutStatus, error) {
	return c.rollouts, nil
}

// The commands' page shows, in plain words, the counts with what each
// state needing attention asks, every command rolled out counted as a
// rollout is, and each command with its result or why it did not run.
func TestCommandsPage(t *testing.T) {
	t.Parallel()
	reg := uuid.MustParse("00000000-0000-4000-8000-000000000002")
	src := commandSource{fakeSource: fakeSource{st: fleet()},
		list: server.CommandList{Counts: map[server.CommandState]int{server.CommandExpired: 1, server.CommandSucceeded: 1}, Commands: []server.Command{
			{ID: uuid.New(), Replica: reg, Name: "recount-drawer", State: server.CommandExpired, Reason: "its deadline passed before it started",
				IssuedAt: testNow.Add(-10 * time.Minute), Deadline: testNow.Add(-9 * time.Minute)},
			{ID: uuid.New(), Replica: reg, Name: "print-test-page", State: server.CommandSucceeded, Result: []byte("printed <ok>"),
				Note: "ann", IssuedAt: testNow.Add(-time.Minute), AnsweredAt: testNow},
		}},
		rollouts: []server.CommandRolloutStatus{{ID: 4, Command: server.CommandRequest{Name: "reboot"}, Scope: server.RolloutScope{All: true},
			State: server.RolloutAborted, Reason: "2 of the 2 replicas whose command ended failed", Replicas: 5, Issued: 2,
			Counts: map[server.CommandState]int{server.CommandFailed: 2}, Failure: "the disk is full", CreatedAt: testNow.Add(-time.Hour)}},
	}
	body := wishPage(t, src, "/commands")
	if strings.Contains(body, "printed <ok>") {
		t.Error("a result is not escaped")
	}
	got := text(body)
	for _, s := range []string{
		"1 expired, 1 succeeded.", "Expired: its deadline passed before the replica started it",
		"recount-drawer", "Why its deadline passed before it started",
		"print-test-page", "Result printed &lt;ok&gt;", "Asked by ann",
		"reboot to every replica stopped", "Asked of 2 of 5 replicas; the other 3 never will be.", "2 failed.",
		"Most failures say: the disk is full", "Its commands not yet started were cancelled.",
	} {
		if !strings.Contains(got, s) {
			t.Errorf("the page does not say %q:\n%s", s, got)
		}
	}
	if strings.Index(got, "recount-drawer") > strings.Index(got, "print-test-page") {
		t.Error("the expired command is not listed before the one that succeeded")
	}
	src.off = true
	if got := text(wishPage(t, src, "/commands")); !strings.Contains(got, "Commands are off on this server") {
		t.Errorf("a server with commands off: %s", got)
	}
}
