package main

import (
	"context"
	"database/sql"
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

const releaseBacklogDoc = "Release-backlog hands the rows a replica set aside after the server refused\n" +
	"them for good (its backlog) back to their queue, once the cause was fixed on\n" +
	"the server, with the reports and answers set aside alike (replica.ReleaseBacklog).\n" +
	"It writes one short transaction, safe on the file of a running replica, which\n" +
	"sends them at its lane's next idle turn; a stopped one, when it starts. 'magicsync\n" +
	"inspect' lists the backlog and why the server refused it."

// releaseBacklogFlags is magicsync release-backlog.
func releaseBacklogFlags(fs *flag.FlagSet) body {
	var tables tableList
	fs.Var(&tables, "table", "release only the rows of this `table` (repeat, or separate by commas)")
	asJSON := jsonFlag(fs, "write JSON, for scripts")
	return func(ctx context.Context, file string, out io.Writer) error {
		var n int
		err := withReplicaFile(ctx, file, false, func(db *sql.DB) (err error) {
			n, err = replica.ReleaseBacklog(ctx, db, tables...)
			return err
		})
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(out, struct {
				Released int `json:"released"`
			}{n})
		}
		fmt.Fprintf(out, "Released %d rows of the backlog; the replica sends them at its next idle turn, or when it starts.\n", n)
		return nil
	}
}
