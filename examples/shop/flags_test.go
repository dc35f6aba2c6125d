package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/transport/httpsync"
)

// quietFlags is a flag set that returns its errors and prints nothing.
func quietFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// TestFlagsAreCheckedBeforeAnythingStarts checks that every program
// refuses a flag's bad value — naming the flag — when it reads its flags,
// and that the demo given -every 0 returns that error before it starts
// anything, rather than panicking once everything runs.
func TestFlagsAreCheckedBeforeAnythingStarts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		program string
		args    []string
		flag    string
	}{
		{"shop", []string{"-every", "0"}, "-every"},
		{"shop", []string{"-every", "-1s"}, "-every"},
		{"shop", []string{"-poll", "0"}, "-poll"},
		{"shop", []string{"-offline", "-1s"}, "-offline"},
		{"shop", []string{"-for", "-1s"}, "-for"},
		{"shop", []string{"-addr", "8080"}, "-addr"},
		{"shop", []string{"-transport", "pigeon"}, "-transport"},
		{"shop", []string{"-nats", "nats://127.0.0.1:4222"}, "-nats"},
		{"headoffice", []string{"-transport", "smtp"}, "-transport"},
		{"headoffice", []string{"-poll", "0"}, "-poll"},
		{"headoffice", []string{"-addr", ""}, "-addr"},
		{"headoffice", []string{"-registers", "0"}, "-registers"},
		{"headoffice", []string{"-registers", "-2"}, "-registers"},
		{"headoffice", []string{"-wish-every", "-1s"}, "-wish-every"},
		{"headoffice", []string{"-wish-every", "-1ns"}, "-wish-every"},
		{"register", []string{"-n", "1", "-every", "0"}, "-every"},
		{"register", []string{"-n", "0"}, "-n"},
		{"register", []string{"-n", "1", "-server", "127.0.0.1:8080"}, "-server"},
		{"register", []string{"-n", "1", "-server", "http://"}, "-server"},
		{"register", []string{"-n", "1", "-server", "http://127.0.0.1:8080/sync?x=1"}, "-server"},
	} {
		var err error
		switch tc.program {
		case "shop":
			_, err = demoFlags(quietFlags(tc.program), tc.args)
		case "headoffice":
			_, err = headOfficeFlags(quietFlags(tc.program), tc.args)
		case "register":
			_, err = registerFlags(quietFlags(tc.program), tc.args)
		}
		if !errors.Is(err, errBadFlag) || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s %q: %v; want an error naming %s", tc.program, tc.args, err, tc.flag)
		}
	}
	if _, err := registerFlags(quietFlags("register"), []string{"-n", "2", "-server", "nats://127.0.0.1:4222"}); err != nil {
		t.Errorf("register -server nats://127.0.0.1:4222: %v; want it taken", err)
	}
	if c, err := demoFlags(quietFlags("shop"), []string{"-transport", "nats", "-nats", "nats://127.0.0.1:4222"}); err != nil || c.transport != "nats" || c.natsURL != "nats://127.0.0.1:4222" {
		t.Errorf("shop -transport nats -nats nats://127.0.0.1:4222: %q %q (%v); want them taken", c.transport, c.natsURL, err)
	}
	if _, err := registerFlags(quietFlags("register"), []string{"-n", "2", "-server", "https://shop.example:8443/"}); err != nil {
		t.Errorf("register -server https://shop.example:8443/: %v; want it taken", err)
	}
	// Registers beyond the demo's three, for a head office serving them.
	if c, err := headOfficeFlags(quietFlags("headoffice"), nil); err != nil || c.registers != len(registerNames) {
		t.Errorf("headoffice with no -registers: %d registers (%v); want the demo's %d", c.registers, err, len(registerNames))
	}
	if c, err := headOfficeFlags(quietFlags("headoffice"), []string{"-registers", "5"}); err != nil || c.registers != 5 {
		t.Errorf("headoffice -registers 5: %d registers (%v); want 5", c.registers, err)
	}
	if c, err := registerFlags(quietFlags("register"), []string{"-n", "5"}); err != nil || c.n != 5 {
		t.Errorf("register -n 5: %d (%v); want it taken", c.n, err)
	}
	// The busy operator: never unless asked; a drill file: none unless
	// named.
	if c, err := headOfficeFlags(quietFlags("headoffice"), nil); err != nil || c.wishEvery != 0 {
		t.Errorf("headoffice with no -wish-every: every %v (%v); want never (0)", c.wishEvery, err)
	}
	if c, err := headOfficeFlags(quietFlags("headoffice"), []string{"-wish-every", "200ms"}); err != nil || c.wishEvery != 200*time.Millisecond {
		t.Errorf("headoffice -wish-every 200ms: every %v (%v); want 200ms", c.wishEvery, err)
	}
	if c, err := registerFlags(quietFlags("register"), []string{"-n", "1"}); err != nil || c.drill != "" {
		t.Errorf("register with no -drill: drill file %q (%v); want none", c.drill, err)
	}
	if c, err := registerFlags(quietFlags("register"), []string{"-n", "1", "-drill", "drills/register-1"}); err != nil || c.drill != "drills/register-1" {
		t.Errorf("register -drill drills/register-1: drill file %q (%v); want it taken", c.drill, err)
	}

	// The demo itself, over a database that answers: nothing starts.
	var out syncBuffer
	data := t.TempDir()
	err := run(t.Context(), config{data: data, addr: "127.0.0.1:0", every: 0, poll: testPoll, out: &out, databaseURL: pgtest.NewDatabase(t)})
	if !errors.Is(err, errBadFlag) {
		t.Errorf("the demo with -every 0: %v; want a bad flag", err)
	}
	if entries, _ := os.ReadDir(data); len(entries) > 0 || out.String() != "" {
		t.Errorf("the demo with -every 0 started: it printed %q and wrote %d file(s)", out.String(), len(entries))
	}
}

// TestRegisterSaysAtOnceItsTokenIsRefused starts a register with a token
// the head office never issued: without -v, and before its till's first
// sale, it says in plain words that the head office refuses it.
func TestRegisterSaysAtOnceItsTokenIsRefused(t *testing.T) {
	t.Parallel()
	s := startShop(t, false)
	if err := s.ho.hooks.Pass(s.ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ho.token(s.ctx, t.TempDir(), 0); err != nil {
		t.Fatal(err)
	}
	tokenFile := t.TempDir() + "/wrong.token"
	if err := os.WriteFile(tokenFile, []byte(httpsync.JoinToken(registerID(0), "not-the-secret")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const every = 10 * time.Second
	start := time.Now()
	p, _ := runInProcess(t, "register 1", func(ctx context.Context, out *syncBuffer) error {
		return runRegister(ctx, registerConfig{n: 1, server: s.ho.url, tokenFile: tokenFile, data: t.TempDir(), every: every, poll: testPoll, out: out})
	})
	p.await(t, 0, `register 1: the head office at `+regexp.QuoteMeta(s.ho.url)+` refuses it \(401 Unauthorized: [^)]+\): its token is wrong`)
	if took := time.Since(start); took >= every {
		t.Errorf("the register said its token was refused after %v, not at once (before its first sale, %v in)", took, every)
	}
}
