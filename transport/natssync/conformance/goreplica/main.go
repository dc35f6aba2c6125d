// Command goreplica is the Go replica over NATS, as a program the
// conformance kit can start: conformance/goreplica's, its client
// natssync's. It reads the environment the kit sets (see package
// conformance/kit), MAGICSYNC_URL being the NATS server's URL, and runs
// until it is signalled to stop. It breaks no rule on purpose: the kit's
// self-tests use conformance/goreplica.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	_ "modernc.org/sqlite" // the replica's SQLite driver

	"github.com/magicsync/magicsync/conformance/kit"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/natssync"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "goreplica:", err)
		os.Exit(1)
	}
}

// env reads a variable of the kit's contract, which must be set.
func env(name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("$%s is not set: the conformance kit sets it (see package conformance/kit)", name)
	}
	return v, nil
}

// duration reads an optional duration of the contract.
func duration(name string, otherwise time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return otherwise, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("$%s: %w", name, err)
	}
	return d, nil
}

func run(ctx context.Context) error {
	var vals [4]string
	for i, name := range []string{"MAGICSYNC_URL", "MAGICSYNC_REPLICA", "MAGICSYNC_TOKEN", "MAGICSYNC_DB"} {
		v, err := env(name)
		if err != nil {
			return err
		}
		vals[i] = v
	}
	base, token, file := vals[0], vals[2], vals[3]
	id, err := uuid.Parse(vals[1])
	if err != nil {
		return fmt.Errorf("$MAGICSYNC_REPLICA: %w", err)
	}
	digests, err := duration("MAGICSYNC_DIGESTS_EVERY", time.Second)
	if err != nil {
		return err
	}
	resend, err := duration("MAGICSYNC_RESEND_AFTER", 2*time.Second)
	if err != nil {
		return err
	}
	wishesEvery, err := duration("MAGICSYNC_WISHES_EVERY", time.Second)
	if err != nil {
		return err
	}
	codecs, err := kit.Codecs()
	if err != nil {
		return err
	}
	// What the engine requires of every connection: WAL, synchronous
	// FULL, recursive triggers, foreign keys.
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: file}).EscapedPath()+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=recursive_triggers(1)&_pragma=foreign_keys(1)&_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer db.Close()
	if err := replica.Install(ctx, db, codecs); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, err := natssync.Connect(base, id)
	if err != nil {
		return err
	}
	defer nc.Close()
	client := natssync.NewClient(nc, id, token, natssync.ClientOptions{
		PollWait: time.Second, RequestTimeout: 5 * time.Second, BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, Logger: log,
	})
	engine, err := replica.New(ctx, db, codecs, replica.Me(id), client, replica.Settings{
		Idle: 100 * time.Millisecond, BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
		DigestsEvery: digests, ResendAfter: resend, Logger: log,
		// The kit's settings live in the database alone: a wish is
		// carried out by writing it.
		Wishes: replica.Wishes{replica.Handle(replica.Direct[kit.Setting]{})}, WishesEvery: wishesEvery,
		// The kit's one command: echo, its result its params.
		Commands: replica.Commands{kit.EchoCommand: func(_ context.Context, c replica.Command) ([]byte, error) {
			return c.Params, nil
		}},
	})
	if err != nil {
		return err
	}
	defer engine.Close()
	done := make(chan error, 1)
	go func() { done <- engine.Run(ctx) }()
	err = client.ReceiveLoop(ctx, engine.Endpoint())
	if rerr := <-done; err == nil && !errors.Is(rerr, context.Canceled) {
		err = rerr
	}
	return err
}
