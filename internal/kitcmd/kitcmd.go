// Package kitcmd is the command line of the conformance kit, for the
// commands that run it: conformance, the kit's own, over HTTP, and
// transport/natssync/conformance, which adds a transport to choose. It
// defines the flags they share (-replica, -database, -case-timeout, -v),
// finds the PostgreSQL server the head office runs on, prints a line per
// case and a summary, and says the code to exit with, so that the two
// commands cannot come to run or judge the kit differently.
package kitcmd

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

// Transport is a transport the replica under test syncs over.
type Transport struct {
	// Name is named by the summary ("all 14 cases passed over nats");
	// empty names none.
	Name string
	// Front, when set, puts the kit's head office, at httpURL, behind the
	// transport (kit.Config.Front), logging to log; nil leaves the kit's
	// own HTTP.
	Front func(ctx context.Context, httpURL string, log *slog.Logger) (replicaURL string, stop func(), err error)
}

// Command is a conformance command. The zero value is the kit's own
// command, over HTTP.
type Command struct {
	// Flags, when set, defines the command's own flags on fs, beside the
	// shared ones.
	Flags func(fs *flag.FlagSet)
	// Transport, when set, says which transport the parsed flags chose;
	// its error, a usage error, is printed and the command exits 2. Nil
	// means the kit's own HTTP, unnamed.
	Transport func() (Transport, error)
}

// Run runs the command with args, the program's name left out, printing
// a line per case on stdout and what went wrong on stderr, and returns
// the code to exit with: 0 when every case passed, 1 when one failed, and
// 2 when it could not run them (a flag missing or wrong, no PostgreSQL, a
// replica that would not start). It stops at SIGINT or SIGTERM.
func (c Command) Run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	command := fs.String("replica", "", "the shell command that starts the replica under test (required)")
	database := fs.String("database", "", "a PostgreSQL server the kit may create databases on (default: $DATABASE_URL, 127.0.0.1:5432, or a throwaway cluster)")
	timeout := fs.Duration("case-timeout", 15*time.Second, "how long one case waits for the replica")
	verbose := fs.Bool("v", false, "show the replica's output and the head office's logs")
	if c.Flags != nil {
		c.Flags(fs)
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *command == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, `conformance: say which replica to test: -replica "<command>"`)
		fs.Usage()
		return 2
	}
	var t Transport
	if c.Transport != nil {
		var err error
		if t, err = c.Transport(); err != nil {
			fmt.Fprintln(stderr, "conformance:", err)
			return 2
		}
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
	if t.Front != nil {
		cfg.Front = func(ctx context.Context, httpURL string) (string, func(), error) { return t.Front(ctx, httpURL, log) }
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
	over := ""
	if t.Name != "" {
		over = " over " + t.Name
	}
	fmt.Fprintf(stdout, "all %d cases passed%s\n", len(reports), over)
	return 0
}
