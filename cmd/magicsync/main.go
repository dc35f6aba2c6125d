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

// command is one subcommand: its name, a line saying what it does, what -h
// says of it, the arguments it takes after its flags, and its flags, which
// give its body.
type command struct {
	name, synopsis string
	// usage names its flags and arguments, after its name.
	usage string
	// doc is what -h says it does.
	doc string
	// args is how many arguments it takes (0 or 1), and what the one names.
	args    int
	argName string
	// flags adds the command's flags to fs and returns its body, which runs
	// once they are parsed, with the argument (or none).
	flags func(fs *flag.FlagSet) body
}

// body is a command's work, its flags parsed: arg is its argument, "" when
// it takes none.
type body func(ctx context.Context, arg string, out io.Writer) error

var commands = []command{
	{name: "inspect", synopsis: "show a replica's state from its SQLite file (read-only, safe while it runs)",
		usage: "[-json] [-wishes [-after CURSOR] [-limit N]] FILE.db", doc: inspectDoc,
		args: 1, argName: "one replica database file", flags: inspectFlags},
	{name: "status", synopsis: "show where every replica stands, as the server's Status",
		usage: "-database URL [-schema NAME] [-json]", doc: statusDoc, flags: statusFlags},
	{name: "migrate", synopsis: "apply the engine's own schema steps to PostgreSQL, or print them",
		usage: "-database URL [-schema NAME] | -print [-schema NAME] [-json]", doc: migrateDoc, flags: migrateFlags},
	{name: "release-backlog", synopsis: "hand a replica's backlog back to its queue once the cause is fixed",
		usage: "[-table NAME]... [-json] FILE.db", doc: releaseBacklogDoc,
		args: 1, argName: "one replica database file", flags: releaseBacklogFlags},
	{name: "rotate-token", synopsis: "issue a replica a new secret, revoking the old one",
		usage: "-database URL [-schema NAME] [-json] REPLICA-ID", doc: rotateTokenDoc,
		args: 1, argName: "one replica id", flags: rotateTokenFlags},
}

// runCommand parses c's flags and arguments from args and runs its body.
func (c command) runCommand(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags(c.name, c.usage, c.doc, out)
	run := c.flags(fs)
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case c.args == 0 && len(rest) != 0:
		return usagef("%s takes no arguments (got %q)", c.name, rest)
	case c.args == 0:
		return run(ctx, "", out)
	case len(rest) != 1:
		return usagef("name %s (got %d arguments)", c.argName, len(rest))
	}
	return run(ctx, rest[0], out)
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
		err := c.runCommand(ctx, args[1:], stdout)
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

// serverFlags are the flags of a command on the server's database.
type serverFlags struct {
	database, schema *string
}

// addServerFlags adds -database, defaulting to $DATABASE_URL, and -schema.
func addServerFlags(fs *flag.FlagSet) serverFlags {
	return serverFlags{
		database: fs.String("database", os.Getenv("DATABASE_URL"), "the PostgreSQL `URL` of the server's database (default $DATABASE_URL)"),
		schema:   fs.String("schema", "", "the `schema` of the engine's tables, the servers' Options.Schema (default public)"),
	}
}

// jsonFlag adds -json, saying what it writes.
func jsonFlag(fs *flag.FlagSet, usage string) *bool { return fs.Bool("json", false, usage) }

// withPool runs fn with a pool of the server's database, closed after.
func (f serverFlags) withPool(ctx context.Context, fn func(*pgxpool.Pool) error) error {
	pool, err := f.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(pool)
}

// connect opens a pool of the server's database, checking that it answers.
func (f serverFlags) connect(ctx context.Context) (*pgxpool.Pool, error) {
	database := *f.database
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

// withReplicaFile runs fn with a replica's SQLite file open, read-only or
// not (see openReplica), closed after.
func withReplicaFile(ctx context.Context, path string, readOnly bool, fn func(*sql.DB) error) error {
	db, err := openReplica(ctx, path, readOnly)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := fn(db); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
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
