package main

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// sqlCounts counts the statements a pool runs, and its commits: an explicit
// COMMIT, or a statement that writes (INSERT, UPDATE, DELETE, MERGE, COPY)
// run outside a transaction, which commits on its own. A commit is what
// waits for the disk: the figure the fleet benchmark puts beside each
// delivery and each poll. It passes every call on to next, when set (the
// -sqlstats timings).
type sqlCounts struct {
	statements atomic.Int64
	commits    atomic.Int64
	next       *sqlStats
}

// countsSnapshot is what sqlCounts counted up to a moment.
type countsSnapshot struct {
	Statements int64 `json:"statements"`
	Commits    int64 `json:"commits"`
}

func (c *sqlCounts) snapshot() countsSnapshot {
	return countsSnapshot{Statements: c.statements.Load(), Commits: c.commits.Load()}
}

// count counts one statement, run while the connection's transaction
// status was idle.
func (c *sqlCounts) count(sql string, idle bool) {
	c.statements.Add(1)
	switch verb := firstWord(sql); {
	case verb == "commit" || verb == "end":
		c.commits.Add(1)
	case idle && writes(verb, sql):
		c.commits.Add(1)
	}
}

// firstWord is the statement's first keyword, in lower case.
func firstWord(sql string) string {
	sql = strings.TrimLeft(sql, " \t\r\n(")
	end := strings.IndexAny(sql, " \t\r\n(;")
	if end < 0 {
		end = len(sql)
	}
	return strings.ToLower(sql[:end])
}

// writes reports whether a statement beginning with verb writes: a WITH
// counts when one of its parts is a data-modifying statement.
func writes(verb, sql string) bool {
	switch verb {
	case "insert", "update", "delete", "merge", "copy":
		return true
	case "with":
		low := strings.ToLower(sql)
		return strings.Contains(low, "insert into") || strings.Contains(low, "delete from") ||
			strings.Count(low, "update ") > strings.Count(low, "for update")
	}
	return false
}

func idle(conn *pgx.Conn) bool { return conn != nil && conn.PgConn().TxStatus() == 'I' }

// TraceQueryStart counts the statement.
func (c *sqlCounts) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.count(data.SQL, idle(conn))
	if c.next != nil {
		return c.next.TraceQueryStart(ctx, conn, data)
	}
	return ctx
}

// TraceQueryEnd passes the end on.
func (c *sqlCounts) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if c.next != nil {
		c.next.TraceQueryEnd(ctx, conn, data)
	}
}

// batchState is what a batch's start saw: a batch sent outside a
// transaction runs in one implicit transaction, one commit if it writes.
type batchState struct {
	idle   bool
	writes bool
	// explicit is set by a BEGIN in the batch: its COMMIT counts instead.
	explicit bool
}

type batchKey struct{}

// TraceBatchStart notes whether the batch runs outside a transaction.
func (c *sqlCounts) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, batchKey{}, &batchState{idle: idle(conn)})
}

// TraceBatchQuery counts one statement of a batch.
func (c *sqlCounts) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	c.count(data.SQL, false)
	b, ok := ctx.Value(batchKey{}).(*batchState)
	if !ok {
		return
	}
	switch verb := firstWord(data.SQL); {
	case verb == "begin" || verb == "start":
		b.explicit = true
	case writes(verb, data.SQL):
		b.writes = true
	}
}

// TraceBatchEnd counts the batch's implicit commit.
func (c *sqlCounts) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	if b, ok := ctx.Value(batchKey{}).(*batchState); ok && b.idle && b.writes && !b.explicit {
		c.commits.Add(1)
	}
}

// TraceCopyFromStart counts a COPY, a commit outside a transaction.
func (c *sqlCounts) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.count("copy", idle(conn))
	return ctx
}

// TraceCopyFromEnd does nothing.
func (c *sqlCounts) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}
