package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/safetext"
)

// commands_rollout.go holds command rollouts: one command issued to many
// replicas (RollCommand), in stages and stopped when too many fail
// (AdvanceCommandRollouts, which Run calls), and their counts
// (CommandRolloutStatus, CommandRollouts). They share the scope and the
// options of the rollouts of wishes.

// CommandRollout is a command rollout RollCommand made.
type CommandRollout struct {
	// ID names it to CommandRolloutStatus and AbortCommandRollout.
	ID int64
	// Replicas is how many replicas the scope held; Issued how many of
	// them RollCommand issued the command to (the first stage).
	Replicas int
	Issued   int
}

// CommandRolloutStatus is a command rollout with its counts, read in one
// query.
type CommandRolloutStatus struct {
	ID      int64
	Command CommandRequest
	// Scope and Options are as RollCommand was given them, except that
	// Scope does not list the replicas of a rollout to a list of them.
	Scope   RolloutScope
	Options RolloutOptions
	State   RolloutState
	// Reason says why it was aborted.
	Reason string
	// Replicas is how many replicas are in scope; Issued how many of them
	// were issued the command so far.
	Replicas int
	Issued   int
	// Counts counts its commands by state.
	Counts map[CommandState]int
	// Failure is the most frequent reason of its commands that failed,
	// were interrupted or expired ("" if none).
	Failure string
	// Scheduled is true while its StartAt has not come: no command of it
	// is issued yet.
	Scheduled bool
	CreatedAt time.Time
	EndedAt   time.Time
	// firstOpen counts the first stage's commands not ended.
	firstOpen int
}

// RollCommand issues the command req names (its Replica is ignored) to
// every replica of scope, in the host's transaction tx, as IssueCommand
// would to each: with opts.FirstStage, only the first stage is issued
// here, and Run issues the rest once every command of the first stage
// ended (see AdvanceCommandRollouts). opts.AbortAbovePercent judges the
// commands that failed, were interrupted or expired among those that
// ended; an abort issues no further command and cancels those not
// started yet. opts.By has no meaning for a command and is refused.
// Rolled back with tx, no rollout and no command was made.
//
// The scope is read in tx: replicas joining the group later are not
// issued the command. A scope of no replica is an error.
func RollCommand(ctx context.Context, s *Server, tx pgx.Tx, req CommandRequest, scope RolloutScope, opts RolloutOptions) (CommandRollout, error) {
	if s.m.commands == nil {
		return CommandRollout{}, ErrCommandsOff
	}
	if tx == nil {
		return CommandRollout{}, errNoTx
	}
	if err := checkCommandName(req.Name); err != nil {
		return CommandRollout{}, err
	}
	if err := opts.check(); err != nil {
		return CommandRollout{}, err
	}
	if len(opts.By) > 0 {
		return CommandRollout{}, fmt.Errorf("%w: RolloutOptions.By finds a setting's row; a command rollout has none: leave it empty", ErrBadCommand)
	}
	if !opts.Window.IsZero() || !opts.Deadline.IsZero() {
		return CommandRollout{}, fmt.Errorf("%w: RolloutOptions.Window and Deadline are a wish's; give a command rollout its deadline in the CommandRequest, and leave the window zero", ErrBadCommand)
	}
	replicas, err := s.rolloutScope(ctx, tx, scope)
	if err != nil {
		return CommandRollout{}, err
	}
	first := len(replicas)
	if opts.FirstStage > 0 && opts.FirstStage < first {
		first = opts.FirstStage
	}
	stages := make([]int16, len(replicas))
	for i := range replicas {
		stages[i] = 1
		if i >= first {
			stages[i] = 2
		}
	}
	req.Note = safetext.Text(req.Note, MaxNoteBytes)
	ro := CommandRollout{Replicas: len(replicas)}
	if err := tx.QueryRow(ctx, s.sql.of(qCommandRolloutInsert), req.Name, nonNilBytes(req.Params), req.Note, deadlineArg(req.Deadline),
		scope.Group, scope.All, opts.FirstStage, opts.AbortAbovePercent, opts.AbortAfter, deadlineArg(opts.StartAt)).Scan(&ro.ID); err != nil {
		return CommandRollout{}, fmt.Errorf("magicsync/server: roll command %q: %w", req.Name, err)
	}
	if _, err := tx.Exec(ctx, s.sql.of(qCommandRolloutReplicas), ro.ID, replicas, stages); err != nil {
		return CommandRollout{}, fmt.Errorf("magicsync/server: roll command %q: %w", req.Name, err)
	}
	if opts.StartAt.After(time.Now()) {
		return ro, nil // scheduled: Run issues its first stage when it comes
	}
	if ro.Issued, err = s.issueStage(ctx, tx, ro.ID, req, 1); err != nil {
		return CommandRollout{}, err
	}
	return ro, nil
}

// issueStage issues a command rollout's command to the replicas of stage
// not issued it yet, and returns how many.
func (s *Server) issueStage(ctx context.Context, tx pgx.Tx, id int64, req CommandRequest, stage int) (int, error) {
	rows, err := tx.Query(ctx, s.sql.of(qCommandRolloutUnissued), id, stage)
	if err != nil {
		return 0, fmt.Errorf("magicsync/server: command rollout %d: %w", id, err)
	}
	replicas, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, fmt.Errorf("magicsync/server: command rollout %d: %w", id, err)
	}
	ids := make([]uuid.UUID, len(replicas))
	for i := range ids {
		if ids[i], err = uuid.NewV7(); err != nil {
			return 0, fmt.Errorf("magicsync/server: command rollout %d: %w", id, err)
		}
	}
	tag, err := tx.Exec(ctx, s.sql.of(qCommandRolloutIssue), id, req.Name, nonNilBytes(req.Params), req.Note, deadlineArg(req.Deadline), stage, ids, replicas)
	if err != nil {
		return 0, fmt.Errorf("magicsync/server: command rollout %d: issuing stage %d: %w", id, stage, err)
	}
	return int(tag.RowsAffected()), nil
}

// CommandRolloutStatus reads a command rollout with its counts.
func (s *Server) CommandRolloutStatus(ctx context.Context, id int64) (CommandRolloutStatus, error) {
	if s.m.commands == nil {
		return CommandRolloutStatus{}, ErrCommandsOff
	}
	got, err := s.readCommandRollouts(ctx, s.pool, &id, 1)
	if err != nil {
		return CommandRolloutStatus{}, err
	}
	if len(got) == 0 {
		return CommandRolloutStatus{}, fmt.Errorf("%w: %d", ErrRolloutNotFound, id)
	}
	return got[0], nil
}

// CommandRollouts lists the newest command rollouts (at most 100), newest
// first, each with its counts.
func (s *Server) CommandRollouts(ctx context.Context) ([]CommandRolloutStatus, error) {
	if s.m.commands == nil {
		return nil, ErrCommandsOff
	}
	return s.readCommandRollouts(ctx, s.pool, nil, maxRolloutsListed)
}

// readCommandRollouts runs qCommandRolloutStatus through q.
func (s *Server) readCommandRollouts(ctx context.Context, q Querier, id *int64, limit int) ([]CommandRolloutStatus, error) {
	rows, err := q.Query(ctx, s.sql.of(qCommandRolloutStatus), id, limit)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: command rollouts: %w", err)
	}
	defer rows.Close()
	var out []CommandRolloutStatus
	for rows.Next() {
		var st CommandRolloutStatus
		var state string
		var deadline, endedAt, startAt *time.Time
		var counts []byte
		if err := rows.Scan(&st.ID, &st.Command.Name, &st.Command.Params, &st.Command.Note, &deadline, &st.Scope.Group, &st.Scope.All,
			&st.Options.FirstStage, &st.Options.AbortAbovePercent, &st.Options.AbortAfter, &state, &st.Reason, &st.CreatedAt, &endedAt,
			&startAt, &st.Scheduled, &st.Replicas, &st.Issued, &counts, &st.firstOpen, &st.Failure); err != nil {
			return nil, fmt.Errorf("magicsync/server: command rollouts: %w", err)
		}
		st.State = RolloutState(state)
		st.Command.Deadline, st.EndedAt, st.Options.StartAt = timeOrZero(deadline), timeOrZero(endedAt), timeOrZero(startAt)
		st.Options.Note = st.Command.Note
		var byState map[string]int
		if err := json.Unmarshal(counts, &byState); err != nil {
			return nil, fmt.Errorf("magicsync/server: command rollouts: counts: %w", err)
		}
		st.Counts = make(map[CommandState]int, len(byState))
		for k, n := range byState {
			v, err := strconv.Atoi(k)
			if err != nil {
				return nil, fmt.Errorf("magicsync/server: command rollouts: a state %q: %w", k, err)
			}
			st.Counts[CommandState(v)] = n
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("magicsync/server: command rollouts: %w", err)
	}
	return out, nil
}

// AbortCommandRollout stops a running command rollout: it issues the
// command to no further replica and cancels its commands not started yet.
// What ran stays as it ended. reason (who, or why) is shown as the
// rollout's Reason. A rollout that ended already is an error.
func (s *Server) AbortCommandRollout(ctx context.Context, id int64, reason string) error {
	if s.m.commands == nil {
		return ErrCommandsOff
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("magicsync/server: aborting command rollout %d: %w", id, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var state string
	if err := tx.QueryRow(ctx, s.sql.of(qCommandRolloutLock), id).Scan(&state); errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %d", ErrRolloutNotFound, id)
	} else if err != nil {
		return fmt.Errorf("magicsync/server: aborting command rollout %d: %w", id, err)
	}
	if RolloutState(state) != RolloutRunning {
		return fmt.Errorf("magicsync/server: aborting command rollout %d: it is %s already", id, state)
	}
	if err := s.endCommandRollout(ctx, tx, id, RolloutAborted, "aborted by the host: "+reason); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("magicsync/server: aborting command rollout %d: %w", id, err)
	}
	return nil
}

// endCommandRollout records a command rollout's end; an abort cancels its
// commands not started.
func (s *Server) endCommandRollout(ctx context.Context, tx pgx.Tx, id int64, state RolloutState, reason string) error {
	reason = safetext.Text(reason, safetext.MaxReason)
	if _, err := tx.Exec(ctx, s.sql.of(qCommandRolloutEnd), id, string(state), reason); err != nil {
		return fmt.Errorf("magicsync/server: ending command rollout %d: %w", id, err)
	}
	if state != RolloutAborted {
		return nil
	}
	if _, err := tx.Exec(ctx, s.sql.of(qCommandRolloutCancel), id, "its rollout was aborted: "+reason); err != nil {
		return fmt.Errorf("magicsync/server: command rollout %d: cancelling its commands: %w", id, err)
	}
	return nil
}

// AdvanceCommandRollouts moves the running command rollouts on, each in a
// transaction of its own: it aborts one whose failures exceed its
// threshold (naming the counts and the most frequent reason), issues the
// rest of a staged one whose first stage ended, and ends one whose every
// replica was issued the command and every command ended. Run calls it
// every PassEvery; call it yourself only where no Run runs. Rollouts
// another process is advancing are skipped.
func (s *Server) AdvanceCommandRollouts(ctx context.Context) error {
	if s.m.commands == nil {
		return nil
	}
	rows, err := s.pool.Query(ctx, s.sql.of(qCommandRolloutsRunning))
	if err != nil {
		return fmt.Errorf("magicsync/server: advancing command rollouts: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("magicsync/server: advancing command rollouts: %w", err)
	}
	var errs []error
	for _, id := range ids {
		if err := s.advanceCommandRollout(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// advanceCommandRollout is AdvanceCommandRollouts of one rollout.
func (s *Server) advanceCommandRollout(ctx context.Context, id int64) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("magicsync/server: command rollout %d: %w", id, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var req CommandRequest
	var deadline *time.Time
	if err := tx.QueryRow(ctx, s.sql.of(qCommandRolloutTryLock), id).Scan(&req.Name, &req.Params, &req.Note, &deadline); errors.Is(err, pgx.ErrNoRows) {
		return nil // ended, or another process holds it
	} else if err != nil {
		return fmt.Errorf("magicsync/server: command rollout %d: %w", id, err)
	}
	req.Deadline = timeOrZero(deadline)
	got, err := s.readCommandRollouts(ctx, tx, &id, 1)
	if err != nil || len(got) == 0 {
		return err
	}
	st := got[0]
	if st.Scheduled {
		return nil
	}
	failed := st.Counts[CommandFailed] + st.Counts[CommandInterrupted] + st.Counts[CommandExpired]
	ended := failed + st.Counts[CommandSucceeded] + st.Counts[CommandCancelled]
	open := st.Counts[CommandQueued] + st.Counts[CommandDelivered] + st.Counts[CommandRunning]
	switch {
	case st.Options.AbortAbovePercent > 0 && ended > 0 && ended >= st.Options.AbortAfter &&
		float64(failed)*100 > st.Options.AbortAbovePercent*float64(ended):
		why := fmt.Sprintf("%d of the %d replicas whose command ended failed (%.1f %%, above the %v %% allowed)",
			failed, ended, float64(failed)*100/float64(ended), st.Options.AbortAbovePercent)
		if st.Failure != "" {
			why += "; most often: " + st.Failure
		}
		err = s.endCommandRollout(ctx, tx, id, RolloutAborted, why)
	case st.Issued == 0 && !st.Options.StartAt.IsZero():
		// Its start came: the first stage, as RollCommand would have.
		_, err = s.issueStage(ctx, tx, id, req, 1)
	case st.Issued < st.Replicas && st.firstOpen == 0:
		_, err = s.issueStage(ctx, tx, id, req, 2)
	case st.Issued == st.Replicas && open == 0:
		err = s.endCommandRollout(ctx, tx, id, RolloutDone, "")
	default:
		return nil
	}
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("magicsync/server: command rollout %d: %w", id, err)
	}
	return nil
}

// nonNilBytes is b, or an empty slice for nil: a NOT NULL bytea.
func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// deadlineArg is a deadline as a statement's argument: NULL for none.
func deadlineArg(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	d := t.UTC()
	return &d
}
