package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// commands.go holds the server's half of commands: IssueCommand,
// CancelCommand, CommandOf and Commands, the commands' way down (the
// planner routes a row of sync_commands to its replica, as it routes a
// catalog row assigned to it) and their answers' way up.

// CommandState is where a command stands: magicsync.CommandState, whose
// values are documented there.
type CommandState = magicsync.CommandState

// The states of a command (magicsync's).
const (
	CommandQueued      = magicsync.CommandQueued
	CommandDelivered   = magicsync.CommandDelivered
	CommandRunning     = magicsync.CommandRunning
	CommandSucceeded   = magicsync.CommandSucceeded
	CommandFailed      = magicsync.CommandFailed
	CommandInterrupted = magicsync.CommandInterrupted
	CommandExpired     = magicsync.CommandExpired
	CommandCancelled   = magicsync.CommandCancelled
)

// ErrCommandsOff is wrapped by the errors of the command calls of a
// Server whose Options.Commands is false.
var ErrCommandsOff = errors.New("magicsync/server: commands are off: set Options.Commands, run Triggers' SQL again, and restart")

// ErrUnknownCommand is wrapped by the errors of CancelCommand and
// CommandOf for an id no command has.
var ErrUnknownCommand = errors.New("magicsync/server: no such command")

// ErrBadCommand is wrapped by the error of IssueCommand for a request
// that cannot be a command: its name is empty, too long or not text.
var ErrBadCommand = errors.New("magicsync/server: bad command")

// errNoTx is the error of a command call given no transaction.
var errNoTx = errors.New("magicsync/server: no transaction: pass the host's (Server.Begin, or its own pool's)")

// MaxCommandNameBytes bounds a command's name.
const MaxCommandNameBytes = 200

// CommandRequest is a command as IssueCommand writes it.
type CommandRequest struct {
	// Replica runs the command. Required.
	Replica uuid.UUID
	// Name names the action: the replica runs the handler registered
	// under it (replica.Settings.Commands). Required, at most
	// MaxCommandNameBytes of UTF-8.
	Name string
	// Params are handed to the handler as they are (JSON, say); nil is
	// none.
	Params []byte
	// Note says who asked, or why; it is kept made safe, as a wish's note
	// is, and sent with the command.
	Note string
	// Deadline, when not zero, is the time after which the replica does
	// not start the command and the server shows it expired. The server's
	// clock decides what the server shows; the replica does not start a
	// command past the deadline by its own clock either.
	Deadline time.Time
}

// Command is a command with where it stands, as CommandOf and Commands
// read it.
type Command struct {
	ID       uuid.UUID
	Replica  uuid.UUID
	Name     string
	Params   []byte
	Note     string
	IssuedAt time.Time
	// Deadline is zero for a command without one.
	Deadline time.Time
	State    CommandState
	// Reason says why it failed, was interrupted, expired or cancelled.
	Reason string
	// Result is the handler's, for a command that succeeded (nil for
	// one that returned none).
	Result []byte
	// AnsweredAt is when the state was last set: by the replica's clock
	// for its own word, by the server's for cancelled and expired.
	AnsweredAt time.Time
	// EndedAt is when the server took the command as ended; zero while
	// it is under way.
	EndedAt time.Time
}

// commandRow is a row of sync_commands as it travels down: the command,
// never its answer. The planner treats the table as a catalog assigned to
// the replica column, as it treats sync_wishes.
type commandRow struct {
	ID       uuid.UUID  `db:"id"`
	Replica  uuid.UUID  `db:"replica"`
	Name     string     `db:"name"`
	Params   []byte     `db:"params"`
	Note     string     `db:"note"`
	IssuedAt time.Time  `db:"issued_at"`
	Deadline *time.Time `db:"deadline"`
	Started  bool       `db:"started"`
}

// commandsTableName is the engine's table of commands under way.
const commandsTableName = "sync_commands"

// commandsTable returns the planner's view of sync_commands in the
// engine's schema: a catalog assigned to its replica column.
func commandsTable(engine engineSchema) (*table, error) {
	set, problems := codec.Compile([]any{commandRow{}}, func(any) codec.Table {
		// Declared under another name: the declarations refuse names
		// beginning sync_, which are the engine's, and this one is.
		return codec.Table{Schema: engine.name, Name: "commands", Mirror: codec.Catalog,
			Key: []string{"id"}, Sync: codec.NewRoute(codec.RouteAssigned, "replica", "")}
	})
	if len(problems) > 0 {
		return nil, fmt.Errorf("magicsync/server: the commands table: %v", problems)
	}
	tc := set.Tables()[0]
	tc.Name = commandsTableName
	t := &table{tc: tc, name: tc.Name, qname: tc.QualifiedName(), catalog: true,
		route: codec.RouteAssigned, routeCol: "replica"}
	for i, c := range tc.Columns {
		t.up = append(t.up, i)
		t.down = append(t.down, i)
		t.downNames = append(t.downNames, c.Name)
	}
	t.shape = tupleShape(tc, t.down)
	return t, nil
}

// IssueCommand asks a replica to run a command once, in the host's
// transaction tx: the command is written beside whatever else tx writes,
// and is sent once tx commits (the next pass routes it to its replica).
// Rolled back with tx, it was never asked. It returns the command's id,
// which CommandOf, Commands and CancelCommand take.
//
// The replica runs it at most once, through the handler registered under
// its name, and answers; a replica that stops while the handler runs
// answers interrupted and never runs it again. A replica the replicas
// table does not have is refused with an error wrapping
// ErrUnknownReplica; a name that is empty or too long with one wrapping
// ErrBadCommand.
func IssueCommand(ctx context.Context, s *Server, tx pgx.Tx, req CommandRequest) (uuid.UUID, error) {
	if s.m.commands == nil {
		return uuid.Nil, ErrCommandsOff
	}
	if tx == nil {
		return uuid.Nil, errNoTx
	}
	if err := checkCommandName(req.Name); err != nil {
		return uuid.Nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.Nil, fmt.Errorf("magicsync/server: issue command: %w", err)
	}
	var issued time.Time
	err = tx.QueryRow(ctx, s.sql.onReplicas(qIssueCommandFmt, s.m.replicas), id, req.Replica, req.Name, nonNilBytes(req.Params),
		safetext.Text(req.Note, MaxNoteBytes), deadlineArg(req.Deadline)).Scan(&issued)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, fmt.Errorf("%w %s: no row of %s has it", ErrUnknownReplica, req.Replica, s.m.replicas.qname())
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("magicsync/server: issue command %q: %w", req.Name, err)
	}
	return id, nil
}

// checkCommandName refuses a name that cannot be a command's.
func checkCommandName(name string) error {
	if name == "" || len(name) > MaxCommandNameBytes || safetext.Text(name, MaxCommandNameBytes) != name {
		return fmt.Errorf("%w: its name must be 1 to %d bytes of UTF-8 without NUL, not %q", ErrBadCommand, MaxCommandNameBytes, name)
	}
	return nil
}

// CancelCommand takes back a command its replica has not started, in the
// host's transaction tx, and returns where the command stands after:
// CommandCancelled, or the state it had reached (running, or an end),
// which a cancel no longer changes. A replica that started it before it
// heard of the cancel answers what it did, and the command shows that.
// why is kept as the reason. An unknown id is refused with an error
// wrapping ErrUnknownCommand.
func (s *Server) CancelCommand(ctx context.Context, tx pgx.Tx, id uuid.UUID, why string) (CommandState, error) {
	if s.m.commands == nil {
		return 0, ErrCommandsOff
	}
	if tx == nil {
		return 0, errNoTx
	}
	var gone uuid.UUID
	err := tx.QueryRow(ctx, s.sql.of(qCancelCommand), id, safetext.Text(why, safetext.MaxReason)).Scan(&gone)
	if err == nil {
		return CommandCancelled, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("magicsync/server: cancel command %s: %w", id, err)
	}
	var state int16
	if err := tx.QueryRow(ctx, s.sql.of(qCommandStateOf), id).Scan(&state); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("%w: %s", ErrUnknownCommand, id)
		}
		return 0, fmt.Errorf("magicsync/server: cancel command %s: %w", id, err)
	}
	return CommandState(state), nil
}

// ExpireCommands ends every command whose deadline passed before its
// replica started it: each shows CommandExpired. Run calls it every
// PassEvery; a host that does not Run may call it itself.
func (s *Server) ExpireCommands(ctx context.Context) error {
	if s.m.commands == nil {
		return nil
	}
	if _, err := s.pool.Exec(ctx, s.sql.of(qExpireCommands)); err != nil {
		return fmt.Errorf("magicsync/server: expiring commands: %w", err)
	}
	return nil
}

// deadlinesEvery is Run's service of the deadlines: every PassEvery, it
// expires the wishes and the commands past their deadline and moves the
// command rollouts on.
func (s *Server) deadlinesEvery(ctx context.Context) {
	if s.m.commands == nil && s.m.wishes == nil {
		return
	}
	s.every(ctx, s.opts.PassEvery, func(ctx context.Context) error {
		return errors.Join(s.ExpireWishes(ctx), s.ExpireCommands(ctx), s.AdvanceCommandRollouts(ctx))
	}, "magicsync/server: expiring wishes or commands, or advancing the command rollouts, fails; trying again until it works",
		"magicsync/server: expiring wishes and commands and advancing the command rollouts works again")
}

// CommandOf reads one command, through q (a pool, a connection or a
// transaction). An unknown id is refused with an error wrapping
// ErrUnknownCommand.
func (s *Server) CommandOf(ctx context.Context, q Querier, id uuid.UUID) (Command, error) {
	if s.m.commands == nil {
		return Command{}, ErrCommandsOff
	}
	rows, err := q.Query(ctx, s.sql.of(qCommandOf), id)
	if err != nil {
		return Command{}, fmt.Errorf("magicsync/server: command %s: %w", id, err)
	}
	cmds, err := scanCommands(rows, 1)
	if err != nil {
		return Command{}, fmt.Errorf("magicsync/server: command %s: %w", id, err)
	}
	if len(cmds) == 0 {
		return Command{}, fmt.Errorf("%w: %s", ErrUnknownCommand, id)
	}
	return cmds[0], nil
}

// CommandScope narrows Commands; the zero scope is the whole fleet, and
// each field set narrows it further.
type CommandScope struct {
	// Replica narrows to one replica's commands.
	Replica uuid.UUID
	// Group narrows to the commands of the replicas in a group, as
	// WishScope.Group does.
	Group string
	// Name narrows to the commands of one name.
	Name string
}

// CommandList is a scope's commands, those needing attention first
// (failed, interrupted, expired, running, delivered, queued, succeeded,
// then cancelled; the oldest first within each), and how many stand in
// each state.
type CommandList struct {
	Commands []Command
	Counts   map[CommandState]int
	// More is true when the scope holds more commands than listed:
	// Commands lists at most 1,000.
	More bool
}

// maxCommandsListed bounds the commands one call of Commands lists.
const maxCommandsListed = 1000

// Commands lists the commands of a scope, those needing attention first,
// with how many stand in each state.
func (s *Server) Commands(ctx context.Context, scope CommandScope) (CommandList, error) {
	if s.m.commands == nil {
		return CommandList{}, ErrCommandsOff
	}
	var replica any
	if scope.Replica != uuid.Nil {
		replica = scope.Replica
	}
	var groups []string // nil: every group
	if scope.Group != "" {
		groups = []string{}
		for _, m := range s.m.members {
			groups = append(groups, groupGrouped(m, scope.Group))
		}
	}
	rows, err := s.pool.Query(ctx, s.sql.of(qCommands), replica, scope.Name, maxCommandsListed+1, groups)
	if err != nil {
		return CommandList{}, fmt.Errorf("magicsync/server: commands: %w", err)
	}
	cmds, err := scanCommands(rows, maxCommandsListed+1)
	if err != nil {
		return CommandList{}, fmt.Errorf("magicsync/server: commands: %w", err)
	}
	list := CommandList{Commands: cmds, Counts: map[CommandState]int{}}
	if len(cmds) > maxCommandsListed {
		list.Commands, list.More = cmds[:maxCommandsListed], true
	}
	counts, err := s.pool.Query(ctx, s.sql.of(qCommandCounts), replica, scope.Name, groups)
	if err != nil {
		return CommandList{}, fmt.Errorf("magicsync/server: commands: %w", err)
	}
	var state int16
	var n int
	if _, err := pgx.ForEachRow(counts, []any{&state, &n}, func() error {
		list.Counts[CommandState(state)] += n
		return nil
	}); err != nil {
		return CommandList{}, fmt.Errorf("magicsync/server: commands: %w", err)
	}
	return list, nil
}

// scanCommands reads at most n commands of rows (qCommands' columns).
func scanCommands(rows pgx.Rows, n int) ([]Command, error) {
	defer rows.Close()
	var out []Command
	for rows.Next() && len(out) < n {
		var c Command
		var state int16
		var deadline, answeredAt, endedAt *time.Time
		if err := rows.Scan(&c.ID, &c.Replica, &c.Name, &c.Params, &c.Note, &c.IssuedAt, &deadline, &state,
			&c.Reason, &c.Result, &answeredAt, &endedAt); err != nil {
			return nil, err
		}
		c.State = CommandState(state)
		c.Deadline, c.AnsweredAt, c.EndedAt = timeOrZero(deadline), timeOrZero(answeredAt), timeOrZero(endedAt)
		out = append(out, c)
	}
	return out, rows.Err()
}

// timeOrZero is *t, or the zero time for nil.
func timeOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// commandsDown turns the commands table's part of a message into the
// Command messages the protocol carries: an upsert is a command, a delete
// a command withdrawn.
func (s *Server) commandsDown(tc *syncpb.TableChanges) ([]*syncpb.Command, error) {
	out := make([]*syncpb.Command, 0, len(tc.Upserts)+len(tc.Deletes))
	var vals []codec.Value
	for _, tuple := range tc.Upserts {
		var err error
		if vals, err = codec.DecodeTuple(tuple, vals); err != nil || len(vals) != 8 {
			return nil, fmt.Errorf("a command of %d values (%v)", len(vals), err)
		}
		c := &syncpb.Command{Id: uuidBytes(vals[0]), Name: vals[2].S, Params: vals[3].B, Note: vals[4].S,
			IssuedAt: vals[5].I, Started: vals[7].Kind == wire.Bool && vals[7].I == 1}
		if vals[6].Kind != wire.Null {
			c.Deadline = max(vals[6].I, 1)
		}
		out = append(out, c)
	}
	for _, k := range tc.Deletes {
		var err error
		if vals, err = codec.DecodeTuple(k, vals); err != nil || len(vals) != 1 {
			return nil, fmt.Errorf("a command's key of %d values (%v)", len(vals), err)
		}
		out = append(out, &syncpb.Command{Id: uuidBytes(vals[0]), Withdrawn: true})
	}
	return out, nil
}

// uuidBytes is a uuid value's 16 bytes.
func uuidBytes(v codec.Value) []byte {
	b := v.U
	return b[:]
}

// fileCommandAnswers records a replica's word on its commands, in the
// filing transaction (qFileCommandAnswers says which word counts).
func (s *Server) fileCommandAnswers(ctx context.Context, tx pgx.Tx, replica uuid.UUID, answers []*syncpb.CommandAnswer) error {
	if len(answers) == 0 || s.m.commands == nil {
		return nil
	}
	n := len(answers)
	ids, states := make([]uuid.UUID, 0, n), make([]int16, 0, n)
	reasons, results, ats := make([]string, 0, n), make([][]byte, 0, n), make([]time.Time, 0, n)
	for _, a := range answers {
		ids = append(ids, uuid.UUID(a.GetId()))
		states = append(states, int16(a.GetState()))
		reasons = append(reasons, clip(a.GetReason(), safetext.MaxReason))
		results = append(results, a.GetResult())
		ats = append(ats, pgTime(a.GetAnsweredAt()))
	}
	if _, err := tx.Exec(ctx, s.sql.of(qFileCommandAnswers), replica, ids, states, reasons, results, ats); err != nil {
		return fmt.Errorf("magicsync/server: filing command answers: %w", err)
	}
	return nil
}
