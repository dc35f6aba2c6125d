package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/magicsync/magicsync/replica"
)

// tableList is a repeatable -table flag.
type tableList []string

func (l *tableList) String() string { return strings.Join(*l, ",") }

func (l *tableList) Set(v string) error {
	for _, t := range strings.Split(v, ",") {
		if t = strings.TrimSpace(t); t != "" {
			*l = append(*l, t)
		}
	}
	return nil
}

var _ flag.Value = (*tableList)(nil)

// runReleaseBacklog is magicsync release-backlog.
func runReleaseBacklog(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("release-backlog", "[-table NAME]... [-json] FILE.db",
		"Release-backlog hands the rows a replica set aside after the server refused\n"+
			"them for good (its backlog) back to their queue, once the cause was fixed on\n"+
			"the server, with the reports and answers set aside alike (replica.ReleaseBacklog).\n"+
			"It writes one short transaction, safe on the file of a running replica, which\n"+
			"sends them at its lane's next idle turn; a stopped one, when it starts. 'magicsync\n"+
			"inspect' lists the backlog and why the server refused it.", out)
	var tables tableList
	fs.Var(&tables, "table", "release only the rows of this `table` (repeat, or separate by commas)")
	asJSON := fs.Bool("json", false, "write JSON, for scripts")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("name one replica database file (got %d arguments)", len(rest))
	}
	db, err := openReplica(ctx, rest[0], false)
	if err != nil {
		return err
	}
	defer db.Close()
	n, err := replica.ReleaseBacklog(ctx, db, tables...)
	if err != nil {
		return fmt.Errorf("%s: %w", rest[0], err)
	}
	if *asJSON {
		return writeJSON(out, struct {
			Released int `json:"released"`
		}{n})
	}
	fmt.Fprintf(out, "Released %d rows of the backlog; the replica sends them at its next idle turn, or when it starts.\n", n)
	return nil
}
