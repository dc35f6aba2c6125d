package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// drawerTill is the registers' hardware in these tests: it prints test pages,
// counting them, and recounts its drawer once release lets it.
type drawerTill struct {
	printed atomic.Int64
	release chan struct{}
}

func newDrawerTill() *drawerTill { return &drawerTill{release: make(chan struct{})} }

func (tl *drawerTill) handlers() replica.Commands {
	return replica.Commands{
		"print-test-page": func(_ context.Context, c replica.Command) ([]byte, error) {
			tl.printed.Add(1)
			return []byte("printed " + string(c.Params)), nil
		},
		"recount-drawer": func(ctx context.Context, _ replica.Command) ([]byte, error) {
			select {
			case <-tl.release:
				return []byte("412.50"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}
}

// newCommandsOffice is a head office whose registers run commands on tl.
func newCommandsOffice(t *testing.T, tl *drawerTill) *headOffice {
	t.Helper()
	h := newHeadOffice(t)
	h.tune = func(s *replica.Settings) { s.Commands = tl.handlers() }
	return h
}

// issue asks a register to run a command, in a transaction of its own.
func (h *headOffice) issue(req server.CommandRequest) uuid.UUID {
	h.t.Helper()
	ctx := context.Background()
	tx, err := h.s.Begin(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	id, err := server.IssueCommand(ctx, h.s, tx, req)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		h.t.Fatal(err)
	}
	return id
}

// waitForCommand waits until the head office shows command id in state,
// and returns it.
func (h *headOffice) waitForCommand(id uuid.UUID, state server.CommandState) server.Command {
	h.t.Helper()
	var got server.Command
	eventuallyWithin(h.t, wishWait, fmt.Sprintf("command %s %v", id, state), func() (bool, string) {
		c, err := h.engine().CommandOf(context.Background(), h.pool, id)
		if err != nil {
			return false, err.Error()
		}
		got = c
		return c.State == state, fmt.Sprintf("%v %q", c.State, c.Reason)
	})
	return got
}

// commandHere reads where a register holds a command: its state, 0 when
// it holds no record of it.
func (g *register) commandHere(id uuid.UUID) replica.CommandState {
	var st replica.CommandState
	_ = g.db.QueryRow(`SELECT state FROM sync_commands WHERE id = ?`, id[:]).Scan(&st)
	return st
}

// A command travels to its register, runs there once through its
// handler, and the head office shows it succeeded with its result; the
// register is then told it ended.
func TestACommandRunsOnTheRegisterAndTheHeadOfficeShowsItsResult(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		tl := newDrawerTill()
		h := newCommandsOffice(t, tl)
		shop := h.addShop()
		g, other := h.addRegister(shop, d), h.addRegister(shop, d)
		id := h.issue(server.CommandRequest{Replica: g.id, Name: "print-test-page", Params: []byte("1 copy"), Note: "ann"})
		c := h.waitForCommand(id, server.CommandSucceeded)
		if string(c.Result) != "printed 1 copy" {
			t.Errorf("the result shown: %q", c.Result)
		}
		if n := tl.printed.Load(); n != 1 {
			t.Errorf("%d pages printed; want 1", n)
		}
		eventually(t, "the register told the command ended", func() (bool, string) {
			var withdrawn int
			_ = g.db.QueryRow(`SELECT withdrawn FROM sync_commands WHERE id = ?`, id[:]).Scan(&withdrawn)
			return withdrawn == 1, fmt.Sprintf("withdrawn %d", withdrawn)
		})
		if st := other.commandHere(id); st != 0 {
			t.Errorf("another register holds the command (%v)", st)
		}
	})
}

// A command whose deadline passes while its register is cut off expires
// on both sides: the head office shows it expired, and the register,
// which held it but had not started it, does not run it and says so too.
func TestACommandWhoseDeadlinePassesWhileOfflineExpiresOnBothSides(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		tl := newDrawerTill()
		h := newCommandsOffice(t, tl)
		g := h.addRegister(h.addShop(), d)
		// The register recounts its drawer (until released); a test page
		// waits behind it, with a deadline.
		busy := h.issue(server.CommandRequest{Replica: g.id, Name: "recount-drawer"})
		h.waitForCommand(busy, server.CommandRunning)
		deadline := time.Now().Add(3 * time.Second)
		page := h.issue(server.CommandRequest{Replica: g.id, Name: "print-test-page", Deadline: deadline})
		h.waitForCommand(page, server.CommandDelivered)
		g.unplug()
		h.waitForCommand(page, server.CommandExpired)
		close(tl.release)
		eventually(t, "the register holds the test page expired", func() (bool, string) {
			st := g.commandHere(page)
			return st == replica.CommandExpired, st.String()
		})
		g.plug()
		c := h.waitForCommand(busy, server.CommandSucceeded)
		if string(c.Result) != "412.50" {
			t.Errorf("the recount's result: %q", c.Result)
		}
		if c := h.waitForCommand(page, server.CommandExpired); !strings.Contains(c.Reason, "deadline") {
			t.Errorf("expired, saying %q", c.Reason)
		}
		if n := tl.printed.Load(); n != 0 {
			t.Errorf("the expired test page was printed %d times", n)
		}
	})
}

// The head office restored from a dump taken before a command ran: the
// restored database shows it queued, the register's answers sent again
// after its provisioning set it straight, and it does not run again.
func TestCommandsAgreeAfterTheHeadOfficeIsRestoredFromADump(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		tl := newDrawerTill()
		h := newCommandsOffice(t, tl)
		g := h.addRegister(h.addShop(), d)
		settleAll(t, g)
		g.unplug()
		id := h.issue(server.CommandRequest{Replica: g.id, Name: "print-test-page", Params: []byte("after the dump")})
		file := h.dump(t)
		g.plug()
		h.waitForCommand(id, server.CommandSucceeded)

		h.restoreDump(t, file)
		if c, err := h.s.CommandOf(context.Background(), h.pool, id); err != nil || c.State != server.CommandQueued {
			t.Fatalf("the restored head office shows %v (%v); want queued: no restore to speak of", c.State, err)
		}
		c := h.waitForCommand(id, server.CommandSucceeded)
		if string(c.Result) != "printed after the dump" {
			t.Errorf("the result shown after the restore: %q", c.Result)
		}
		if n := tl.printed.Load(); n != 1 {
			t.Errorf("%d pages printed; want 1", n)
		}
	})
}

// A wish whose deadline passes while its register is cut off expires on
// both sides: the head office shows it expired, and the register, which
// gets it once plugged back in, does not carry it out and answers it
// expired.
func TestAWishWhoseDeadlinePassesWhileOfflineExpiresOnBothSides(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		p := &printer{}
		h := newSettingsOffice(t, p)
		g := h.addRegister(h.addShop(), d)
		g.setLocally("footer", "Thank you", time.Now().Add(-time.Hour))
		seen := h.filedOnce(g, "footer", "Thank you")
		g.unplug()
		wanted := seen
		wanted.Value = "Merci"
		ctx := context.Background()
		tx, err := h.s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w, err := server.DesireWith(ctx, h.s, tx, wanted, server.DesireOptions{Deadline: time.Now().Add(2 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		h.waitForWish(wanted, w.Number, server.WishExpired, "deadline")
		g.plug()
		eventually(t, "the register holds the wish expired", func() (bool, string) {
			var st replica.WishState
			_ = g.db.QueryRow(`SELECT state FROM sync_wishes WHERE tbl = 'settings'`).Scan(&st)
			return st == replica.WishExpired, st.String()
		})
		h.waitForWish(wanted, w.Number, server.WishExpired, "by the replica's clock")
		if v := g.localSetting("footer"); v != "Thank you" {
			t.Errorf("the register holds %q; the expired wish was carried out", v)
		}
		if n := p.offered.Load(); n != 0 {
			t.Errorf("the handler was offered the expired wish %d times", n)
		}
	})
}

// A register restored from an older copy of its file, taken before it
// ran a command: the head office, which filed the command's end, does not
// send it again, and the register does not run it again; the states
// agree.
func TestCommandsAgreeAfterARegisterIsRestoredFromAnOlderCopy(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		tl := newDrawerTill()
		h := newCommandsOffice(t, tl)
		h.tune = func(s *replica.Settings) { s.Commands = tl.handlers(); s.DigestsEvery = 200 * time.Millisecond }
		g := h.addRegister(h.addShop(), d)
		settleAll(t, g)
		g.stop()
		if err := g.db.Close(); err != nil {
			t.Fatal(err)
		}
		backup := g.path + ".backup"
		copyDatabase(t, g.path, backup)
		g = h.attachAt(g.id, d, g.path, false)

		id := h.issue(server.CommandRequest{Replica: g.id, Name: "print-test-page", Params: []byte("before the restore")})
		h.waitForCommand(id, server.CommandSucceeded)
		eventually(t, "the register told the command ended", func() (bool, string) {
			var withdrawn int
			_ = g.db.QueryRow(`SELECT withdrawn FROM sync_commands WHERE id = ?`, id[:]).Scan(&withdrawn)
			return withdrawn == 1, fmt.Sprintf("withdrawn %d", withdrawn)
		})

		// The disk dies; the copy comes back.
		g.stop()
		if err := g.db.Close(); err != nil {
			t.Fatal(err)
		}
		copyDatabase(t, backup, g.path)
		g = h.attachAt(g.id, d, g.path, false)
		settleAll(t, g)
		later := h.issue(server.CommandRequest{Replica: g.id, Name: "print-test-page", Params: []byte("after the restore")})
		h.waitForCommand(later, server.CommandSucceeded)
		if c := h.waitForCommand(id, server.CommandSucceeded); string(c.Result) != "printed before the restore" {
			t.Errorf("the command's result after the restore: %q", c.Result)
		}
		if n := tl.printed.Load(); n != 2 {
			t.Errorf("%d pages printed; want 2: the restored register ran a command again", n)
		}
	})
}
