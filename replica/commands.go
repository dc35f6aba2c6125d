// Commands, one-shot actions the server asks of this replica: recording
// them as a message applies (and staging a provisioning's), running them
// one at a time through their handlers — each at most once, even across a
// crash — and the answers that go up.

package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// CommandState is where a command stands: magicsync.CommandState, whose
// values are documented there. A replica's commands are never queued:
// they are delivered once it holds them.
type CommandState = magicsync.CommandState

// The states of a command a replica holds (magicsync's).
const (
	CommandDelivered   = magicsync.CommandDelivered
	CommandRunning     = magicsync.CommandRunning
	CommandSucceeded   = magicsync.CommandSucceeded
	CommandFailed      = magicsync.CommandFailed
	CommandInterrupted = magicsync.CommandInterrupted
	CommandExpired     = magicsync.CommandExpired
	CommandCancelled   = magicsync.CommandCancelled
)

// Command is a command as its handler is handed it.
type Command struct {
	// ID names the command; the server's CommandOf reads it by this id.
	ID uuid.UUID
	// Name is the name it was issued under, which chose the handler.
	Name string
	// Params are the server's, as it gave them (nil: none).
	Params []byte
	// Note says who asked, or why.
	Note     string
	IssuedAt time.Time
	// Deadline is zero for a command without one. The handler's context
	// does not end at it: a command started before its deadline may
	// finish after it.
	Deadline time.Time
}

// CommandHandler runs one command, and returns its result — sent to the
// server, at most MaxCommandResult bytes — or an error, whose text is
// sent as the reason the command failed. It is called once the message
// that brought the command committed, with no transaction open, in
// Run's goroutine: commands run one at a time, in the order they were
// issued, each up to Settings.CommandsTimeout, after which its context
// ends.
//
// It is called at most once per command. A replica that stops while a
// handler runs — a crash, a power cut — answers the command interrupted
// when it starts again, and never calls the handler for it again: unlike
// a wish, a command need not be safe to run twice.
type CommandHandler func(ctx context.Context, c Command) (result []byte, err error)

// Commands maps each command name this build runs to its handler. A
// command of a name it does not hold fails, saying so.
type Commands map[string]CommandHandler

// MaxCommandResult bounds what a handler may return: a longer result
// fails the command, saying so, rather than weigh down the upload.
const MaxCommandResult = 64 << 10

// recordCommands records a message's commands in its transaction, or,
// for a provisioning's part (snapshot not zero), stages them.
func (a *applier) recordCommands(ctx context.Context, cs []*syncpb.Command, snapshot uint64) error {
	now := a.r.clock.Now().UnixMicro()
	for _, c := range cs {
		var q string
		var args []any
		switch {
		case c.GetWithdrawn() && snapshot != 0:
			q, args = unstageCommand, []any{snapshot, c.GetId()}
		case c.GetWithdrawn():
			q, args = withdrawCommand, []any{c.GetId(), now}
		case snapshot != 0:
			q, args = stageCommand, []any{snapshot, c.GetId(), c.GetName(), nonNil(c.GetParams()), c.GetNote(),
				c.GetIssuedAt(), c.GetDeadline(), c.GetStarted(), a.msg}
		default:
			state, reason, at := CommandDelivered, "", any(nil)
			if c.GetStarted() {
				state, reason, at = CommandInterrupted, noRecordOfStart, now
			}
			q, args = recordCommand, []any{c.GetId(), c.GetName(), nonNil(c.GetParams()), c.GetNote(),
				c.GetIssuedAt(), c.GetDeadline(), a.msg, int(state), reason, at}
		}
		res, err := a.exec(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("recording command %x: %w", c.GetId(), err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			a.commandsChanged = true
		}
	}
	return nil
}

// noRecordOfStart is why a command the server says the replica started,
// which it holds no record of, is answered interrupted.
const noRecordOfStart = "the server heard this replica start it, and the replica holds no record of it (restored from an older copy?): it is not run again"

// switchInCommands takes a provisioning's commands: those it does not
// hold are recorded, those the server no longer asks are withdrawn, and
// every answer held goes up again.
func (a *applier) switchInCommands(ctx context.Context, snapshot uint64) error {
	now := a.r.clock.Now().UnixMicro()
	for _, st := range []struct {
		q    string
		args []any
	}{
		{withdrawCommandsNotStaged, []any{snapshot, now}},
		{switchInCommands, []any{snapshot, noRecordOfStart, now}},
		{resendCommandAnswers, nil},
	} {
		if _, err := a.exec(ctx, st.q, st.args...); err != nil {
			return fmt.Errorf("provisioning the commands: %w", err)
		}
	}
	a.commandsChanged = true
	return nil
}

// commandAnswersDue lists the answers on commands due to go up, at most
// limit.
func commandAnswersDue(ctx context.Context, conn *sql.Conn, stale int64, limit int) ([]*syncpb.CommandAnswer, error) {
	return queryAll(ctx, conn, func(rows *sql.Rows, a **syncpb.CommandAnswer) error {
		ans := &syncpb.CommandAnswer{}
		var state int32
		var at sql.NullInt64
		if err := rows.Scan(&ans.Id, &state, &ans.Reason, &ans.Result, &at); err != nil {
			return err
		}
		ans.State, ans.AnsweredAt = syncpb.CommandState(state), at.Int64
		*a = ans
		return nil
	}, selectCommandAnswersDue, stale, limit)
}

// commandRunner is what the replica keeps to run its commands: a wake-up
// its loop listens to.
type commandRunner struct {
	wake chan struct{}
}

// init makes the runner's channel.
func (cr *commandRunner) init() { cr.wake = make(chan struct{}, 1) }

// ask wakes the loop, when it runs, to look for commands to run.
func (cr *commandRunner) ask() {
	select {
	case cr.wake <- struct{}{}:
	default:
	}
}

// runCommands is the loop of the commands, until ctx ends: it first
// answers interrupted any command a stopped replica left running, then
// runs the commands delivered, one at a time, as Run starts and whenever
// a message brought one. A failure to record tries again after a backoff.
func (r *Replica) runCommands(ctx context.Context) {
	failures := 0
	interrupted := false
	for ctx.Err() == nil {
		err := r.runDueCommands(ctx, &interrupted)
		if ctx.Err() != nil {
			return
		}
		var retry <-chan time.Time
		if err != nil {
			failures++
			wait := r.backoff(failures)
			r.log.Warn("magicsync/replica: running commands failed; trying again", "failures", failures, "wait", wait, "err", err)
			retry = r.clock.After(wait)
		} else {
			failures = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-r.commands.wake:
		case <-retry:
		}
	}
}

// runDueCommands answers the commands left running interrupted (once per
// Run), forgets those ended long ago, then runs every command delivered.
func (r *Replica) runDueCommands(ctx context.Context, interrupted *bool) error {
	if !*interrupted {
		var n int64
		err := r.writeEngine(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, interruptRunning, interruptedReason, r.clock.Now().UnixMicro())
			if err != nil {
				return err
			}
			n, _ = res.RowsAffected()
			_, err = tx.ExecContext(ctx, forgetOldCommands, r.clock.Now().Add(-r.settings.CommandsKept).UnixMicro())
			return err
		})
		if err != nil {
			return fmt.Errorf("answering the commands left running: %w", err)
		}
		if n > 0 {
			r.log.Warn("magicsync/replica: commands left running when the replica stopped are answered interrupted, and not run again", "commands", n)
			r.lane("main").poke()
		}
		*interrupted = true
	}
	for ctx.Err() == nil {
		c, ok, err := r.nextCommand(ctx)
		if err != nil || !ok {
			return err
		}
		if err := r.runCommand(ctx, c); err != nil {
			return err
		}
		r.lane("main").poke()
	}
	return nil
}

// interruptedReason is why a command left running is interrupted.
const interruptedReason = "the replica stopped while its handler ran: it may have run, and is not run again"

// nextCommand reads the oldest command delivered.
func (r *Replica) nextCommand(ctx context.Context) (Command, bool, error) {
	var c Command
	var id []byte
	var issued, deadline int64
	err := r.db.QueryRowContext(ctx, nextCommand).Scan(&id, &c.Name, &c.Params, &c.Note, &issued, &deadline)
	if errors.Is(err, sql.ErrNoRows) {
		return Command{}, false, nil
	}
	if err != nil {
		return Command{}, false, fmt.Errorf("reading the next command: %w", err)
	}
	copy(c.ID[:], id)
	c.IssuedAt = time.UnixMicro(issued).UTC()
	if deadline > 0 {
		c.Deadline = time.UnixMicro(deadline).UTC()
	}
	if len(c.Params) == 0 {
		c.Params = nil
	}
	return c, true, nil
}

// runCommand runs one command delivered: it answers expired one past its
// deadline and failed one of a name this build has no handler for;
// otherwise it records it running — committed before the handler is
// called, so that a crash leaves it interrupted, never run again — calls
// the handler and records what it returned.
func (r *Replica) runCommand(ctx context.Context, c Command) error {
	now := r.clock.Now()
	h := r.settings.Commands[c.Name]
	switch {
	case !c.Deadline.IsZero() && now.After(c.Deadline):
		return r.setCommandState(ctx, c, CommandDelivered, CommandExpired, strings.ReplaceAll(expiredHere, "''", "'"), nil)
	case h == nil:
		return r.setCommandState(ctx, c, CommandDelivered, CommandFailed, fmt.Sprintf("this build of the replica has no handler for command %q", c.Name), nil)
	}
	if err := r.setCommandState(ctx, c, CommandDelivered, CommandRunning, "", nil); err != nil {
		return err
	}
	r.lane("main").poke()
	result, err := r.callHandler(ctx, h, c)
	state, reason := CommandSucceeded, ""
	switch {
	case err != nil:
		state, reason, result = CommandFailed, safetext.Reason(err.Error()), nil
	case len(result) > MaxCommandResult:
		state, reason, result = CommandFailed, fmt.Sprintf("its handler returned %d bytes, more than the %d a result may hold", len(result), MaxCommandResult), nil
	}
	// Recorded even when ctx ended meanwhile: the handler ran.
	return r.setCommandState(context.WithoutCancel(ctx), c, CommandRunning, state, reason, result)
}

// callHandler calls h with a context that ends after CommandsTimeout (or
// with ctx), turning a panic into an error.
func (r *Replica) callHandler(ctx context.Context, h CommandHandler, c Command) (result []byte, err error) {
	hctx, cancel := context.WithTimeout(ctx, r.settings.CommandsTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("magicsync/replica: a command's handler panicked", "command", c.Name, "id", c.ID, "panic", p, "stack", string(debug.Stack()))
			result, err = nil, fmt.Errorf("its handler panicked: %v", p)
		}
	}()
	result, err = h(hctx, c)
	if err == nil && hctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("its handler did not return within %v", r.settings.CommandsTimeout)
	}
	return result, err
}

// setCommandState records command c's new state, from the state it must
// still have.
func (r *Replica) setCommandState(ctx context.Context, c Command, from, to CommandState, reason string, result []byte) error {
	err := r.writeEngine(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, setCommandState, c.ID[:], int(to), reason, result, r.clock.Now().UnixMicro(), int(from))
		return err
	})
	if err != nil {
		return fmt.Errorf("recording command %s %v: %w", c.ID, to, err)
	}
	return nil
}

// CommandCounts counts a replica's commands by where they stand.
type CommandCounts map[CommandState]int

// countCommands reads the commands' counts by state.
func countCommands(ctx context.Context, q rowsQuerier) (CommandCounts, error) {
	counts := CommandCounts{}
	rows, err := q.QueryContext(ctx, countCommandStates)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var state CommandState
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			return nil, err
		}
		counts[state] = n
	}
	return counts, rows.Err()
}
