// Applying a message's rows: the tries of a message (apply), the applier
// that runs one message in one transaction, and the upserts and deletes of
// the server's rows, leaving out (and recording) a row this replica cannot
// take. Provisioning, Filed, and what a try learnt of the rows that undid a
// message live in provision.go, filed.go and undone.go.

package replica

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// applier applies one message in one transaction.
type applier struct {
	r   *Replica
	tx  *sql.Tx
	msg uint64
	got Received
	// left is what earlier tries of this message learnt to leave out.
	left leftOut
	// written and removed list, once a try checks foreign keys, the keys
	// of the rows it wrote and deleted, by table.
	written, removed map[string]map[string]bool
	// stmts are the statements prepared for this message, by SQL text.
	stmts map[string]*sql.Stmt
	// unlisted, while set, keeps the rows upsert writes out of
	// Received.Applied.
	unlisted bool
	// wishesChanged is set once the message recorded, replaced or
	// withdrew a wish.
	wishesChanged bool
	// commandsChanged is set once the message recorded a command.
	commandsChanged bool
	// retained is set while the replica keeps retired rows, or once the
	// message kept one: the message's end sweeps them.
	retained bool
}

// run applies m in a transaction of its own, on a connection it checks
// first. Every statement a message of a few rows runs is one the replica
// prepared once (see statements): parsed afresh, they cost as much as the
// rest of such a message.
func (a *applier) run(ctx context.Context, m *syncpb.ToReplica) (err error) {
	conn, err := a.r.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("magicsync/replica: receive: %w", err)
	}
	defer conn.Close()
	if a.tx, err = conn.BeginTx(ctx, nil); err != nil {
		return fmt.Errorf("magicsync/replica: receive: begin: %w", err)
	}
	defer func() {
		for _, s := range a.stmts {
			s.Close()
		}
		if err == nil {
			return
		}
		if rbErr := a.tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) && !strings.Contains(rbErr.Error(), "no transaction") {
			// A connection whose transaction state is unknown must not go back to the pool.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	st := &a.r.prepared
	// The first statement writes, so that the transaction takes SQLite's
	// write lock before it reads anything (as BEGIN IMMEDIATE would): a
	// transaction that read first could not write after another
	// connection's commit. It also marks the transaction as the engine's
	// own; on a redelivery or a connection the check below refuses, the
	// transaction is rolled back, and the mark with it.
	var last uint64
	p := pragmas{file: a.r.file}
	if err := a.tx.StmtContext(ctx, st.lock).QueryRowContext(rowContext(ctx)).Scan(&last, &p.synchronous, &p.journal, &p.recursive, &a.retained); err != nil {
		return fmt.Errorf("magicsync/replica: receive: %w", err)
	}
	if err := p.check(); err != nil {
		return err
	}
	if a.msg <= last {
		a.got = Received{Redelivered: true, LastApplied: last}
		return a.tx.Rollback()
	}
	switch body := m.Body.(type) {
	case *syncpb.ToReplica_Down:
		err = a.down(ctx, body.Down)
	case *syncpb.ToReplica_EndSnapshot:
		err = a.endSnapshot(ctx, body.EndSnapshot)
	case *syncpb.ToReplica_Filed:
		err = a.filed(ctx, body.Filed)
	}
	if err != nil {
		return fmt.Errorf("magicsync/replica: receive message %d: %w", a.msg, err)
	}
	if a.retained {
		if _, err := a.r.sweep(ctx, a.tx, a.sweepDelete); err != nil {
			return fmt.Errorf("magicsync/replica: receive message %d: sweeping the retired rows: %w", a.msg, err)
		}
	}
	// Applying a Filed gives the server nothing new to hear — unless it
	// refused rows, which now wait in the backlog the server counts: else,
	// unless something else waits to be reported, it counts as reported
	// already.
	done := st.done
	if f, ok := m.Body.(*syncpb.ToReplica_Filed); ok && len(f.Filed.GetRefused()) == 0 {
		done = st.doneFiled
	}
	if _, err := a.tx.StmtContext(ctx, done).ExecContext(rowContext(ctx), a.msg); err != nil {
		return fmt.Errorf("magicsync/replica: receive: %w", err)
	}
	if a.left.foreignKeys {
		if err := a.checkForeignKeys(ctx); err != nil {
			return err
		}
	}
	if a.r.beforeCommit != nil {
		if err := a.r.beforeCommit(ctx); err != nil {
			return err
		}
	}
	if err := a.tx.Commit(); err != nil {
		// SQLite keeps a transaction open whose commit a deferred foreign
		// key refused: end it, so that the connection goes back to the
		// pool clean, or not at all.
		if _, rbErr := conn.ExecContext(context.WithoutCancel(ctx), rollbackTx); rbErr != nil && !strings.Contains(rbErr.Error(), "no transaction") {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		if refusal(err) && !a.left.foreignKeys {
			return &undoneError{cause: err, commit: true}
		}
		return fmt.Errorf("magicsync/replica: receive: commit: %w", err)
	}
	return nil
}

// rowContext is the context of the statements of a loop over many rows:
// ctx without its cancellation, which the loop checks between statements
// instead. A driver that can interrupt a statement must watch a
// cancellable context for it, and modernc.org/sqlite starts a goroutine
// per statement to do so: for a statement of a few rows that costs about
// as much as the statement.
func rowContext(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

func (a *applier) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return a.tx.ExecContext(ctx, query, args...)
}

func (a *applier) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if s, ok := a.stmts[query]; ok {
		return s, nil
	}
	var s *sql.Stmt
	if kept, ok := a.r.prepared.upserts[query]; ok {
		s = a.tx.StmtContext(ctx, kept)
	} else {
		var err error
		if s, err = a.tx.PrepareContext(ctx, query); err != nil {
			return nil, err
		}
	}
	if a.stmts == nil {
		a.stmts = map[string]*sql.Stmt{}
	}
	a.stmts[query] = s
	return s, nil
}

// reject records a row left out, to be reported up.
func (a *applier) reject(ctx context.Context, table string, key []byte, reason string) error {
	// The reason may quote the database, and a host's trigger says what
	// it likes.
	reason = safetext.Reason(reason)
	a.got.Rejected++
	a.r.log.Warn("magicsync/replica: a row was left out", "table", table, "key", codec.Key(key), "reason", reason, "message", a.msg)
	_, err := a.exec(ctx, insertRejected,
		table, key, reason, a.msg, a.r.clock.Now().UnixMicro())
	return err
}

func (a *applier) down(ctx context.Context, d *syncpb.Down) error {
	if d.GetSnapshot() != 0 {
		a.got.Staged = true
		return a.stage(ctx, d)
	}
	// A table may come in several parts, each with its columns: they
	// apply in order, upserts parents-first and deletes children-first.
	byTable := map[string][]*syncpb.TableChanges{}
	for _, t := range d.GetTables() {
		_, ok, err := a.catalogOf(ctx, t)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		byTable[t.GetTable()] = append(byTable[t.GetTable()], t)
	}
	for _, tc := range a.r.catalogs {
		for _, t := range byTable[tc.Name] {
			if len(t.Upserts) == 0 {
				continue
			}
			plan, err := a.plan(ctx, tc, t.Columns)
			if err != nil {
				return err
			}
			if err := a.upsert(ctx, plan, t.Upserts, t.UpsertKeys, a.msg, nil); err != nil {
				return err
			}
		}
	}
	for _, tc := range slices.Backward(a.r.catalogs) {
		for _, t := range byTable[tc.Name] {
			if len(t.Deletes) > 0 {
				if err := a.deleteKeys(ctx, tc, t.Deletes); err != nil {
					return err
				}
			}
		}
	}
	if err := a.settleCarried(ctx, byTable); err != nil {
		return err
	}
	if err := a.recordWishes(ctx, d.GetWishes(), 0); err != nil {
		return err
	}
	return a.recordCommands(ctx, d.GetCommands(), 0)
}

// catalogOf returns the catalog t's changes are of; ok is false when t is
// no catalog of this build, its rows then left out, each with why.
func (a *applier) catalogOf(ctx context.Context, t *syncpb.TableChanges) (tc *codec.TableCodec, ok bool, err error) {
	tc, err = a.r.codecs.Table(t.GetTable())
	if err == nil && tc.Mirror == codec.Catalog {
		return tc, true, nil
	}
	return nil, false, a.rejectAll(ctx, t, notCatalog(t.GetTable(), err))
}

func notCatalog(table string, err error) string {
	if err != nil {
		return fmt.Sprintf("table %q is not declared in this build of the replica", table)
	}
	return fmt.Sprintf("table %q is the replica's own, not the server's: the server cannot write it", table)
}

func (a *applier) rejectAll(ctx context.Context, t *syncpb.TableChanges, reason string) error {
	for _, k := range t.UpsertKeys {
		if err := a.reject(ctx, t.GetTable(), k, reason); err != nil {
			return err
		}
	}
	for _, k := range t.Deletes {
		if err := a.reject(ctx, t.GetTable(), k, reason); err != nil {
			return err
		}
	}
	return nil
}

// upsertPlan is how the rows of one table, with one list of columns, are
// written.
type upsertPlan struct {
	tc *codec.TableCodec
	// local[i] is the position in tc.Columns of the message's column i, or
	// -1 for a column this build does not write.
	local []int
	// write lists the message's columns the statement binds, in order.
	write []int
	// keyAt lists the message's columns holding the key, in key order.
	keyAt []int
	// stmt writes one row; query(n) is the statement writing n rows, up
	// to per rows at a time.
	stmt  *sql.Stmt
	query func(n int) string
	per   int
	// problem, when set, is why no row of this plan can be taken.
	problem string
}

// maxRowsPerInsert bounds the rows of one multi-row INSERT, and 999, the
// least bound on an SQLite statement's parameters, its values.
const maxRowsPerInsert = 64

// rowsPerInsert is how many rows of columns values one INSERT carries.
func rowsPerInsert(columns int) int { return max(1, min(maxRowsPerInsert, 999/max(columns, 1))) }

func (a *applier) plan(ctx context.Context, tc *codec.TableCodec, columns []string) (*upsertPlan, error) {
	p := newPlan(tc, columns)
	if p.problem != "" {
		return p, nil
	}
	s, err := a.stmt(ctx, p.query(1))
	if err != nil {
		return nil, fmt.Errorf("preparing the upsert of %q: %w", tc.Name, err)
	}
	p.stmt = s
	return p, nil
}

// newPlan plans the upsert of tc's rows as a message's columns list them;
// the plan's statement is left to bind.
func newPlan(tc *codec.TableCodec, columns []string) *upsertPlan {
	p := &upsertPlan{tc: tc, local: make([]int, len(columns))}
	for i, name := range columns {
		p.local[i] = -1
		for j := range tc.Columns {
			c := &tc.Columns[j]
			if c.Name == name && !c.Generated && !c.ReplicaOwned {
				p.local[i] = j
				p.write = append(p.write, i)
			}
		}
	}
	for _, k := range tc.KeyIndex {
		at := slices.Index(p.local, k)
		if at < 0 {
			p.problem = fmt.Sprintf("the message lacks key column %q of table %q", tc.Columns[k].Name, tc.Name)
			return p
		}
		p.keyAt = append(p.keyAt, at)
	}
	cols := make([]codec.Column, len(p.write))
	for i, w := range p.write {
		cols[i] = tc.Columns[p.local[w]]
	}
	p.query = upsertRows(tc, cols)
	p.per = rowsPerInsert(len(cols))
	return p
}

// decoded is one row ready to bind.
type decoded struct {
	key  []byte
	args []any
}

// decode turns a row's tuple into arguments, or says why it cannot.
func (p *upsertPlan) decode(row, key []byte, vals []codec.Value, args []any) ([]codec.Value, []any, string) {
	vals, err := codec.DecodeTuple(row, vals)
	if err != nil {
		return vals, args, fmt.Sprintf("the row does not decode: %v", err)
	}
	if len(vals) != len(p.local) {
		return vals, args, fmt.Sprintf("the row has %d values for %d columns", len(vals), len(p.local))
	}
	for _, w := range p.write {
		c := &p.tc.Columns[p.local[w]]
		if err := c.CheckValue(vals[w]); err != nil {
			return vals, args, err.Error()
		}
		args = append(args, codec.Arg(vals[w]))
	}
	keyVals := make([]codec.Value, len(p.keyAt))
	for i, at := range p.keyAt {
		keyVals[i] = vals[at]
	}
	if string(codec.KeyOfValues(keyVals...)) != string(key) {
		return vals, args, "the row's key differs from the key sent beside it"
	}
	return vals, args, ""
}

// upsert writes rows, leaving out those that do not decode or that a
// constraint refuses. It tries the rows as one batch first, and row by row
// only when the batch fails. onApplied, when set, sees every written key.
func (a *applier) upsert(ctx context.Context, p *upsertPlan, rows, keys [][]byte, msg uint64, onApplied func(key []byte)) error {
	table := p.tc.Name
	if p.problem != "" {
		for _, k := range keys {
			if err := a.reject(ctx, table, k, p.problem); err != nil {
				return err
			}
		}
		return nil
	}
	good, err := a.decodeRows(ctx, p, rows, keys)
	if err != nil || len(good) == 0 {
		return err
	}
	return a.writeRows(ctx, p, good, onApplied)
}

// decodeRows decodes the rows of an upsert into their statement's
// arguments, leaving out (and recording) those that do not decode and
// those an earlier try of the message found refused.
func (a *applier) decodeRows(ctx context.Context, p *upsertPlan, rows, keys [][]byte) ([]decoded, error) {
	table := p.tc.Name
	good := make([]decoded, 0, len(rows))
	argBuf := make([]any, 0, len(rows)*len(p.write))
	var vals []codec.Value
	leave := a.left.rows[table]
	for i, row := range rows {
		if why, ok := leave[string(keys[i])]; ok {
			if err := a.reject(ctx, table, keys[i], why); err != nil {
				return nil, err
			}
			continue
		}
		start := len(argBuf)
		var why string
		vals, argBuf, why = p.decode(row, keys[i], vals, argBuf)
		if why != "" {
			argBuf = argBuf[:start]
			if err := a.reject(ctx, table, keys[i], why); err != nil {
				return nil, err
			}
			continue
		}
		good = append(good, decoded{key: keys[i], args: argBuf[start:len(argBuf):len(argBuf)]})
	}
	return good, nil
}

// writeRows writes the decoded rows of an upsert, p.per rows a statement
// where it can, and calls onApplied with the key of each row written.
func (a *applier) writeRows(ctx context.Context, p *upsertPlan, good []decoded, onApplied func(key []byte)) error {
	table := p.tc.Name
	applied := func(d decoded) {
		if a.left.foreignKeys {
			a.wrote(table, d.key)
		}
		if !a.unlisted {
			a.got.Applied[table] = append(a.got.Applied[table], magicsync.Key(d.key))
		}
		if onApplied != nil {
			onApplied(d.key)
		}
	}
	// Many rows a statement, with no savepoint: SQLite undoes a statement
	// that fails and keeps the transaction — unless storage failed, which
	// may roll the whole transaction back; intact tells. The rows of a
	// statement that failed go again one by one, to leave out only those
	// refused. (A savepoint around the rows had SQLite copy the pages
	// every statement touched into the savepoint's sub-journal, a
	// temporary file past 64 KiB; and a statement a row cost as much
	// again: together, two thirds of the time of provisioning a large
	// table.)
	rctx := rowContext(ctx)
	one := func(d decoded) error {
		_, rowErr := p.stmt.ExecContext(rctx, d.args...)
		if rowErr == nil {
			applied(d)
			return nil
		}
		if err := a.intact(ctx, rowErr, table, d.key, false); err != nil {
			return err
		}
		return a.reject(ctx, table, d.key, "the database refused the row: "+rowErr.Error())
	}
	var many *sql.Stmt
	if p.per > 1 && len(good) >= p.per && !a.left.oneByOne[table] {
		s, err := a.stmt(ctx, p.query(p.per))
		if err != nil {
			return err
		}
		many = s
	}
	var args []any
	for i := 0; i < len(good); {
		if err := ctx.Err(); err != nil {
			return err
		}
		if many == nil || len(good)-i < p.per {
			if err := one(good[i]); err != nil {
				return err
			}
			i++
			continue
		}
		chunk := good[i : i+p.per]
		i += p.per
		args = args[:0]
		for _, d := range chunk {
			args = append(args, d.args...)
		}
		_, chunkErr := many.ExecContext(rctx, args...)
		if chunkErr == nil {
			for _, d := range chunk {
				applied(d)
			}
			continue
		}
		if err := a.intact(ctx, chunkErr, table, nil, false); err != nil {
			return err
		}
		for _, d := range chunk {
			if err := one(d); err != nil {
				return err
			}
		}
	}
	return nil
}

// oneRow runs a statement for one row behind a savepoint. rowErr is the
// database refusing the row (undone, the transaction still whole); err is
// a failure of the transaction itself.
func (a *applier) oneRow(ctx context.Context, stmt *sql.Stmt, args []any, table string, key []byte, del bool) (rowErr, err error) {
	if _, err := a.exec(ctx, savepointRow); err != nil {
		return nil, err
	}
	if _, rowErr = stmt.ExecContext(ctx, args...); rowErr != nil {
		if err := a.intact(ctx, rowErr, table, key, del); err != nil {
			return nil, err
		}
		if _, err := a.exec(ctx, rollbackToRow); err != nil {
			return nil, fmt.Errorf("after %v: %w", rowErr, err)
		}
	}
	if _, err := a.exec(ctx, releaseRow); err != nil {
		return nil, err
	}
	return rowErr, nil
}

// keyArgs decodes a key tuple into arguments for WHERE k1 = ? AND k2 = ?.
func keyArgs(tc *codec.TableCodec, key []byte) ([]any, error) {
	vals, err := codec.DecodeTuple(key, nil)
	if err != nil {
		return nil, err
	}
	if len(vals) != len(tc.KeyIndex) {
		return nil, fmt.Errorf("the key has %d values; table %q's key has %d columns", len(vals), tc.Name, len(tc.KeyIndex))
	}
	args := make([]any, len(vals))
	for i, v := range vals {
		if err := tc.Columns[tc.KeyIndex[i]].CheckValue(v); err != nil {
			return nil, err
		}
		args[i] = codec.Arg(v)
	}
	return args, nil
}

// deleteKeys removes rows by key, leaving out (and reporting) a delete a
// constraint refuses. A row of a catalog declaring Retired that a row of
// the file points at is kept instead, marked retired (retain).
func (a *applier) deleteKeys(ctx context.Context, tc *codec.TableCodec, keys [][]byte) error {
	s, err := a.stmt(ctx, deleteByKey(tc))
	if err != nil {
		return err
	}
	referenced := a.r.retiring[tc.Name]
	leave := a.left.deletes[tc.Name]
	for _, k := range keys {
		if why, ok := leave[string(k)]; ok {
			if err := a.reject(ctx, tc.Name, k, why); err != nil {
				return err
			}
			continue
		}
		args, err := keyArgs(tc, k)
		if err != nil {
			if err := a.reject(ctx, tc.Name, k, "the key does not decode: "+err.Error()); err != nil {
				return err
			}
			continue
		}
		if referenced != "" {
			kept, err := a.retain(ctx, tc, referenced, k, args)
			if err != nil {
				return err
			}
			if kept {
				continue
			}
		}
		delErr, err := a.oneRow(ctx, s, args, tc.Name, k, true)
		if err != nil {
			return err
		}
		if delErr != nil {
			if err := a.reject(ctx, tc.Name, k, "the database refused the delete: "+delErr.Error()); err != nil {
				return err
			}
			continue
		}
		if a.left.foreignKeys {
			note(&a.removed, tc.Name, k)
		}
		a.got.Applied[tc.Name] = append(a.got.Applied[tc.Name], magicsync.Key(k))
	}
	return nil
}

// retain keeps a row of a catalog declaring Retired that the server let go
// while a row of the file points at it (referenced, the query of
// r.retiring): its Retired column set, recorded in sync_retained, neither
// applied nor rejected. It reports false, changing nothing, when nothing
// points at the row, which then goes as any other. A row the database
// refuses to mark is rejected, as a refused delete would be.
func (a *applier) retain(ctx context.Context, tc *codec.TableCodec, referenced string, key []byte, args []any) (bool, error) {
	q, err := a.stmt(ctx, referenced)
	if err != nil {
		return false, fmt.Errorf("preparing the check of rows pointing at %q: %w", tc.Name, err)
	}
	var pointed bool
	if err := q.QueryRowContext(rowContext(ctx), args...).Scan(&pointed); err != nil {
		return false, err
	}
	if !pointed {
		return false, nil
	}
	if why, ok := a.left.rows[tc.Name][string(key)]; ok {
		// Marking it undid an earlier try's whole transaction.
		return true, a.reject(ctx, tc.Name, key, why)
	}
	mark, err := a.stmt(ctx, markRetiredByKey(tc))
	if err != nil {
		return false, err
	}
	markErr, err := a.oneRow(ctx, mark, args, tc.Name, key, false)
	if err != nil {
		return false, err
	}
	if markErr != nil {
		return true, a.reject(ctx, tc.Name, key, "the database refused to keep the row marked retired: "+markErr.Error())
	}
	if _, err := a.exec(ctx, insertRetained, tc.Name, key); err != nil {
		return false, err
	}
	a.retained = true
	return true, nil
}

// sweepDelete deletes a retained row nothing points at any more, in the
// message's transaction, and says whether it went. A delete the database
// refuses keeps the row retained, for a later sweep; one that undid the
// whole transaction is left out of the message's next try.
func (a *applier) sweepDelete(ctx context.Context, tc *codec.TableCodec, key []byte, args []any) (bool, error) {
	if _, ok := a.left.deletes[tc.Name][string(key)]; ok {
		return false, nil
	}
	s, err := a.stmt(ctx, deleteByKey(tc))
	if err != nil {
		return false, err
	}
	delErr, err := a.oneRow(ctx, s, args, tc.Name, key, true)
	if err != nil {
		return false, err
	}
	if delErr != nil {
		a.r.log.Warn("magicsync/replica: a retired row nothing points at stays: the database refused its delete",
			"table", tc.Name, "key", codec.Key(key), "reason", delErr, "message", a.msg)
		return false, nil
	}
	if a.left.foreignKeys {
		note(&a.removed, tc.Name, key)
	}
	return true, nil
}

// execer runs the sweep's statements: a message's transaction, or gather's
// connection inside its transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// sweep goes through the rows kept retired, children before parents so
// that a retained row pointing at another lets it go in the same sweep: a
// row nothing points at any more is deleted (del, which says whether it
// went) and forgotten; one the server sent again, no longer retired, one
// gone, and one of a table no longer declaring Retired are forgotten. It
// returns how many it deleted or forgot; with none kept it reads one
// empty table.
func (r *Replica) sweep(ctx context.Context, db execer, del func(context.Context, *codec.TableCodec, []byte, []any) (bool, error)) (int, error) {
	rows, err := db.QueryContext(ctx, selectRetained)
	if err != nil {
		return 0, err
	}
	byTable := map[string][][]byte{}
	for rows.Next() {
		var tbl string
		var key []byte
		if err := rows.Scan(&tbl, &key); err != nil {
			rows.Close()
			return 0, err
		}
		byTable[tbl] = append(byTable[tbl], key)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(byTable) == 0 {
		return 0, err
	}
	changed := 0
	forget := func(tbl string, key []byte) error {
		changed++
		_, err := db.ExecContext(ctx, forgetRetained, tbl, key)
		return err
	}
	for _, tc := range slices.Backward(r.catalogs) {
		keys := byTable[tc.Name]
		delete(byTable, tc.Name)
		if len(keys) == 0 {
			continue
		}
		if tc.Retired == "" {
			for _, k := range keys {
				if err := forget(tc.Name, k); err != nil {
					return changed, err
				}
			}
			continue
		}
		isRetired := selectRetiredByKey(tc)
		for _, k := range keys {
			if err := ctx.Err(); err != nil {
				return changed, err
			}
			args, err := keyArgs(tc, k)
			if err != nil {
				if err := forget(tc.Name, k); err != nil {
					return changed, err
				}
				continue
			}
			var retired bool
			switch err := db.QueryRowContext(ctx, isRetired, args...).Scan(&retired); {
			case errors.Is(err, sql.ErrNoRows):
			case err != nil:
				return changed, err
			}
			if retired {
				var pointed bool
				if q := r.retiring[tc.Name]; q != "" {
					if err := db.QueryRowContext(ctx, q, args...).Scan(&pointed); err != nil {
						return changed, err
					}
				}
				if pointed {
					continue
				}
				gone, err := del(ctx, tc, k, args)
				if err != nil || !gone {
					if err != nil {
						return changed, err
					}
					continue
				}
			}
			if err := forget(tc.Name, k); err != nil {
				return changed, err
			}
		}
	}
	// Tables no longer declared: their rows are plain rows now.
	for tbl, keys := range byTable {
		for _, k := range keys {
			if err := forget(tbl, k); err != nil {
				return changed, err
			}
		}
	}
	return changed, nil
}

// apply applies m in one transaction. A row whose refusal undid the whole
// transaction rather than its own statement — a constraint declared ON
// CONFLICT ROLLBACK, a trigger's RAISE(ROLLBACK), a deferred foreign key
// failing the commit — is left out and the message applied again without
// it, so that one bad row never blocks the queue.
func (r *Replica) apply(ctx context.Context, m *syncpb.ToReplica) (*applier, error) {
	left := r.learnt.take(m.GetId())
	// Each try leaves out one more row, or goes one row a statement where
	// it went many. A delivery makes a bounded number of tries; what they
	// learnt is kept for the message's next delivery, so that a message
	// with many such rows applies after a few deliveries.
	const tries = 64
	for try := 0; ; try++ {
		a := &applier{r: r, msg: m.GetId(), got: Received{Applied: map[string][]magicsync.Key{}}, left: left}
		err := a.run(ctx, m)
		undone, ok := errors.AsType[*undoneError](err)
		if !ok || !left.learn(undone) {
			return a, err
		}
		r.log.Warn("magicsync/replica: a row undid the whole message; applying it again without that row",
			"table", undone.table, "key", codec.Key(undone.key), "reason", undone.cause, "message", m.GetId())
		if try+1 >= tries {
			r.learnt.keep(m.GetId(), left)
			return a, fmt.Errorf("magicsync/replica: receive message %d: %d rows undid it in turn, and were left out; it applies on a later delivery: %w", m.GetId(), tries, err)
		}
	}
}
