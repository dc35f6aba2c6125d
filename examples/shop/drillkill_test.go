//go:build unix

package main

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/magicsync/magicsync/server"
)

// TestRegisterKilledCarryingOutAWishCarriesItOutOnceStartedAgain writes
// "kill in wish" in a register's drill file and has the head office wish
// it a footer: the register dies by SIGKILL in the middle of carrying it
// out, having said so and taken the line out of its drill file (and that
// line only). Started again, it carries the wish out, and the head office
// shows it carried out.
func TestRegisterKilledCarryingOutAWishCarriesItOutOnceStartedAgain(t *testing.T) {
	t.Parallel()
	d := startDrillShop(t, "# a power cut\nkill in wish\n")
	p := d.startRegister(t, "register 1", time.Second)
	p.await(t, 0, `register 1 will die \(SIGKILL\) carrying out its next wish \(drill\)`)
	seen := d.seenFooterOf(registerID(0), "register 1", "Thank you — see you soon!")
	const text = "Fresh bread every morning"
	w := d.wishFooter(seen, text)

	select {
	case <-p.done:
	case <-time.After(settle):
		t.Fatalf("register 1 still runs %v after the head office wished it a footer", settle)
	}
	exit, ok := errors.AsType[*exec.ExitError](p.err)
	if !ok {
		t.Fatalf("register 1 ended with %v; want killed by SIGKILL", p.err)
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("register 1 ended with %v; want killed by SIGKILL", p.err)
	}
	if !strings.Contains(p.out.String(), "register 1 dies (SIGKILL) carrying out a wish, as the drill file asks") {
		t.Error("register 1 did not say it dies carrying out a wish")
	}
	if got := d.drillLines(t); got != "# a power cut\n" {
		t.Errorf("once register 1 died, its drill file holds %q; want the kill taken out, the rest kept", got)
	}

	again := d.startRegister(t, "register 1, started again", time.Second)
	d.waitWish(w, server.WishApplied, "")
	d.seenFooterOf(registerID(0), "register 1", text)
	again.interrupt(t)
	if strings.Contains(again.out.String(), "dies") {
		t.Errorf("register 1, started again, said it dies:\n%s", again.out.String())
	}
}
