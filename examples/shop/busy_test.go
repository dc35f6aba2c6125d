package main

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/server"
)

// TestBusyHeadOfficeWishesWithdrawsAndRollsOut runs a head office given
// -wish-every 200ms, and the three registers it serves, as programs of
// their own: within seconds it has wished the registers footers and
// brightnesses, which they answered, and withdrawn a wish still waiting or
// rolled a footer out to every register — each act said in one line,
// none failing.
func TestBusyHeadOfficeWishesWithdrawsAndRollsOut(t *testing.T) {
	t.Parallel()
	bin := buildShop(t)
	dbURL := pgtest.NewDatabase(t)
	hoData := t.TempDir()
	addr := freeAddr(t)
	ho := startProgram(t, "the head office", bin, []string{"DATABASE_URL=" + dbURL},
		"headoffice", "-addr", addr, "-data", hoData, "-poll", "1s", "-wish-every", "200ms")
	ho.await(t, 0, `a busy operator acts every 200ms`)
	ho.await(t, 0, `register 3: its token is in `)
	for i := range registerNames {
		r := &registerProcess{i: i, data: t.TempDir()}
		r.start(t, bin, "http://"+addr, tokenPath(hoData, i), 500*time.Millisecond)
	}

	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	codecs, err := codecs()
	if err != nil {
		t.Fatal(err)
	}
	// The engine's view, to read the wishes and rollouts with: nothing
	// runs.
	engine, err := server.New(t.Context(), pool, codecs, (&headOffice{log: slog.New(slog.DiscardHandler)}).options())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "wishes made and answered, and a withdrawal or a rollout", func() error {
		list, err := engine.Wishes(t.Context(), server.WishScope{})
		if err != nil {
			return err
		}
		rollouts, err := engine.Rollouts(t.Context())
		if err != nil {
			return err
		}
		c := list.Counts
		if answered := c[server.WishApplied] + c[server.WishRefused] + c[server.WishSuperseded]; answered == 0 {
			return fmt.Errorf("no wish answered yet: %s", wishCounts(c))
		}
		if c[server.WishWithdrawn] == 0 && len(rollouts) == 0 {
			return errors.New("no wish withdrawn and no rollout yet")
		}
		return nil
	})
	out := ho.out.String()
	for _, act := range []string{
		`operator wishes register [123] the footer "[^"]+" \(wish \d+\)`,
		`operator wishes register [123]'s screen brightness \d+ \(wish \d+\)`,
		`operator (withdraws wish \d+ of .*, still (on its way|waiting: .*)|rolls the footer "[^"]+" out to every register \(rollout \d+\))`,
	} {
		if !regexp.MustCompile(act).MatchString(out) {
			t.Errorf("the head office did not say %q", act)
		}
	}
	if strings.Contains(out, "operator could not act") {
		t.Error("an act of the busy operator failed, with the database up")
	}
	ho.interrupt(t)
}

// TestBusyOperatorSaysAFailedActAndGoesOn has the busy operator act over
// a head office whose database it cannot reach (its pool closed): each
// act fails, is said in one line, and the operator acts again at its next
// turn.
func TestBusyOperatorSaysAFailedActAndGoesOn(t *testing.T) {
	t.Parallel()
	s := startShop(t, false)
	// Stopped, the head office has closed its pool: every act fails. (The
	// pool is not closed under the running engine, whose connections
	// Close would wait for.)
	s.stop()
	var out syncBuffer
	o := newBusyOperator(s.ho, sayer(&out))
	const acts = 20
	for range acts {
		o.act(t.Context())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != acts {
		t.Fatalf("%d acts said %d lines:\n%s", acts, len(lines), out.String())
	}
	for _, line := range lines {
		if !regexp.MustCompile(`operator could not act: .+; it acts again at its next turn$`).MatchString(line) {
			t.Errorf("a failed act said %q", line)
		}
	}
}
