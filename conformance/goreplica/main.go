// Command goreplica is the Go replica as a program the conformance kit can
// start: the engine of package replica over the SQLite file the kit
// names, talking to the kit's head office through httpsync. It reads its
// configuration from the environment the kit sets (see package
// conformance/kit) and runs until it is signalled to stop. What it shares
// with the Go replica over NATS (transport/natssync/conformance/goreplica)
// is package internal/kitreplica's; this program is its HTTP wiring.
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
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/magicsync/magicsync/internal/kitreplica"
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

func run(ctx context.Context, broken string) error {
	env, err := kitreplica.ReadEnv()
	if err != nil {
		return err
	}
	log := kitreplica.Logger()
	client := httpsync.NewClient(env.URL, env.Replica, env.Token, httpsync.ClientOptions{
		PollWait: kitreplica.PollWait, BackoffMin: kitreplica.BackoffMin, BackoffMax: kitreplica.BackoffMax, Logger: log,
	})
	opts := kitreplica.Options{Logger: log}
	switch broken {
	case "retired":
		opts.BeforeInstall = dropForeignKey
	case "idempotent":
		opts.Receiver = func(e replica.Endpoint, db *sql.DB) kitreplica.Receiver { return forgetful{e, db} }
	}
	return kitreplica.Run(ctx, env, kitreplica.Transport{
		Uplink:      client,
		ReceiveLoop: func(ctx context.Context, r kitreplica.Receiver) error { return client.ReceiveLoop(ctx, r) },
	}, opts)
}

// dropForeignKey drops the foreign key from redemptions to coupons. The
// engine keeps a retired row only while a foreign key points at it:
// without one, it lets the coupon go.
func dropForeignKey(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, `DROP TABLE redemptions;
		CREATE TABLE redemptions (replica_id TEXT NOT NULL, id TEXT NOT NULL, coupon_id TEXT NOT NULL, PRIMARY KEY (replica_id, id))`)
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
