package kit

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/server"
)

// EchoCommand is the command every replica under test runs: its handler
// succeeds, its result the command's params as they came.
const EchoCommand = "echo"

// commands is the case of the commands (PROTOCOL.md, section 10,
// "Commands"): the replica must run the echo command once and answer
// SUCCEEDED with the params as its result; answer FAILED, with a reason,
// a command of a name it has no handler for; and answer EXPIRED, never
// running it, a command whose deadline passed before it started.
func commands(ctx context.Context, r *run) error {
	engine, pool := r.o.current()
	issue := func(req server.CommandRequest) (uuid.UUID, error) {
		req.Replica = r.id
		var id uuid.UUID
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			id, err = server.IssueCommand(ctx, engine, tx, req)
			return err
		})
		if err != nil {
			return uuid.Nil, fmt.Errorf("the kit could not issue command %q: %w", req.Name, err)
		}
		return id, nil
	}
	echo, err := issue(server.CommandRequest{Name: EchoCommand, Params: []byte("hello from the kit"), Note: "conformance kit"})
	if err != nil {
		return err
	}
	unknown, err := issue(server.CommandRequest{Name: "no-such-command"})
	if err != nil {
		return err
	}
	late, err := issue(server.CommandRequest{Name: EchoCommand, Params: []byte("too late"), Deadline: time.Now().Add(-time.Minute)})
	if err != nil {
		return err
	}
	want := []struct {
		id    uuid.UUID
		what  string
		state server.CommandState
		check func(server.Command) string
	}{
		{echo, "the echo command", server.CommandSucceeded, func(c server.Command) string {
			if string(c.Result) != "hello from the kit" {
				return fmt.Sprintf("the echo command succeeded with result %q: want its params, %q", c.Result, "hello from the kit")
			}
			return ""
		}},
		{unknown, "a command of a name the replica has no handler for", server.CommandFailed, func(c server.Command) string {
			if c.Reason == "" {
				return "a command of a name the replica has no handler for failed without a reason: say why (\"no handler for command ...\")"
			}
			return ""
		}},
		// The server may end it first, by its own clock; the replica must
		// not have run it either way.
		{late, "a command past its deadline", server.CommandExpired, nil},
	}
	return r.eventually(ctx, func() (bool, string) {
		for _, w := range want {
			c, err := engine.CommandOf(ctx, pool, w.id)
			if err != nil {
				return false, "reading the head office's commands: " + err.Error()
			}
			if c.State != w.state {
				if c.State.Final() {
					return false, fmt.Sprintf("the replica answered %s %v (%q): it must answer %v", w.what, c.State, c.Reason, w.state)
				}
				return false, fmt.Sprintf("%s stands %v at the head office: the replica must answer it %v", w.what, c.State, w.state)
			}
			if w.check != nil {
				if why := w.check(c); why != "" {
					return false, why
				}
			}
		}
		return true, ""
	})
}
