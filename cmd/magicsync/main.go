// Command magicsync is the operator's tool of a magicsync deployment: it
// inspects a replica's SQLite file, reads the server's status, applies or
// prints the engine's schema steps, hands a replica's backlog back to its
// queue, and rotates a replica's token.
//
// Install it with
//
//	go install github.com/magicsync/magicsync/cmd/magicsync@latest
//
// Usage:
//
//	magicsync inspect [-json] FILE.db
//	magicsync status -database URL [-schema NAME] [-json]
//	magicsync migrate -database URL [-schema NAME]
//	magicsync migrate -print [-schema NAME] [-json]
//	magicsync release-backlog [-table NAME]... [-json] FILE.db
//	magicsync rotate-token -database URL [-schema NAME] [-json] REPLICA-ID
//
// Every command takes -h. -database defaults to $DATABASE_URL. The exit
// status is 0 on success, 1 when the command failed, 2 when it was called
// wrongly. Errors go to standard error, naming what to fix.
//
// inspect only reads: it opens the file read-only and reads it in one read
// transaction, so it is safe on the file of a running replica (a WAL
// reader never blocks the replica's writes). release-backlog writes one
// short transaction, waiting up to 5 s for the replica's own.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // registers "sqlite": the replica's files
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand: its name, a line saying what it does, and
// its body, which parses its own flags.
type command struct {
	name, synopsis string
	run            func(ctx context.Context, args []string, out io.Writer) error
}

var commands = []command{
	{"inspect", "show a replica's state from its SQLite file (read-only, safe while it runs)", runInspect},
	{"status", "show where every replica stands, as the server's Status", runStatus},
	{"migrate", "apply the engine's own schema steps to PostgreSQL, or print them", runMigrate},
	{"release-backlog", "hand a replica's backlog back to its queue once the cause is fixed", runReleaseBacklog},
	{"rotate-token", "issue a replica a new secret, revoking the old one", runRotateToken},
}

// run runs the command args name and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	if name == "-h" || name == "-help" || name == "--help" || name == "help" {
		usage(stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		err := c.run(ctx, args[1:], stdout)
		var ue usageError
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "magicsync %s: %v\nRun 'magicsync %s -h' for its usage.\n", name, err, name)
			return exitUsage
		default:
			fmt.Fprintf(stderr, "magicsync %s: %v\n", name, err)
			return exitFailure
		}
	}
	fmt.Fprintf(stderr, "magicsync: no command %q\n", name)
	usage(stderr)
	return exitUsage
}

// usage lists the commands.
func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: magicsync COMMAND [flags] [args]")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.synopsis)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'magicsync COMMAND -h' for a command's flags. Exit status: 0 ok, 1 failure, 2 usage.")
}

// usageError is a command called wrongly: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// usagef makes a usageError.
func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// newFlags makes a command's flag set: -h prints its usage, text a few
// lines on what it does and its arguments, on out.
func newFlags(name, args, text string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by run
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: magicsync %s %s\n\n%s\n\nFlags:\n", name, args, text)
		fs.SetOutput(out)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parse parses args, flags and arguments in any order, and returns the
// arguments. A flag error is a usage error; -h is flag.ErrHelp, after the
// usage was printed.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.Usage()
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return rest, nil
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
}

// databaseFlag adds -database, defaulting to $DATABASE_URL, and -schema.
func databaseFlag(fs *flag.FlagSet) (database, schema *string) {
	database = fs.String("database", os.Getenv("DATABASE_URL"), "the PostgreSQL `URL` of the server's database (default $DATABASE_URL)")
	schema = fs.String("schema", "", "the `schema` of the engine's tables, the servers' Options.Schema (default public)")
	return database, schema
}

// connect opens a pool of the server's database, checking that it answers.
func connect(ctx context.Context, database string) (*pgxpool.Pool, error) {
	if database == "" {
		return nil, usagef("no database: give -database URL (postgres://user@host/db) or set $DATABASE_URL")
	}
	pool, err := pgxpool.New(ctx, database)
	if err != nil {
		return nil, fmt.Errorf("-database: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to the database: %w (check -database and that PostgreSQL runs)", err)
	}
	return pool, nil
}

// openReplica opens a replica's SQLite file, read-only or not, with a busy
// timeout of 5 s, refusing a path that is no file: SQLite would create
// one.
func openReplica(ctx context.Context, path string, readOnly bool) (*sql.DB, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: name the replica's database file", err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory: name the replica's database file", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	mode := "rw"
	if readOnly {
		mode = "ro"
	}
	dsn := "file:" + (&url.URL{Path: filepath.ToSlash(abs)}).EscapedPath() + "?mode=" + mode + "&_pragma=busy_timeout(5000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	return db, nil
}

// writeJSON writes v as indented JSON.
func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes rows under a header, aligned in columns.
func table(out io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// timeOrNil is t for JSON, nil when zero.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// when writes t for a table: "-" when zero.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// clip shortens s to n runes for a table.
func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
