package main

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/server"
)

// checkToken says whether the head office accepts token for register i.
func checkToken(ctx context.Context, ho *headOffice, i int, token string) error {
	_, secret, _ := strings.Cut(token, ".")
	return ho.engine.Endpoint().Authenticate(ctx, registerID(i), secret)
}

// TestSecondHeadOfficeDoesNotReissueTokens starts a second head office on
// the database of a first, with a data folder of its own: it does not
// re-issue the registers' tokens (the first one's keep working), and says
// why it hands out none. Only an explicit rotation replaces a token.
func TestSecondHeadOfficeDoesNotReissueTokens(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	ctx, cancel := context.WithCancel(t.Context())
	log := slog.New(slog.DiscardHandler)
	first, err := startHeadOffice(ctx, dbURL, "127.0.0.1:0", "", len(registerNames), testPoll, log)
	if err != nil {
		t.Fatal(err)
	}
	second, err := startHeadOffice(ctx, dbURL, "127.0.0.1:0", "", len(registerNames), testPoll, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		first.wait()
		second.wait()
	})
	dataA, dataB := t.TempDir(), t.TempDir()
	tokenA, _, err := first.token(ctx, dataA, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = second.token(ctx, dataB, 0)
	if !errors.Is(err, errTokenHeld) || !strings.Contains(err.Error(), "-rotate-tokens") {
		t.Errorf("the second head office, handing out register 1's token: %v; want an error wrapping errTokenHeld that says how to rotate", err)
	}
	if _, err := os.Stat(tokenPath(dataB, 0)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the second head office wrote a token file (%v)", err)
	}
	if err := checkToken(ctx, first, 0, tokenA); err != nil {
		t.Fatalf("register 1's token stopped working when a second head office started: %v", err)
	}
	// The first head office, started again, hands out the same token.
	if again, _, err := first.token(ctx, dataA, 0); err != nil || again != tokenA {
		t.Errorf("the first head office hands out another token (%v)", err)
	}
	// An explicit rotation replaces it.
	rotated, _, err := second.rotateToken(ctx, dataB, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The first head office hears of the rotation (its engine's Run
	// listens) and forgets the credentials it had read: the old token
	// stops working there too, within moments.
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := checkToken(ctx, first, 0, tokenA)
		if errors.Is(err, server.ErrUnauthorized) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the rotated-out token, 10s after the rotation: %v; want ErrUnauthorized", err)
			break
		}
		time.Sleep(5 * time.Millisecond) // the notification's effect has no signal here
	}
	if err := checkToken(ctx, first, 0, rotated); err != nil {
		t.Errorf("the rotated token: %v", err)
	}
}

// TestRegisterFilesAreReadableByTheirOwnerOnly starts the registers over
// new files: each SQLite file, and the -wal and -shm files beside it, is
// created readable and writable by its owner only (0600), like the token
// files.
func TestRegisterFilesAreReadableByTheirOwnerOnly(t *testing.T) {
	t.Parallel()
	s := startShop(t, true)
	for i, r := range s.regs {
		if _, err := r.db.ExecContext(s.ctx, "SELECT count(*) FROM products"); err != nil {
			t.Fatal(err)
		}
		for _, suffix := range []string{"", "-wal", "-shm"} {
			path := registerFile(s.data, i) + suffix
			fi, err := os.Stat(path)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			if perm := fi.Mode().Perm(); perm != 0o600 {
				t.Errorf("%s is created %v; want -rw------- (0600)", path, perm)
			}
		}
	}
}
