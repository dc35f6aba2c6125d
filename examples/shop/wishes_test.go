package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// seenFooter waits until the head office has filed the register's footer
// with text, and returns it as the head office shows it.
func (s *testShop) seenFooter(r *register, text string) Footer {
	s.t.Helper()
	return s.seenFooterOf(r.id, r.name, text)
}

// seenFooterOf is seenFooter of the register id, called name, wherever it
// runs.
func (s *testShop) seenFooterOf(id uuid.UUID, name, text string) Footer {
	s.t.Helper()
	var seen Footer
	waitFor(s.t, fmt.Sprintf("%s's footer %q filed", name, text), func() error {
		footers, err := s.ho.footers(s.ctx)
		if err != nil {
			return err
		}
		f, ok := footers[id]
		if !ok || f.Text != text {
			return fmt.Errorf("the head office holds %+v (%v)", f, ok)
		}
		seen = f
		return nil
	})
	return seen
}

// wishFooter wishes the register's footer text, based on seen.
func (s *testShop) wishFooter(seen Footer, text string) server.Wished {
	s.t.Helper()
	w, err := s.ho.wishFooter(s.ctx, seen, text)
	if err != nil {
		s.t.Fatal(err)
	}
	return w
}

// waitWish waits until the head office shows the wish standing in state,
// with a reason holding reason.
func (s *testShop) waitWish(w server.Wished, state server.WishState, reason string) {
	s.t.Helper()
	waitFor(s.t, fmt.Sprintf("wish %d of %v standing %v (%q)", w.Number, w.Key, state, reason), func() error {
		ws, err := server.WishesOf[Footer](s.ctx, s.ho.engine, s.ho.pool, []magicsync.Key{w.Key})
		if err != nil {
			return err
		}
		if len(ws) != 1 {
			return fmt.Errorf("%d wishes", len(ws))
		}
		got := ws[0]
		if got.Number != w.Number || got.State != state || !strings.Contains(got.Reason, reason) {
			return fmt.Errorf("wish %d stands %v (%q)", got.Number, got.State, got.Reason)
		}
		return nil
	})
}

// localFooter reads the footer a register holds.
func localFooter(t *testing.T, r *register) string {
	t.Helper()
	var text string
	if err := r.db.QueryRow("SELECT text FROM footers WHERE register_id = ?", r.id).Scan(&text); err != nil {
		t.Fatal(err)
	}
	return text
}

// TestThePrintersAnswersReachTheHeadOffice wishes the registers new
// footers from the head office, and follows each wish there: carried out
// by a printer that is on; waiting, with why, while the printer is off,
// and carried out once it is back on; refused, with why, when the footer
// is longer than the printer's 40 characters; and superseded when a
// technician changed the footer on the register before the wish, based
// on the footer before, arrived — the technician's footer standing on
// both sides.
func TestThePrintersAnswersReachTheHeadOffice(t *testing.T) {
	t.Parallel()
	s := startShop(t, true)
	const first = "Thank you — see you soon!"
	one, two, three := s.regs[0], s.regs[1], s.regs[2]

	// A printer that is on carries the wish out.
	seen := s.seenFooter(one, first)
	w := s.wishFooter(seen, "Fresh bread every morning")
	s.waitWish(w, server.WishApplied, "")
	filed := s.seenFooter(one, "Fresh bread every morning")
	if !filed.ChangedAt.After(seen.ChangedAt) {
		t.Errorf("register 1's footer was carried out without its version moving on: %v, was %v", filed.ChangedAt, seen.ChangedAt)
	}

	// A printer that is off has the wish wait, and says why; once back
	// on, it carries it out.
	seen = s.seenFooter(two, first)
	two.printer.switchOff()
	w = s.wishFooter(seen, "Open on Sundays, 8 to 12")
	s.waitWish(w, server.WishWaiting, "the printer is off")
	if got := localFooter(t, two); got != first {
		t.Errorf("register 2's printer is off, yet its footer became %q", got)
	}
	two.printer.switchOn()
	s.waitWish(w, server.WishApplied, "")
	s.seenFooter(two, "Open on Sundays, 8 to 12")

	// A footer one character longer than the printer's line is refused;
	// one that fills it is carried out.
	seen = filed
	// (Characters, not bytes: the last one takes two.)
	fits := strings.Repeat("x", printerWidth-1) + "é"
	long := "x" + fits
	if utf8.RuneCountInString(fits) != 40 || utf8.RuneCountInString(long) != 41 {
		t.Fatalf("the footers have %d and %d characters", utf8.RuneCountInString(fits), utf8.RuneCountInString(long))
	}
	w = s.wishFooter(seen, long)
	s.waitWish(w, server.WishRefused, fmt.Sprintf("%q is longer than the printer's 40 characters", long))
	if got := localFooter(t, one); got != "Fresh bread every morning" {
		t.Errorf("register 1 refused the footer, yet holds %q", got)
	}
	w = s.wishFooter(seen, fits)
	s.waitWish(w, server.WishApplied, "")
	s.seenFooter(one, fits)

	// A technician's change on the register wins over a wish based on
	// the footer before it.
	seen = s.seenFooter(three, first)
	three.online.Store(false)
	if err := three.setFooter(s.ctx, "Ask us about the loyalty card"); err != nil {
		t.Fatal(err)
	}
	w = s.wishFooter(seen, "Closed on Monday for the inventory")
	three.online.Store(true)
	three.engine.Nudge()
	s.waitWish(w, server.WishSuperseded, "the row changed since the wish was made")
	s.seenFooter(three, "Ask us about the loyalty card")
	if got := localFooter(t, three); got != "Ask us about the loyalty card" {
		t.Errorf("register 3 holds the footer %q; the technician's should stand", got)
	}
	waitFor(t, "the shop settled", s.converged)

	// Where the wishes stand, as the demo's report counts them.
	list, err := s.ho.engine.Wishes(s.ctx, server.WishScope{Table: "footers"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := wishCounts(list.Counts), "2 carried out, 1 superseded"; got != want {
		t.Errorf("the head office counts its footer wishes as %q; want %q", got, want)
	}
}

// TestTheScreenTakesOnlyABrightnessFrom0To10 offers the screen wishes of
// the registers' other settings: a brightness from 0 to 10 is carried
// out, any other refused with why; any other setting is carried out, the
// engine writing it in the register's database.
func TestTheScreenTakesOnlyABrightnessFrom0To10(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, value string
		want        replica.WishState
	}{
		{"brightness", "0", replica.WishApplied},
		{"brightness", "10", replica.WishApplied},
		{"brightness", "11", replica.WishRefused},
		{"brightness", "-1", replica.WishRefused},
		{"brightness", "bright", replica.WishRefused},
		{"language", "fr", replica.WishApplied},
	} {
		w := replica.Wish[RegisterSetting]{Wanted: RegisterSetting{RegisterID: uuid.New(), Name: c.name, Value: c.value}}
		got := screen{}.CarryOut(context.Background(), w)
		if got.State() != c.want {
			t.Errorf("the screen answers %s %q %v; want %v", c.name, c.value, got, c.want)
		}
		if c.want == replica.WishRefused && !strings.Contains(got.Reason(), "from 0 to 10") {
			t.Errorf("the screen refuses %s %q saying %q; want what it takes", c.name, c.value, got.Reason())
		}
	}
}

// TestTheHeadOfficeSaysWhereItsWishesStand follows wishes through the
// demo's watch, which says in plain words where each comes to stand.
func TestTheHeadOfficeSaysWhereItsWishesStand(t *testing.T) {
	t.Parallel()
	s := startShop(t, true)
	var out syncBuffer
	watch := newWishWatch(s.ho, sayer(&out))
	one, two := s.regs[0], s.regs[1]
	seen := s.seenFooter(two, "Thank you — see you soon!")
	two.printer.switchOff()
	watch.follow(s.wishFooter(seen, "Open on Sundays, 8 to 12"), two.name, "footer", `"Open on Sundays, 8 to 12"`)
	w, err := s.ho.wishSetting(s.ctx, one.id, "brightness", "11")
	if err != nil {
		t.Fatal(err)
	}
	watch.follow(w, one.name, "screen brightness", "11")
	said := func(want string) func() error {
		return func() error {
			if err := watch.check(s.ctx); err != nil {
				return err
			}
			if !strings.Contains(out.String(), want) {
				return errors.New("the watch said:\n" + out.String())
			}
			return nil
		}
	}
	waitFor(t, "the wish shown waiting", said(`head office: register 2's footer waits to become "Open on Sundays, 8 to 12": the printer is off`))
	waitFor(t, "the brightness shown refused", said(`head office: register 1 refused the screen brightness 11: "11" is no brightness`))
	if watch.settled() {
		t.Error("the watch says its wishes settled while one waits")
	}
	two.printer.switchOn()
	waitFor(t, "the wish shown carried out", said(`head office: register 2's footer is now "Open on Sundays, 8 to 12"`))
	if !watch.settled() {
		t.Error("the watch says its wishes have not settled, though every one was answered")
	}
}
