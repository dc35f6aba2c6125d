// Command conformance runs the magicsync conformance kit against a replica
// over NATS:
//
//	go run ./transport/natssync/conformance -transport nats -replica "<command>" [-database <postgres url>]
//
// It is the kit's command (conformance, at the module's root) with a
// transport to choose: under -transport nats (the default) the kit's head
// office — its faults injected by the kit's HTTP proxy as ever — is put
// behind a NATS server started inside the process, each exchange mapped as
// proto/PROTOCOL.md, section 11a, says, and the replica is given that
// server's nats:// URL as MAGICSYNC_URL; under -transport http it runs as
// the kit's own command does. The Go replica over NATS is
// ./transport/natssync/conformance/goreplica.
//
// It exits 0 when every case passed, 1 when one failed, and 2 when it
// could not run them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/conformance/kit"
	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/transport/natssync/embedded"
	"github.com/magicsync/magicsync/transport/natssync/internal/bridge"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	command := fs.String("replica", "", "the shell command that starts the replica under test (required)")
	transport := fs.String("transport", "nats", `how the replica syncs: "nats" or "http"`)
	database := fs.String("database", "", "a PostgreSQL server the kit may create databases on (default: $DATABASE_URL, 127.0.0.1:5432, or a throwaway cluster)")
	timeout := fs.Duration("case-timeout", 15*time.Second, "how long one case waits for the replica")
	verbose := fs.Bool("v", false, "show the replica's output and the head office's logs")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *command == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, `conformance: say which replica to test: -replica "<command>"`)
		fs.Usage()
		return 2
	}
	if *transport != "nats" && *transport != "http" {
		fmt.Fprintf(stderr, "conformance: -transport must be nats or http, not %q\n", *transport)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url := *database
	if url == "" {
		found, stopDB, err := pgtest.Ensure(ctx, "", nil)
		if err != nil {
			fmt.Fprintln(stderr, "conformance: no PostgreSQL to run the head office on:", err, "(give one with -database)")
			return 2
		}
		defer stopDB()
		url = found
	}
	log := slog.New(slog.DiscardHandler)
	cfg := kit.Config{Replica: *command, DatabaseURL: url, CaseTimeout: *timeout,
		Progress: func(r kit.Report) {
			if r.Passed {
				fmt.Fprintf(stdout, "PASS  %s\n", r.Name)
				return
			}
			fmt.Fprintf(stdout, "FAIL  %s: %s\n", r.Name, r.Reason)
		}}
	if *verbose {
		log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		cfg.ReplicaOutput = stderr
		cfg.Logger = log
	}
	if *transport == "nats" {
		cfg.Front = func(ctx context.Context, httpURL string) (string, func(), error) { return natsFront(ctx, httpURL, log) }
	}
	reports, err := kit.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "conformance:", err)
		if errors.Is(err, kit.ErrSetup) || len(reports) == 0 {
			return 2
		}
		return 1
	}
	failed := 0
	for _, r := range reports {
		if !r.Passed {
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d of %d cases failed\n", failed, len(reports))
		return 1
	}
	fmt.Fprintf(stdout, "all %d cases passed over %s\n", len(reports), *transport)
	return 0
}

// natsFront starts a NATS server inside the process and answers the
// replica's requests on it by forwarding them to the kit's head office at
// httpURL; it returns the server's URL and what stops both.
func natsFront(ctx context.Context, httpURL string, log *slog.Logger) (string, func(), error) {
	ns, err := embedded.Start(embedded.Options{Name: "conformance"})
	if err != nil {
		return "", nil, err
	}
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		ns.Shutdown()
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- bridge.Serve(ctx, nc, httpURL, "", log) }()
	return ns.URL(), func() {
		cancel()
		<-done
		nc.Close()
		ns.Shutdown()
	}, nil
}
