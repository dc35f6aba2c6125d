// Command goreplica is the Go replica as a program the conformance kit can
// start: the engine of package replica over the SQLite file the kit
// names, talking to the kit's head office through httpsync. It reads its
// configuration from the environment the kit sets (see package
// conformance/kit) and runs until it is signalled to stop.
//
// With -break it breaks one rule on purpose, for the kit's self-tests:
// -break=idempotent sets its last applied id back to 0 before each
// message, so that a message served again is applied again;
// -break=retired drops the foreign key from redemptions to coupons before
// it starts, so that it lets a retired coupon go though a redemption
// points at it.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
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
	"github.com/magicsync/magicsync/transport/httpsync"
)

func main() {
	broken := flag.String("break", "", `break a rule on purpose: "idempotent" applies a message served again a second time, "retired" lets a retired row go though a row points at it`)
	flag.Parse()
	if *broken != "" && *broken != "idempotent" && *broken != "retired" {
		fmt.Fprintf(os.Stderr, "goreplica: -break=%s: the rules it breaks are idempotent and retired\n", *broken)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *broken); err != nil {
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

func run(ctx context.Context, broken string) error {
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
	if broken == "retired" {
		// The engine keeps a retired row only while a foreign key points
		// at it: without one, it lets the coupon go.
		if _, err := db.ExecContext(ctx, `DROP TABLE redemptions;
			CREATE TABLE redemptions (replica_id TEXT NOT NULL, id TEXT NOT NULL, coupon_id TEXT NOT NULL, PRIMARY KEY (replica_id, id))`); err != nil {
			return err
		}
	}
	if err := replica.Install(ctx, db, codecs); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client := httpsync.NewClient(base, id, token, httpsync.ClientOptions{
		PollWait: time.Second, BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, Logger: log,
	})
	engine, err := replica.New(ctx, db, codecs, replica.Me(id), client, replica.Settings{
		Idle: 100 * time.Millisecond, BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
		DigestsEvery: digests, ResendAfter: resend, Logger: log,
		// The kit's settings live in the database alone: a wish is
		// carried out by writing it.
		Wishes: replica.Wishes{replica.Handle(replica.Direct[kit.Setting]{})}, WishesEvery: wishesEvery,
		Commands: replica.Commands{kit.EchoCommand: func(_ context.Context, c replica.Command) ([]byte, error) {
			return c.Params, nil
		}},
	})
	if err != nil {
		return err
	}
	defer engine.Close()
	var receiver interface {
		httpsync.Receiver
		httpsync.LastAppliedReporter
	} = engine.Endpoint()
	if broken == "idempotent" {
		receiver = forgetful{engine.Endpoint(), db}
	}
	done := make(chan error, 1)
	go func() { done <- engine.Run(ctx) }()
	err = client.ReceiveLoop(ctx, receiver)
	if rerr := <-done; err == nil && !errors.Is(rerr, context.Canceled) {
		err = rerr
	}
	return err
}

// forgetful is a replica that breaks idempotent apply: it forgets which
// message it applied last before each one, so that a message served again
// is applied again.
type forgetful struct {
	replica.Endpoint
	db *sql.DB
}

// Receive sets the last applied id back to 0, then applies msg. The
// engine's table refuses the host's writes; the write passes as the
// engine's own (its writing mark set and cleared in the same
// transaction), as only a replica broken on purpose would do.
func (f forgetful) Receive(ctx context.Context, msg []byte) (replica.Received, error) {
	if err := f.forget(ctx); err != nil {
		return replica.Received{}, err
	}
	return f.Endpoint.Receive(ctx, msg)
}

// forget sets the last applied id back to 0.
func (f forgetful) forget(ctx context.Context) error {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	for _, q := range []string{"UPDATE sync_replica SET writing = 1", "UPDATE sync_replica SET last_applied = 0", "UPDATE sync_replica SET writing = 0"} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}
