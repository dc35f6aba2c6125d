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

// checkConn refuses a connection the engine cannot keep its word on:
// commits that are not durable, a journal that cannot roll back, and
// triggers that miss the rows a conflict replaces.
func checkConn(ctx context.Context, q querier) error {
	var (
		synchronous int
		journal     string
		recursive   int
		file        string
	)
	err := q.QueryRowContext(ctx, `SELECT s.synchronous, j.journal_mode, r.recursive_triggers, d.file
		FROM pragma_synchronous s, pragma_journal_mode j, pragma_recursive_triggers r, pragma_database_list d
		WHERE d.name = 'main'`).Scan(&synchronous, &journal, &recursive, &file)
	if err != nil {
		return fmt.Errorf("magicsync: reading the connection's PRAGMAs: %w", err)
	}
	var problems []string
	if synchronous < 2 {
		problems = append(problems, fmt.Sprintf("synchronous is %s, so a commit is not durable and an acknowledged message could be lost in a power cut: set it to FULL "+
			"(modernc.org/sqlite: _pragma=synchronous(FULL) in the DSN; mattn/go-sqlite3: _synchronous=FULL)", syncName(synchronous)))
	}
	if j := strings.ToLower(journal); file != "" && (j == "off" || j == "memory") {
		problems = append(problems, fmt.Sprintf("journal_mode is %s on a database file, so a message could be applied in part: use WAL "+
			"(modernc.org/sqlite: _pragma=journal_mode(WAL); mattn/go-sqlite3: _journal_mode=WAL)", strings.ToUpper(journal)))
	}
	if recursive == 0 {
		problems = append(problems, "recursive_triggers is off, so a row an INSERT OR REPLACE deletes would not go up as gone: turn it on "+
			"(modernc.org/sqlite: _pragma=recursive_triggers(1); mattn/go-sqlite3: _recursive_triggers=1)")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s; set these in the DSN so every pooled connection has them", ErrUnsafe, strings.Join(problems, "; "))
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
