// Command conformance runs the magicsync conformance kit against a replica:
//
//	go run ./conformance -replica "<command>" [-database <postgres url>]
//
// It starts a head office of its own over a fresh PostgreSQL database,
// starts the replica with the environment package conformance/kit
// describes, runs every case and prints one line per case: PASS or FAIL,
// its name, and why it failed. It exits 0 when every case passed, 1 when
// one failed, and 2 when it could not run them (a flag missing, no
// PostgreSQL, a replica that would not start).
//
// Without -database it uses $DATABASE_URL, else the local server on
// 127.0.0.1:5432, else a throwaway cluster of the local PostgreSQL
// binaries.
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

	"github.com/magicsync/magicsync/conformance/kit"
	"github.com/magicsync/magicsync/internal/pgtest"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	command := fs.String("replica", "", "the shell command that starts the replica under test (required)")
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
	cfg := kit.Config{Replica: *command, DatabaseURL: url, CaseTimeout: *timeout,
		Progress: func(r kit.Report) {
			if r.Passed {
				fmt.Fprintf(stdout, "PASS  %s\n", r.Name)
				return
			}
			fmt.Fprintf(stdout, "FAIL  %s: %s\n", r.Name, r.Reason)
		}}
	if *verbose {
		cfg.ReplicaOutput = stderr
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
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
	fmt.Fprintf(stdout, "all %d cases passed\n", len(reports))
	return 0
}
