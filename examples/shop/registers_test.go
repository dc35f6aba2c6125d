package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/transport/httpsync"
)

// TestHeadOfficeWithFiveRegistersHandsOutFiveTokensAndRegisterFiveSyncs
// runs the head office program with -registers 5 and register 5 as
// programs of their own: the head office prepares five registers and
// hands out five token files, each holding its register's token, and none
// for a sixth; register 5, handed the fifth, rings up sales that the head
// office files, and the head office names it online.
func TestHeadOfficeWithFiveRegistersHandsOutFiveTokensAndRegisterFiveSyncs(t *testing.T) {
	t.Parallel()
	bin := buildShop(t)
	dbURL := pgtest.NewDatabase(t)
	hoData, regData := t.TempDir(), t.TempDir()
	addr := freeAddr(t)
	ho := startProgram(t, "the head office", bin, []string{"DATABASE_URL=" + dbURL},
		"headoffice", "-addr", addr, "-data", hoData, "-poll", "1s", "-registers", "5")
	ho.await(t, 0, `register 5: its token is in `)
	for i := range 5 {
		path := tokenPath(hoData, i)
		if !strings.Contains(ho.out.String(), fmt.Sprintf("%s: its token is in %s\n", registerName(i), path)) {
			t.Errorf("the head office did not say %s's token is in %s", registerName(i), path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s's token file: %v", registerName(i), err)
		}
		if id, ok := httpsync.TokenReplica(strings.TrimSpace(string(b))); !ok || id != registerID(i) {
			t.Errorf("%s holds no token of %s", path, registerName(i))
		}
	}
	if _, err := os.Stat(tokenPath(hoData, 5)); !os.IsNotExist(err) {
		t.Errorf("a head office serving 5 registers wrote a token file for a sixth (%v)", err)
	}
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var prepared int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM shop.registers").Scan(&prepared); err != nil || prepared != 5 {
		t.Errorf("shop.registers holds %d registers (%v); want 5", prepared, err)
	}

	reg := startProgram(t, "register 5", bin, nil, "register", "-n", "5", "-server", "http://"+addr,
		"-token-file", tokenPath(hoData, 4), "-data", regData, "-every", "200ms", "-poll", "1s")
	reg.await(t, 0, `register 5 up over `+regexp.QuoteMeta(registerFile(regData, 4)))
	m, _ := reg.await(t, 0, `register 5 rang up \d line\(s\), €(\d+)\.(\d\d) \(receipt ([0-9a-f]{8})\)`)
	waitFiled(t, pool, 4, m[3], centsOf(t, m[1], m[2]))
	ho.await(t, 0, `head office: register 5 is online`)
	reg.interrupt(t)
	ho.interrupt(t)
}

// TestRegisterWithoutATokenFileSaysToRaiseTheHeadOfficesRegisters starts
// register 6 where the head office wrote no token for it: it stops at once,
// saying the head office issues tokens for the registers its -registers
// flag names.
func TestRegisterWithoutATokenFileSaysToRaiseTheHeadOfficesRegisters(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), settle)
	defer cancel()
	err := runRegister(ctx, registerConfig{n: 6, server: "http://127.0.0.1:1", data: t.TempDir(), every: time.Second, poll: testPoll, out: &syncBuffer{}})
	if err == nil || !strings.Contains(err.Error(), "reading register 6's token") || !strings.Contains(err.Error(), "-registers 6 or more") {
		t.Errorf("register 6 with no token file: %v; want it to say to start the head office with -registers 6 or more", err)
	}
}
