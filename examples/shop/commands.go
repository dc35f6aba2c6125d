package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// The shop's commands: one-shot actions the head office asks of one
// register, which runs each at most once and says what came of it. The
// register's half is commandHandlers; the head office's is issue and the
// commandWatch, which says where each command it follows stands.

// The shop's command names.
const (
	printTestPage = "print-test-page"
	recountDrawer = "recount-drawer"
)

// commandHandlers are a register's handlers of the head office's
// commands: its printer prints a test page, and its till recounts the
// cash drawer, summing the receipts the register rang up.
func commandHandlers(r *register) replica.Commands {
	return replica.Commands{
		printTestPage: func(context.Context, replica.Command) ([]byte, error) {
			if r.printer.off.Load() {
				return nil, errors.New("the printer is off")
			}
			return fmt.Appendf(nil, "test page printed on %s's printer", r.name), nil
		},
		recountDrawer: func(ctx context.Context, _ replica.Command) ([]byte, error) {
			var cents int64
			if err := r.db.QueryRowContext(ctx, "SELECT coalesce(sum(total_cents), 0) FROM receipts").Scan(&cents); err != nil {
				return nil, fmt.Errorf("reading the receipts: %w", err)
			}
			return fmt.Appendf(nil, "€%d.%02d in the drawer", cents/100, cents%100), nil
		},
	}
}

// issue asks register id to run a command, in a transaction of its own.
func (ho *headOffice) issue(ctx context.Context, req server.CommandRequest) (uuid.UUID, error) {
	var id uuid.UUID
	err := pgx.BeginFunc(ctx, ho.pool, func(tx pgx.Tx) error {
		var err error
		id, err = server.IssueCommand(ctx, ho.engine, tx, req)
		return err
	})
	return id, err
}

// commandWatch follows the commands the day issued, and says each time
// one of them stands elsewhere.
type commandWatch struct {
	ho       *headOffice
	say      func(string, ...any)
	followed map[uuid.UUID]*followedCommand
}

// followedCommand is a command the watch follows: what it asked of which
// register, and where the watch last said it stands.
type followedCommand struct {
	register, what string
	state          server.CommandState
}

func newCommandWatch(ho *headOffice, say func(string, ...any)) *commandWatch {
	return &commandWatch{ho: ho, say: say, followed: map[uuid.UUID]*followedCommand{}}
}

// follow follows command id, which asks what of register.
func (w *commandWatch) follow(id uuid.UUID, register, what string) {
	w.followed[id] = &followedCommand{register: register, what: what, state: server.CommandQueued}
}

// check reads where the commands followed stand and says what changed;
// it forgets a command once it ended.
func (w *commandWatch) check(ctx context.Context) error {
	for id, f := range w.followed {
		c, err := w.ho.engine.CommandOf(ctx, w.ho.pool, id)
		if err != nil {
			return err
		}
		if c.State == f.state {
			continue
		}
		f.state = c.State
		switch c.State {
		case server.CommandSucceeded:
			w.say("%s: %s succeeded: %s", f.register, f.what, c.Result)
		case server.CommandDelivered, server.CommandRunning:
			w.say("%s: %s %v", f.register, f.what, c.State)
		default:
			w.say("%s: %s %v: %s", f.register, f.what, c.State, c.Reason)
		}
		if c.State.Final() {
			delete(w.followed, id)
		}
	}
	return nil
}

// pending says whether the watch last saw command id under way: not yet
// ended, as far as it knows.
func (w *commandWatch) pending(id uuid.UUID) bool {
	f, ok := w.followed[id]
	return ok && !f.state.Final()
}

// askTestPage asks register 2 to print a test page, its printer just
// back on.
func (d *day) askTestPage(ctx context.Context) error {
	r := d.offPrinter
	id, err := d.ho.issue(ctx, server.CommandRequest{Replica: r.id, Name: printTestPage, Note: "the head office's operator"})
	if err != nil {
		return err
	}
	d.commands.follow(id, r.name, "print a test page")
	d.say("head office asks %s to print a test page", r.name)
	return nil
}

// recountDeadline is how long the unplugged register has to recount its
// drawer: it stays unplugged longer, so the command expires.
const recountDeadline = 2 * time.Second

// askRecount asks the unplugged register to recount its drawer within
// recountDeadline: it will not hear of it in time, and the command
// expires, on both sides.
func (d *day) askRecount(ctx context.Context) stepOutcome {
	r := d.unplugged
	id, err := d.ho.issue(ctx, server.CommandRequest{Replica: r.id, Name: recountDrawer, Note: "the head office's operator",
		Deadline: time.Now().Add(recountDeadline)})
	if !d.db.note(ctx, err) {
		return dayOver
	}
	if err == nil {
		d.recount = id
		d.commands.follow(id, r.name, "recount the drawer")
		d.say("head office asks %s, unplugged, to recount its drawer within %v", r.name, recountDeadline)
	}
	return stepDone
}
