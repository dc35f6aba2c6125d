package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// provenance.go is what the results' header says the figures were
// measured on: the PostgreSQL server (which one, its version, whether its
// commits wait for the disk) and the code (its git revision, and whether
// the tree held changes not committed).

// pgServer is what a PostgreSQL server says of itself.
type pgServer struct {
	version string
	// The settings that decide whether a commit waits for the disk: a
	// server with any of them off commits faster than a durable one.
	fsync, synchronousCommit, fullPageWrites string
}

// askServer asks the server at url for its version and durability
// settings.
func askServer(ctx context.Context, url string) (pgServer, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return pgServer{}, fmt.Errorf("asking PostgreSQL for its settings: %w", err)
	}
	defer conn.Close(ctx)
	var s pgServer
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('full_page_writes')`).Scan(
		&s.version, &s.fsync, &s.synchronousCommit, &s.fullPageWrites); err != nil {
		return pgServer{}, fmt.Errorf("asking PostgreSQL for its settings: %w", err)
	}
	return s, nil
}

// durable reports whether the server's commits wait for the disk as a
// production server's do.
func (s pgServer) durable() bool {
	return s.fsync == "on" && s.synchronousCommit != "off" && s.fullPageWrites == "on"
}

// pgDescription is the results header's account of PostgreSQL.
type pgDescription struct {
	used    bool // a benchmark asked for PostgreSQL
	origin  pgtest.Origin
	server  pgServer
	failure string // why none could be had
}

// description is what the run used of its main server, and of the one
// with wal_level=logical.
func (p *pgSource) description() (main, logical pgDescription) {
	return p.main.description(), p.logical.description()
}

// description is what the run used of one server.
func (f *pgFound) description() pgDescription {
	if f.url == "" && f.err == nil {
		return pgDescription{}
	}
	d := pgDescription{used: true, origin: f.origin, server: f.server}
	if f.err != nil {
		d.failure = f.err.Error()
	}
	return d
}

// text is the account in one sentence, and whether it must stand out:
// a server whose commits do not wait for the disk.
func (d pgDescription) text() (string, bool) {
	switch {
	case !d.used:
		return "PostgreSQL: not used by the benchmarks run.", false
	case d.failure != "":
		return "PostgreSQL: none could be had (" + strings.ReplaceAll(d.failure, "\n", " ") + ").", false
	}
	s := d.server
	text := fmt.Sprintf("PostgreSQL %s, %s; fsync %s, synchronous_commit %s, full_page_writes %s.",
		s.version, d.origin, s.fsync, s.synchronousCommit, s.fullPageWrites)
	if d.origin == pgtest.OriginThrowaway || !s.durable() {
		return text + " Its commits do not wait for the disk: the figures of the benchmarks that use PostgreSQL are not those of a durable server.", true
	}
	return text, false
}

// emphasized is text, in bold when it must stand out.
func (d pgDescription) emphasized() string {
	text, loud := d.text()
	if loud {
		return "**" + text + "**"
	}
	return text
}

// codeState says which code ran: the git revision of the working tree and
// whether it held changes not committed, naming a few.
func codeState(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rev, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "Code: git revision unknown (" + strings.TrimSpace(err.Error()) + ")."
	}
	state := "Code: git revision " + strings.TrimSpace(string(rev))
	out, err := exec.CommandContext(ctx, "git", "status", "--porcelain").Output()
	if err != nil {
		return state + ", whether its tree held uncommitted changes unknown (" + strings.TrimSpace(err.Error()) + ")."
	}
	var changed []string
	for line := range strings.Lines(string(out)) {
		if line = strings.TrimSpace(line); line != "" {
			_, path, _ := strings.Cut(line, " ")
			changed = append(changed, strings.TrimSpace(path))
		}
	}
	if len(changed) == 0 {
		return state + ", its tree clean."
	}
	const named = 5
	list := strings.Join(changed[:min(named, len(changed))], ", ")
	if len(changed) > named {
		list += fmt.Sprintf(" and %d more", len(changed)-named)
	}
	files := "files"
	if len(changed) == 1 {
		files = "file"
	}
	return fmt.Sprintf("%s, **its tree dirty**: %d %s changed or not tracked (%s).", state, len(changed), files, list)
}
