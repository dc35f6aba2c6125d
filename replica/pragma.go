// The connection's pragmas: the check that refuses a connection without
// durable commits, a journal that rolls back, and recursive triggers.

package replica

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// querier is what *sql.DB, *sql.Conn and *sql.Tx have in common.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// pragmas are what checkConn judges of a connection.
type pragmas struct {
	synchronous int
	journal     string
	recursive   int
	// file is the database's file, "" for one in memory.
	file string
}

// checkConn refuses a connection the engine cannot keep its word on:
// commits that are not durable, a journal that cannot roll back, and
// triggers that miss the rows a conflict replaces. It returns what it
// read.
func checkConn(ctx context.Context, q querier) (pragmas, error) {
	var p pragmas
	if err := q.QueryRowContext(ctx, pragmaQuery).Scan(&p.synchronous, &p.journal, &p.recursive, &p.file); err != nil {
		return p, fmt.Errorf("magicsync/replica: reading the connection's PRAGMAs: %w", err)
	}
	return p, p.check()
}

// check says what makes the connection unsafe, if anything.
func (p pragmas) check() error {
	synchronous, journal, recursive, file := p.synchronous, p.journal, p.recursive, p.file
	var problems []string
	if synchronous < 2 {
		problems = append(problems, fmt.Sprintf("synchronous is %s, so a commit is not durable and an acknowledged message could be lost in a power cut: set it to FULL "+
			"(modernc.org/sqlite: _pragma=synchronous(FULL) in the DSN; mattn/go-sqlite3: _synchronous=FULL)", syncName(synchronous)))
	}
	// A journal in memory rolls back, but not after a crash, which a
	// database in memory does not survive anyway; no journal (OFF) makes
	// ROLLBACK undefined, in memory too, and a failed message would stay
	// applied in part.
	switch j := strings.ToLower(journal); {
	case file != "" && (j == "off" || j == "memory"):
		problems = append(problems, fmt.Sprintf("journal_mode is %s on a database file, so a message could be applied in part: use WAL "+
			"(modernc.org/sqlite: _pragma=journal_mode(WAL); mattn/go-sqlite3: _journal_mode=WAL)", strings.ToUpper(journal)))
	case j == "off":
		problems = append(problems, "journal_mode is OFF, which cannot roll back, so a message could be applied in part: use MEMORY for a database in memory "+
			"(modernc.org/sqlite: _pragma=journal_mode(MEMORY); mattn/go-sqlite3: _journal_mode=MEMORY), or leave journal_mode out of its DSN")
	}
	if recursive == 0 {
		problems = append(problems, "recursive_triggers is off, so a row an INSERT OR REPLACE deletes would not go up as gone: turn it on "+
			"(modernc.org/sqlite: _pragma=recursive_triggers(1); mattn/go-sqlite3: _recursive_triggers=1)")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s; set these in the DSN so every pooled connection has them (DSN writes one that does)", ErrUnsafe, strings.Join(problems, "; "))
	}
	return nil
}

func syncName(level int) string {
	switch level {
	case 0:
		return "OFF"
	case 1:
		return "NORMAL"
	case 2:
		return "FULL"
	case 3:
		return "EXTRA"
	}
	return fmt.Sprint(level)
}
