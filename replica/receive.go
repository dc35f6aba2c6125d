package replica

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Receive applies one message from the server in one transaction, committed
// before it returns, and records its id in that transaction. Acknowledge
// the message to the transport only after Receive returned a nil error: a
// message at or below the last one applied changes nothing
// (Received.Redelivered). Received.LastApplied says where the replica
// stands: the transport tells the server on its next request for a
// message, which is how a server restored from an older backup, issuing
// old ids again, learns that it was.
//
// A row this replica cannot take — it does not decode, or a constraint
// refuses it — is left out, recorded with its reason and reported up, and
// the rest applies. An error means the replica's storage failed (the
// message comes again), that the message speaks a newer protocol
// (*ProtocolError: do not acknowledge it), or that it does not decode at
// all (ErrMalformed).
func (r *Replica) Receive(ctx context.Context, msg []byte) (Received, error) {
	if r.closed.Load() {
		return Received{}, ErrClosed
	}
	m, err := wire.DecodeToReplica(msg)
	if err != nil {
		if newer, ok := errors.AsType[*wire.NewerProtocolError](err); ok {
			return Received{}, &ProtocolError{Got: newer.Got, Speak: newer.Speak}
		}
		return Received{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if _, _, err := r.whoAmI(ctx); err != nil {
		return Received{}, err
	}
	a, err := r.apply(ctx, m)
	if err != nil {
		return Received{}, err
	}
	// The main lane goes at once when there is news for the server: rows
	// left out, own rows to send again after a provisioning, rows it
	// filed (the lane may send on). The id of a message applied without
	// news needs no message of its own — the transport acknowledges it —
	// and goes with the lane's next message, at the latest on its idle
	// turn: an upward message per message received doubled the server's
	// work of a fan-out.
	if _, filed := m.Body.(*syncpb.ToReplica_Filed); filed || a.got.Rejected > 0 || a.got.Provisioned {
		r.lane("main").poke()
	}
	got := a.got
	if !got.Redelivered {
		got.LastApplied = m.GetId()
	}
	return got, nil
}

// LastApplied returns the id of the last message the replica applied, 0
// before the first: what a transport tells the server as it asks for the
// next message (httpsync's ReceiveLoop asks it once, as it starts).
func (r *Replica) LastApplied(ctx context.Context) (uint64, error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	var last uint64
	if err := r.db.QueryRowContext(ctx, "SELECT last_applied FROM sync_replica").Scan(&last); err != nil {
		return 0, fmt.Errorf("magicsync: reading the last message applied: %w", err)
	}
	return last, nil
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
		r.log.Warn("magicsync: a row undid the whole message; applying it again without that row",
			"table", undone.table, "key", magicsync.Key(undone.key), "reason", undone.cause, "message", m.GetId())
		if try+1 >= tries {
			r.learnt.keep(m.GetId(), left)
			return a, fmt.Errorf("magicsync: receive message %d: %d rows undid it in turn, and were left out; it applies on a later delivery: %w", m.GetId(), tries, err)
		}
	}
}

// learnt keeps, between deliveries of one message, what its tries learnt
// to leave out.
type learnt struct {
	mu   sync.Mutex
	msg  uint64
	left leftOut
}

// take returns what was learnt of message msg, or nothing.
func (l *learnt) take(msg uint64) leftOut {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.msg != msg {
		return leftOut{}
	}
	left := l.left
	l.msg, l.left = 0, leftOut{}
	return left
}

func (l *learnt) keep(msg uint64, left leftOut) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msg, l.left = msg, left
}

// undoneError is a row's refusal that undid the message's whole
// transaction. key is nil when the statement carried many rows.
type undoneError struct {
	table string
	key   []byte
	cause error
	// del is set when the refused statement was a delete.
	del bool
	// commit is set when the commit was refused, naming no row: the next
	// try checks the foreign keys before it commits.
	commit bool
	// also lists more rows to leave out, found together.
	also []*undoneError
}

func (e *undoneError) Error() string {
	return fmt.Sprintf("a row of %q undid the whole transaction: %v", e.table, e.cause)
}

func (e *undoneError) Unwrap() error { return e.cause }

// leftOut is what the tries of one message learnt to leave out.
type leftOut struct {
	// rows and deletes map a table to the keys to leave out, with why.
	rows, deletes map[string]map[string]string
	// oneByOne lists the tables whose rows go one a statement, to find
	// the row among many that undid the transaction.
	oneByOne map[string]bool
	// foreignKeys, once a commit was refused, checks the foreign keys
	// before committing, to name the rows that break them.
	foreignKeys bool
}

// learn records what the next try leaves out, and whether it differs from
// this try.
func (l *leftOut) learn(e *undoneError) bool {
	learnt := false
	for _, more := range e.also {
		learnt = l.learn(more) || learnt
	}
	if e.commit {
		if l.foreignKeys {
			return learnt
		}
		l.foreignKeys = true
		return true
	}
	return l.learnRow(e) || learnt
}

func (l *leftOut) learnRow(e *undoneError) bool {
	if e.key == nil {
		if l.oneByOne[e.table] {
			return false
		}
		if l.oneByOne == nil {
			l.oneByOne = map[string]bool{}
		}
		l.oneByOne[e.table] = true
		return true
	}
	set := &l.rows
	if e.del {
		set = &l.deletes
	}
	if *set == nil {
		*set = map[string]map[string]string{}
	}
	keys := (*set)[e.table]
	if keys == nil {
		keys = map[string]string{}
		(*set)[e.table] = keys
	}
	if _, seen := keys[string(e.key)]; seen {
		return false
	}
	what := "the database refused the row, undoing the whole message: "
	if e.del {
		what = "the database refused the delete, undoing the whole message: "
	}
	keys[string(e.key)] = what + e.cause.Error()
	return true
}

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
}

// run applies m in a transaction of its own, on a connection it checks
// first. Every statement a message of a few rows runs is one the replica
// prepared once (see statements): parsed afresh, they cost as much as the
// rest of such a message.
func (a *applier) run(ctx context.Context, m *syncpb.ToReplica) (err error) {
	conn, err := a.r.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("magicsync: receive: %w", err)
	}
	defer conn.Close()
	if a.tx, err = conn.BeginTx(ctx, nil); err != nil {
		return fmt.Errorf("magicsync: receive: begin: %w", err)
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
	if err := a.tx.StmtContext(ctx, st.lock).QueryRowContext(rowContext(ctx)).Scan(&last, &p.synchronous, &p.journal, &p.recursive); err != nil {
		return fmt.Errorf("magicsync: receive: %w", err)
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
		return fmt.Errorf("magicsync: receive message %d: %w", a.msg, err)
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
		return fmt.Errorf("magicsync: receive: %w", err)
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
		if _, rbErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil && !strings.Contains(rbErr.Error(), "no transaction") {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		if refusal(err) && !a.left.foreignKeys {
			return &undoneError{cause: err, commit: true}
		}
		return fmt.Errorf("magicsync: receive: commit: %w", err)
	}
	return nil
}

// checkForeignKeys names the rows that break a foreign key before the
// commit does, when a try's commit was refused: a row whose parent is
// missing, or the parent a message deleted from under a row. Only then,
// for the check reads every table.
func (a *applier) checkForeignKeys(ctx context.Context) error {
	rows, err := a.tx.QueryContext(ctx, "SELECT \"table\", rowid, parent, fkid FROM pragma_foreign_key_check LIMIT 10000")
	if err != nil {
		return fmt.Errorf("checking foreign keys: %w", err)
	}
	type violation struct {
		table, parent string
		rowid         sql.NullInt64
		fk            int
	}
	var found []violation
	for rows.Next() {
		var v violation
		if err := rows.Scan(&v.table, &v.rowid, &v.parent, &v.fk); err != nil {
			rows.Close()
			return err
		}
		found = append(found, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var undone *undoneError
	for _, v := range found {
		if !v.rowid.Valid {
			continue // a table WITHOUT ROWID: the row cannot be named
		}
		u, err := a.blame(ctx, v.table, v.rowid.Int64, v.parent, v.fk)
		if err != nil {
			return err
		}
		if u == nil {
			continue
		}
		if undone == nil {
			undone = u
		} else {
			undone.also = append(undone.also, u)
		}
	}
	if undone == nil {
		return nil
	}
	return undone
}

// blame names what breaks foreign key fk of table's row rowid: the row
// itself, when this try wrote it; else the parent row this try deleted
// from under it, when the parent is a catalog whose key the foreign key
// names. nil when neither: a row that broke the key before the message,
// or one of a table WITHOUT ROWID, which the check cannot name.
func (a *applier) blame(ctx context.Context, table string, rowid int64, parent string, fk int) (*undoneError, error) {
	cause := fmt.Errorf("FOREIGN KEY constraint failed: a row of %q points at a row of %q that is not there", table, parent)
	if tc, err := a.r.codecs.Table(table); err == nil && tc.Mirror == magicsync.Catalog {
		key, err := a.keyAt(ctx, tc.Name, quoteAll(tc.ColumnNames(tc.KeyIndex)), tc, rowid)
		if err != nil {
			return nil, err
		}
		if key != nil && a.written[table][string(key)] {
			return &undoneError{table: table, key: key, cause: cause}, nil
		}
	}
	ptc, err := a.r.codecs.Table(parent)
	if err != nil || ptc.Mirror != magicsync.Catalog {
		return nil, nil
	}
	from, to, err := a.foreignKey(ctx, table, fk)
	if err != nil {
		return nil, err
	}
	keyNames := ptc.ColumnNames(ptc.KeyIndex)
	if len(to) == 0 {
		to = keyNames
	}
	if !slices.Equal(to, keyNames) {
		return nil, nil
	}
	key, err := a.keyAt(ctx, table, quoteAll(from), ptc, rowid)
	if err != nil || key == nil || !a.removed[parent][string(key)] {
		return nil, err
	}
	return &undoneError{table: parent, key: key, cause: cause, del: true}, nil
}

func (a *applier) wrote(table string, key []byte) { note(&a.written, table, key) }

func note(set *map[string]map[string]bool, table string, key []byte) {
	if *set == nil {
		*set = map[string]map[string]bool{}
	}
	if (*set)[table] == nil {
		(*set)[table] = map[string]bool{}
	}
	(*set)[table][string(key)] = true
}

// keyAt reads columns of table's row rowid as a key of keyOf's table.
func (a *applier) keyAt(ctx context.Context, table string, columns []string, keyOf *magicsync.TableCodec, rowid int64) ([]byte, error) {
	raw := make([]any, len(columns))
	ptrs := make([]any, len(raw))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE rowid = ?", strings.Join(columns, ", "), magicsync.QuoteIdent(table))
	if err := a.tx.QueryRowContext(ctx, q, rowid).Scan(ptrs...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		return nil, err
	}
	vals := make([]magicsync.Value, len(raw))
	for i, src := range raw {
		v, err := keyOf.Columns[keyOf.KeyIndex[i]].Canonical(src)
		if err != nil {
			return nil, nil // not a key of the parent's: nothing to name
		}
		vals[i] = v
	}
	return []byte(magicsync.KeyOfValues(vals...)), nil
}

// foreignKey lists the columns of table's foreign key fk, and those of the
// parent they point at (none when they point at its primary key).
func (a *applier) foreignKey(ctx context.Context, table string, fk int) (from, to []string, err error) {
	rows, err := a.tx.QueryContext(ctx, "SELECT \"from\", \"to\" FROM pragma_foreign_key_list(?) WHERE id = ? ORDER BY seq", table, fk)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var f string
		var t sql.NullString
		if err := rows.Scan(&f, &t); err != nil {
			return nil, nil, err
		}
		from = append(from, f)
		if t.Valid {
			to = append(to, t.String)
		}
	}
	return from, to, rows.Err()
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
	a.got.Rejected++
	a.r.log.Warn("magicsync: a row was left out", "table", table, "key", magicsync.Key(key), "reason", reason, "message", a.msg)
	_, err := a.exec(ctx, "INSERT INTO sync_rejected (tbl, key, reason, message, at) VALUES (?, ?, ?, ?, ?)",
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
		tc, err := a.r.codecs.Table(t.GetTable())
		if err != nil || tc.Mirror != magicsync.Catalog {
			if err := a.rejectAll(ctx, t, notCatalog(t.GetTable(), err)); err != nil {
				return err
			}
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
	return nil
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
	tc *magicsync.TableCodec
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

// valuesList is n lists of columns placeholders: "(?, ?), (?, ?)".
func valuesList(n, columns int) string {
	one := "(" + placeholders(columns) + ")"
	return strings.TrimSuffix(strings.Repeat(one+", ", n), ", ")
}

func (a *applier) plan(ctx context.Context, tc *magicsync.TableCodec, columns []string) (*upsertPlan, error) {
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
func newPlan(tc *magicsync.TableCodec, columns []string) *upsertPlan {
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
	names := make([]string, len(p.write))
	var set []string
	for i, w := range p.write {
		c := tc.Columns[p.local[w]]
		names[i] = magicsync.QuoteIdent(c.Name)
		if !c.Key && !c.Created {
			set = append(set, names[i]+" = excluded."+names[i])
		}
	}
	conflict := "DO NOTHING"
	if len(set) > 0 {
		conflict = "DO UPDATE SET " + strings.Join(set, ", ")
	}
	p.query = func(n int) string {
		return fmt.Sprintf("INSERT INTO %s (%s) VALUES %s ON CONFLICT (%s) %s",
			magicsync.QuoteIdent(tc.Name), strings.Join(names, ", "), valuesList(n, len(names)),
			strings.Join(quoteAll(tc.ColumnNames(tc.KeyIndex)), ", "), conflict)
	}
	p.per = rowsPerInsert(len(names))
	return p
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// decoded is one row ready to bind.
type decoded struct {
	key  []byte
	args []any
}

// decode turns a row's tuple into arguments, or says why it cannot.
func (p *upsertPlan) decode(row, key []byte, vals []magicsync.Value, args []any) ([]magicsync.Value, []any, string) {
	vals, err := magicsync.DecodeTuple(row, vals)
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
		args = append(args, magicsync.Arg(vals[w]))
	}
	keyVals := make([]magicsync.Value, len(p.keyAt))
	for i, at := range p.keyAt {
		keyVals[i] = vals[at]
	}
	if string(magicsync.KeyOfValues(keyVals...)) != string(key) {
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
	good := make([]decoded, 0, len(rows))
	argBuf := make([]any, 0, len(rows)*len(p.write))
	var vals []magicsync.Value
	leave := a.left.rows[table]
	for i, row := range rows {
		if why, ok := leave[string(keys[i])]; ok {
			if err := a.reject(ctx, table, keys[i], why); err != nil {
				return err
			}
			continue
		}
		start := len(argBuf)
		var why string
		vals, argBuf, why = p.decode(row, keys[i], vals, argBuf)
		if why != "" {
			argBuf = argBuf[:start]
			if err := a.reject(ctx, table, keys[i], why); err != nil {
				return err
			}
			continue
		}
		good = append(good, decoded{key: keys[i], args: argBuf[start:len(argBuf):len(argBuf)]})
	}
	if len(good) == 0 {
		return nil
	}
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

// intact checks, after a statement of table's rows failed with cause, that
// the message's transaction is still open: that SQLite undid only the
// statement. run marks the transaction first thing (applying = 1, never
// committed), so the mark is gone when the transaction was rolled back.
// A transaction the row's refusal undid gives an *undoneError naming the
// row (key, nil for a statement of many rows), for the next try to leave
// it out; one that storage failed, an error to return.
func (a *applier) intact(ctx context.Context, cause error, table string, key []byte, del bool) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var applying int
	if err := a.tx.QueryRowContext(ctx, "SELECT applying FROM sync_replica").Scan(&applying); err != nil {
		return fmt.Errorf("after %v: %w", cause, err)
	}
	switch {
	case !refusal(cause):
		// Storage failed, not the row: the message fails, and comes again.
		return fmt.Errorf("storing a row of %q: %w", table, cause)
	case applying == 1:
		return nil
	default:
		return &undoneError{table: table, key: key, cause: cause, del: del}
	}
}

// SQLite's primary result codes of a statement the data made fail.
const (
	sqliteTooBig     = 18
	sqliteConstraint = 19
	sqliteMismatch   = 20
)

// refusal tells a statement the data made fail — a constraint, a
// trigger's RAISE, a value too big — from a failure of storage or of the
// engine, by SQLite's result code. A driver that carries no code is
// taken at its words of a failed constraint, and at nothing else: a
// storage failure taken for a refusal would leave a row out for good.
func refusal(err error) bool {
	if code, ok := resultCode(err); ok {
		switch code & 0xff {
		case sqliteConstraint, sqliteTooBig, sqliteMismatch:
			return true
		}
		return false
	}
	return strings.Contains(err.Error(), "constraint failed")
}

// resultCode finds the SQLite result code in err's chain, where the
// drivers keep it: a Code method (modernc.org/sqlite) or a Code field
// (mattn/go-sqlite3). The engine imports no driver, so it looks for the
// shape rather than the type.
func resultCode(err error) (int, bool) {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if c, ok := e.(interface{ Code() int }); ok {
			return c.Code(), true
		}
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Kind() == reflect.Struct {
			if f := v.FieldByName("Code"); f.IsValid() && f.CanInt() {
				return int(f.Int()), true
			}
		}
	}
	return 0, false
}

// oneRow runs a statement for one row behind a savepoint. rowErr is the
// database refusing the row (undone, the transaction still whole); err is
// a failure of the transaction itself.
func (a *applier) oneRow(ctx context.Context, stmt *sql.Stmt, args []any, table string, key []byte, del bool) (rowErr, err error) {
	if _, err := a.exec(ctx, "SAVEPOINT sync_row"); err != nil {
		return nil, err
	}
	if _, rowErr = stmt.ExecContext(ctx, args...); rowErr != nil {
		if err := a.intact(ctx, rowErr, table, key, del); err != nil {
			return nil, err
		}
		if _, err := a.exec(ctx, "ROLLBACK TO sync_row"); err != nil {
			return nil, fmt.Errorf("after %v: %w", rowErr, err)
		}
	}
	if _, err := a.exec(ctx, "RELEASE sync_row"); err != nil {
		return nil, err
	}
	return rowErr, nil
}

// keyArgs decodes a key tuple into arguments for WHERE k1 = ? AND k2 = ?.
func keyArgs(tc *magicsync.TableCodec, key []byte) ([]any, error) {
	vals, err := magicsync.DecodeTuple(key, nil)
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
		args[i] = magicsync.Arg(v)
	}
	return args, nil
}

func keyWhere(tc *magicsync.TableCodec) string {
	parts := make([]string, len(tc.KeyIndex))
	for i, k := range tc.KeyIndex {
		parts[i] = magicsync.QuoteIdent(tc.Columns[k].Name) + " = ?"
	}
	return strings.Join(parts, " AND ")
}

// deleteKeys removes rows by key, leaving out (and reporting) a delete a
// constraint refuses.
func (a *applier) deleteKeys(ctx context.Context, tc *magicsync.TableCodec, keys [][]byte) error {
	s, err := a.stmt(ctx, fmt.Sprintf("DELETE FROM %s WHERE %s", magicsync.QuoteIdent(tc.Name), keyWhere(tc)))
	if err != nil {
		return err
	}
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

// stage keeps one part of a provisioning until its EndSnapshot.
func (a *applier) stage(ctx context.Context, d *syncpb.Down) error {
	// Many rows a statement: a statement a row cost as much again.
	query := func(n int) string {
		return "INSERT INTO sync_staged (snapshot, tbl, key, columns, row, message) VALUES " + valuesList(n, 6) +
			" ON CONFLICT (snapshot, tbl, key) DO UPDATE SET columns = excluded.columns, row = excluded.row, message = excluded.message"
	}
	one, err := a.stmt(ctx, query(1))
	if err != nil {
		return err
	}
	per := rowsPerInsert(6)
	// A new provisioning may begin before an earlier one ended: what the
	// earlier one staged will never be switched in. (Two ranges of the
	// primary key: "snapshot <> ?" scanned every row staged so far, once
	// per part, quadratic in the snapshot.)
	for _, q := range []string{"DELETE FROM sync_staged WHERE snapshot < ?", "DELETE FROM sync_staged WHERE snapshot > ?"} {
		if _, err := a.exec(ctx, q, d.GetSnapshot()); err != nil {
			return err
		}
	}
	rctx := rowContext(ctx)
	var args []any
	for _, t := range d.GetTables() {
		tc, err := a.r.codecs.Table(t.GetTable())
		if err != nil || tc.Mirror != magicsync.Catalog {
			if err := a.rejectAll(ctx, t, notCatalog(t.GetTable(), err)); err != nil {
				return err
			}
			continue
		}
		cols := strings.Join(t.Columns, "\x1f")
		for i := 0; i < len(t.Upserts); {
			if err := ctx.Err(); err != nil {
				return err
			}
			s, n := one, 1
			if len(t.Upserts)-i >= per {
				if s, err = a.stmt(ctx, query(per)); err != nil {
					return err
				}
				n = per
			}
			args = args[:0]
			for j := i; j < i+n; j++ {
				args = append(args, d.GetSnapshot(), t.GetTable(), t.UpsertKeys[j], cols, t.Upserts[j], a.msg)
			}
			if _, err := s.ExecContext(rctx, args...); err != nil {
				return err
			}
			i += n
		}
	}
	return nil
}

// endSnapshot switches a provisioning in: staged rows replace what the
// replica holds of the server's tables; own settings the server records but
// the replica no longer holds are deleted as the replica's own writes; and
// every own row is sent again.
func (a *applier) endSnapshot(ctx context.Context, e *syncpb.EndSnapshot) error {
	covered := map[string]bool{}
	for _, t := range e.GetTables() {
		covered[t] = true
	}
	// A table that held nothing before the switch holds only staged rows
	// after it: it has nothing to let go (a new replica's provisioning).
	held := map[string]bool{}
	for _, tc := range a.r.catalogs {
		if covered[tc.Name] {
			var any bool
			if err := a.tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM "+magicsync.QuoteIdent(tc.Name)+")").Scan(&any); err != nil {
				return fmt.Errorf("provisioning %q: %w", tc.Name, err)
			}
			held[tc.Name] = any
		}
	}
	for _, tc := range a.r.catalogs {
		if covered[tc.Name] {
			if err := a.switchIn(ctx, e.GetSnapshot(), tc); err != nil {
				return fmt.Errorf("provisioning %q: %w", tc.Name, err)
			}
		}
	}
	for _, tc := range slices.Backward(a.r.catalogs) {
		if covered[tc.Name] && held[tc.Name] {
			if err := a.letGo(ctx, e.GetSnapshot(), tc); err != nil {
				return fmt.Errorf("provisioning %q: %w", tc.Name, err)
			}
		}
	}
	for _, own := range e.GetOwn() {
		tc, err := a.r.codecs.Table(own.GetTable())
		if err != nil || tc.Mirror == magicsync.Catalog {
			continue
		}
		if err := a.forgetOwn(ctx, tc, own.GetKeys()); err != nil {
			return err
		}
	}
	for _, tc := range a.r.own {
		q := fmt.Sprintf("INSERT INTO sync_pending (tbl, key, row_id, resent) SELECT ?, %s, rowid, 1 FROM %s WHERE true "+
			"ON CONFLICT (tbl, key) DO UPDATE SET row_id = excluded.row_id, change = change + 1, resent = 1, held = NULL, held_reason = NULL",
			keyExpr(tc, ""), magicsync.QuoteIdent(tc.Name))
		if _, err := a.exec(ctx, q, tc.Name); err != nil {
			return fmt.Errorf("sending %q again: %w", tc.Name, err)
		}
	}
	// Staged parts of a later snapshot stay; with none, the whole table
	// goes, which SQLite does without visiting its rows.
	var later bool
	if err := a.tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM sync_staged WHERE snapshot > ?)", e.GetSnapshot()).Scan(&later); err != nil {
		return err
	}
	discard, args := "DELETE FROM sync_staged", []any(nil)
	if later {
		discard, args = "DELETE FROM sync_staged WHERE snapshot <= ?", []any{e.GetSnapshot()}
	}
	if _, err := a.exec(ctx, discard, args...); err != nil {
		return err
	}
	a.got.Provisioned = true
	return nil
}

// keyExpr is the SQL expression the note triggers use for a row's key,
// over columns qualified by prefix (or bound parameters when prefix is "?").
func keyExpr(tc *magicsync.TableCodec, prefix string) string {
	parts := make([]string, len(tc.KeyIndex))
	for i, k := range tc.KeyIndex {
		if prefix == "?" {
			parts[i] = "quote(?)"
			continue
		}
		parts[i] = "quote(" + prefix + magicsync.QuoteIdent(tc.Columns[k].Name) + ")"
	}
	return strings.Join(parts, " || ',' || ")
}

// switchIn upserts a snapshot's staged rows of one table, in pages.
func (a *applier) switchIn(ctx context.Context, snapshot uint64, tc *magicsync.TableCodec) error {
	const page = 2000
	var after []byte
	plans := map[string]*upsertPlan{}
	for {
		// The first page has no lower bound (a nil key would bind as NULL,
		// which no key is greater than); the others start past the last
		// key, as an index range: "(? IS NULL OR key > ?)" scanned every
		// staged row before the page again, quadratic in the snapshot.
		q, args := "SELECT key, columns, row FROM sync_staged WHERE snapshot = ? AND tbl = ? ORDER BY key LIMIT ?", []any{snapshot, tc.Name, page}
		if after != nil {
			q, args = "SELECT key, columns, row FROM sync_staged WHERE snapshot = ? AND tbl = ? AND key > ? ORDER BY key LIMIT ?", []any{snapshot, tc.Name, after, page}
		}
		rows, err := a.tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		byCols := map[string]*stagedRows{}
		var order []string
		n := 0
		var raw sql.RawBytes
		var g *stagedRows
		var cols string
		for rows.Next() {
			var key, row []byte
			if err := rows.Scan(&key, &raw, &row); err != nil {
				rows.Close()
				return err
			}
			// The columns are nearly always those of the row before.
			if g == nil || string(raw) != cols {
				cols = string(raw)
				g = byCols[cols]
				if g == nil {
					g = &stagedRows{}
					byCols[cols] = g
					order = append(order, cols)
				}
			}
			g.keys = append(g.keys, key)
			g.rows = append(g.rows, row)
			after = key
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, cols := range order {
			p := plans[cols]
			if p == nil {
				if p, err = a.plan(ctx, tc, strings.Split(cols, "\x1f")); err != nil {
					return err
				}
				plans[cols] = p
			}
			// A provisioning names no row as applied: it switched them all.
			a.unlisted = true
			err := a.upsert(ctx, p, byCols[cols].rows, byCols[cols].keys, a.msg, nil)
			a.unlisted = false
			if err != nil {
				return err
			}
		}
		delete(a.got.Applied, tc.Name)
		if n < page {
			return nil
		}
	}
}

type stagedRows struct{ keys, rows [][]byte }

// letGo deletes the rows of one table that the snapshot did not stage.
func (a *applier) letGo(ctx context.Context, snapshot uint64, tc *magicsync.TableCodec) error {
	if _, err := a.exec(ctx, "CREATE TEMP TABLE IF NOT EXISTS sync_held (key BLOB PRIMARY KEY) WITHOUT ROWID"); err != nil {
		return err
	}
	if _, err := a.exec(ctx, "DELETE FROM temp.sync_held"); err != nil {
		return err
	}
	ins, err := a.stmt(ctx, "INSERT OR IGNORE INTO temp.sync_held (key) VALUES (?)")
	if err != nil {
		return err
	}
	// Page through the table by key, noting each row's canonical key.
	keyCols := strings.Join(quoteAll(tc.ColumnNames(tc.KeyIndex)), ", ")
	const page = 2000
	var after []any
	for {
		q := fmt.Sprintf("SELECT %s FROM %s", keyCols, magicsync.QuoteIdent(tc.Name))
		if after != nil {
			q += fmt.Sprintf(" WHERE (%s) > (%s)", keyCols, placeholders(len(after)))
		}
		q += fmt.Sprintf(" ORDER BY %s LIMIT %d", keyCols, page)
		rows, err := a.tx.QueryContext(ctx, q, after...)
		if err != nil {
			return err
		}
		var keys [][]byte
		var last []any
		for rows.Next() {
			raw := make([]any, len(tc.KeyIndex))
			ptrs := make([]any, len(raw))
			for i := range raw {
				ptrs[i] = &raw[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return err
			}
			vals := make([]magicsync.Value, len(raw))
			for i, src := range raw {
				v, err := tc.Columns[tc.KeyIndex[i]].Canonical(src)
				if err != nil {
					rows.Close()
					return err
				}
				vals[i] = v
			}
			keys = append(keys, []byte(magicsync.KeyOfValues(vals...)))
			last = raw
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, k := range keys {
			if _, err := ins.ExecContext(ctx, k); err != nil {
				return err
			}
		}
		if len(keys) < page {
			break
		}
		after = last
	}
	rows, err := a.tx.QueryContext(ctx, "SELECT key FROM temp.sync_held WHERE key NOT IN (SELECT key FROM sync_staged WHERE snapshot = ? AND tbl = ?)", snapshot, tc.Name)
	if err != nil {
		return err
	}
	var gone [][]byte
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return err
		}
		gone = append(gone, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if err := a.deleteKeys(ctx, tc, gone); err != nil {
		return err
	}
	delete(a.got.Applied, tc.Name)
	_, err = a.exec(ctx, "DELETE FROM temp.sync_held")
	return err
}

// forgetOwn notes, as the replica's own deletes, the rows the server records
// it holding that it no longer holds.
func (a *applier) forgetOwn(ctx context.Context, tc *magicsync.TableCodec, keys [][]byte) error {
	exists, err := a.stmt(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE %s", magicsync.QuoteIdent(tc.Name), keyWhere(tc)))
	if err != nil {
		return err
	}
	note, err := a.stmt(ctx, fmt.Sprintf("INSERT INTO sync_pending (tbl, key, row_id, resent) VALUES (?, %s, NULL, 1) "+
		"ON CONFLICT (tbl, key) DO UPDATE SET row_id = NULL, change = change + 1, resent = 1", keyExpr(tc, "?")))
	if err != nil {
		return err
	}
	for _, k := range keys {
		args, err := keyArgs(tc, k)
		if err != nil {
			if err := a.reject(ctx, tc.Name, k, "the key does not decode: "+err.Error()); err != nil {
				return err
			}
			continue
		}
		var n int
		if err := exists.QueryRowContext(ctx, args...).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			if _, err := note.ExecContext(ctx, append([]any{tc.Name}, args...)...); err != nil {
				return err
			}
		}
	}
	return nil
}

// filed forgets the rows the server confirmed, unless written again since,
// and sets aside the rows it refused: for each upload it confirms — its
// sequence, and those of earlier, confirmations the server merged while
// they waited — as a Filed of that upload alone would, with the rows
// refused in that upload (a refused row names its upload's sequence in
// its message field when it is one of earlier).
func (a *applier) filed(ctx context.Context, f *syncpb.Filed) error {
	earlier := f.GetEarlier()
	refused := map[uint64][]*syncpb.Rejected{}
	for _, ref := range f.GetRefused() {
		of := ref.GetMessage()
		if of == 0 || !slices.Contains(earlier, of) {
			of = f.GetSequence()
		}
		refused[of] = append(refused[of], ref)
	}
	for _, seq := range append([]uint64{f.GetSequence()}, earlier...) {
		if err := a.filedOne(ctx, f.GetLane(), seq, refused[seq]); err != nil {
			return err
		}
		delete(refused, seq) // a sequence named twice is confirmed again, refusing nothing more
	}
	return nil
}

// filedOne forgets the rows the server confirmed filing in the upload seq
// of lane, unless written again since, and sets aside those it refused.
func (a *applier) filedOne(ctx context.Context, lane string, seq uint64, refused []*syncpb.Rejected) error {
	for _, ref := range refused {
		tc, err := a.r.codecs.Table(ref.GetTable())
		if err != nil || tc.Mirror == magicsync.Catalog {
			continue
		}
		args, err := keyArgs(tc, ref.GetKey())
		if err != nil {
			continue
		}
		q := fmt.Sprintf("UPDATE sync_pending SET held = ?, held_reason = ?, sent_lane = NULL, sent_seq = NULL, sent_change = NULL "+
			"WHERE tbl = ? AND key = %s AND sent_lane = ? AND sent_seq = ? AND change = sent_change", keyExpr(tc, "?"))
		all := append([]any{a.r.build, "the server refused it: " + ref.GetReason(), tc.Name}, args...)
		if _, err := a.exec(ctx, q, append(all, lane, seq)...); err != nil {
			return err
		}
		a.r.log.Warn("magicsync: the server refused a row; it waits in the backlog", "table", tc.Name, "key", magicsync.Key(ref.GetKey()), "reason", ref.GetReason())
	}
	if _, err := a.exec(ctx, "DELETE FROM sync_pending WHERE sent_lane = ? AND sent_seq = ? AND change = sent_change AND held IS NULL",
		lane, seq); err != nil {
		return err
	}
	if _, err := a.exec(ctx, "UPDATE sync_pending SET sent_lane = NULL, sent_seq = NULL, sent_change = NULL, sent_at = NULL, resent = 0 WHERE sent_lane = ? AND sent_seq = ?",
		lane, seq); err != nil {
		return err
	}
	if lane == "main" {
		if _, err := a.exec(ctx, "UPDATE sync_rejected SET filed = 1 WHERE reported_seq = ?", seq); err != nil {
			return err
		}
		// A clearing the server confirmed leaves nothing to keep.
		if _, err := a.exec(ctx, "DELETE FROM sync_rejected WHERE reported_seq = ? AND cleared = 1", seq); err != nil {
			return err
		}
	}
	return nil
}
