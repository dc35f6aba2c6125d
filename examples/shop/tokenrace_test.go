package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// TestHeadOfficesHandingOutATokenAtOnceHandOutOne has four head offices
// over one database and one data folder hand out every register's token
// at the same instant, each over its own connections, as head offices
// started together do: each hands out the token in the file, the
// database holds that one, and every head office accepts it — none
// replaced the secret after another wrote its file, locking out the
// registers that took that file. (TestHeadOfficesStartedTogether… shows it
// with programs, which the preparing lock staggers; this meets the
// tokens' lock head on.)
func TestHeadOfficesHandingOutATokenAtOnceHandOutOne(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	data := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	log := slog.New(slog.DiscardHandler)
	hos := make([]*headOffice, 4)
	for i := range hos {
		ho, err := startHeadOffice(ctx, dbURL, "127.0.0.1:0", "", len(registerNames), testPoll, log)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		hos[i] = ho
	}
	t.Cleanup(func() {
		cancel()
		for _, ho := range hos {
			ho.wait()
		}
	})
	if err := hos[0].hooks.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	tokens := make([][]string, len(hos))
	errs := make([]error, len(hos))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for h, ho := range hos {
		wg.Go(func() {
			<-start
			for i := range registerNames {
				token, _, err := ho.token(ctx, data, i)
				if err != nil {
					errs[h] = err
					return
				}
				tokens[h] = append(tokens[h], token)
			}
		})
	}
	close(start)
	wg.Wait()
	for h, err := range errs {
		if err != nil {
			t.Fatalf("head office %d handing out the tokens: %v", h+1, err)
		}
	}
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for i, name := range registerNames {
		b, err := os.ReadFile(tokenPath(data, i))
		if err != nil {
			t.Fatal(err)
		}
		file := strings.TrimSpace(string(b))
		for h := range hos {
			if tokens[h][i] != file {
				t.Errorf("head office %d handed out a token for %s other than the one in its file", h+1, name)
			}
		}
		_, secret, _ := strings.Cut(file, ".")
		if ok, err := storedSecret(t.Context(), pool, registerID(i), secret); err != nil || !ok {
			t.Errorf("%s's token file holds a token the database does not (%v)", name, err)
		}
		for h, ho := range hos {
			if err := checkToken(ctx, ho, i, file); err != nil {
				t.Errorf("head office %d refuses %s's token in the file: %v", h+1, name, err)
			}
		}
	}
}
