// Command goreplica is the Go replica over NATS, as a program the
// conformance kit can start: conformance/goreplica's, its client
// natssync's. It reads the environment the kit sets (see package
// conformance/kit), MAGICSYNC_URL being the NATS server's URL, and runs
// until it is signalled to stop. What it shares with the Go replica over
// HTTP is package internal/kitreplica's; this program is its NATS wiring.
// It breaks no rule on purpose: the kit's self-tests use
// conformance/goreplica.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/magicsync/magicsync/internal/kitreplica"
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

func run(ctx context.Context) error {
	env, err := kitreplica.ReadEnv()
	if err != nil {
		return err
	}
	log := kitreplica.Logger()
	nc, err := natssync.Connect(env.URL, env.Replica)
	if err != nil {
		return err
	}
	defer nc.Close()
	client := natssync.NewClient(nc, env.Replica, env.Token, natssync.ClientOptions{
		PollWait: kitreplica.PollWait, RequestTimeout: 5 * time.Second,
		BackoffMin: kitreplica.BackoffMin, BackoffMax: kitreplica.BackoffMax, Logger: log,
	})
	return kitreplica.Run(ctx, env, kitreplica.Transport{
		Uplink:      client,
		ReceiveLoop: func(ctx context.Context, r kitreplica.Receiver) error { return client.ReceiveLoop(ctx, r) },
	}, kitreplica.Options{Logger: log})
}
