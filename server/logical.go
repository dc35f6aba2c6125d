package server

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
)

// logical.go holds the capture service of CaptureLogical: Run's reader of
// the engine's replication slot. It turns each change PostgreSQL's
// pgoutput sends of a published table into the notes the triggers would
// have written (sync_touched), and the planner takes them as it takes the
// triggers': routes, Follows, Active, Retired, digests and provisioning do
// not know which way a note came.
//
// Nothing is skipped: the slot's confirmed position moves past a
// transaction only once the notes of its changes committed, so a process
// killed at any point reads the changes again from the last position
// confirmed, and notes them again (a key noted twice is planned once, as
// it is). A large transaction is noted in batches as it streams by, never
// held whole. The slot takes one reader at a time: the process reading it
// is the one whose START_REPLICATION PostgreSQL accepted, and the others
// look every slotRetry whether it is free, taking over when its reader
// died. A slot lost — the database restored from a dump, a new primary
// after a failover — is made again, and every row of the declared tables
// noted once more (seed), as when the slot began.

const (
	// slotRetry is how often a process whose slot another reads looks
	// whether it is free.
	slotRetry = time.Second
	// slotNoteBatch bounds the notes held before they are written, within
	// a large transaction too.
	slotNoteBatch = 4096
	// slotFlushAfter is how long the notes of committed transactions wait
	// for more changes before they are written: a burst of small
	// transactions is noted in one statement, a lone one at once.
	slotFlushAfter = time.Millisecond
	// catchUpTimeout bounds a catch-up (catchUp): the slot is read up to
	// a position in well under a second, unless something is wrong.
	catchUpTimeout = time.Minute
	// slotStatusEvery is how often the reader tells PostgreSQL where it
	// stands, whether or not it was asked.
	slotStatusEvery = 10 * time.Second
)

// errSlotTaken is readSlot's when another process reads the slot.
var errSlotTaken = errors.New("the replication slot is read by another process")

// captureLogical is the capture service of CaptureLogical: it reads the
// slot while it may, kicking the planner after each batch of notes, and
// while another process reads it, looks every slotRetry whether it is
// free. A failure is logged once per outage, as the other services do.
func (s *Server) captureLogical(ctx context.Context, kick chan<- struct{}) {
	var out outage
	for {
		err := s.readSlot(ctx, kick)
		if ctx.Err() != nil {
			return
		}
		wait := slotRetry
		if errors.Is(err, errSlotTaken) {
			err = nil
		}
		wait = max(wait, out.note(s.log, err,
			"magicsync/server: reading the host's changes from the replication slot fails; trying again until it works",
			"magicsync/server: reading the host's changes from the replication slot works again"))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// readSlot reads the slot until ctx ends or the stream fails.
func (s *Server) readSlot(ctx context.Context, kick chan<- struct{}) error {
	r, err := s.openSlot(ctx, kick)
	if err != nil {
		return err
	}
	defer closeConn(ctx, r.conn)
	return r.run(ctx)
}

// openSlot makes the slot when it is missing, notes every row when the
// slot is new to the engine, and starts streaming it: the reader returned
// holds the replication connection, which the caller closes.
func (s *Server) openSlot(ctx context.Context, kick chan<- struct{}) (*slotReader, error) {
	exists, active, err := s.slotState(ctx)
	if err != nil {
		return nil, err
	}
	if active {
		return nil, errSlotTaken
	}
	conn, err := s.replicationConn(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.startSlot(ctx, conn, exists); err != nil {
		closeConn(ctx, conn)
		return nil, err
	}
	return &slotReader{s: s, conn: conn, kick: kick, rels: map[uint32]*slotRelation{}, pending: map[*triggerSet]*slotNotes{}}, nil
}

// startSlot makes the slot unless it exists, seeds it and starts
// streaming it on conn.
func (s *Server) startSlot(ctx context.Context, conn *pgconn.PgConn, exists bool) error {
	if !exists {
		if err := s.makeSlot(ctx, conn); err != nil {
			return err
		}
	}
	if err := s.seed(ctx); err != nil {
		return err
	}
	args := []string{"proto_version '1'", "publication_names " + quoteLiteral(s.m.engine.publicationName())}
	if err := pglogrepl.StartReplication(ctx, conn, s.slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		if pe, ok := errors.AsType[*pgconn.PgError](err); ok && pe.Code == "55006" {
			return errSlotTaken // object_in_use: another process started first
		}
		return fmt.Errorf("reading replication slot %s: %w", s.slot, err)
	}
	return nil
}

// ensureSlot makes the slot when it is missing. New calls it, so that the
// changes committed once New returned are read whenever Run starts:
// PostgreSQL makes a slot once the transactions running when it was asked
// have ended, and one open then would hold back Run's first reading, and
// the changes committed meanwhile with it.
func (s *Server) ensureSlot(ctx context.Context) error {
	exists, _, err := s.slotState(ctx)
	if err != nil || exists {
		return err
	}
	conn, err := s.replicationConn(ctx)
	if err != nil {
		return err
	}
	defer closeConn(ctx, conn)
	return s.makeSlot(ctx, conn)
}

// makeSlot makes the slot. The record that every row was noted for the
// slot of this name is forgotten first: one restored from a dump, or left
// by a slot lost, would otherwise stand for the new slot, whose rows are
// then never noted. A process dying between the two forgets it again.
func (s *Server) makeSlot(ctx context.Context, conn *pgconn.PgConn) error {
	if _, err := s.pool.Exec(ctx, s.sql.of(qCaptureForget), s.slot); err != nil {
		return fmt.Errorf("making replication slot %s: %w", s.slot, err)
	}
	_, err := pglogrepl.CreateReplicationSlot(ctx, conn, s.slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication})
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && pe.Code == "42710" {
		return nil // another process made it meanwhile
	}
	if err != nil {
		return fmt.Errorf("making replication slot %s: %w", s.slot, err)
	}
	s.log.Info("magicsync/server: made the replication slot the host's changes are read from", "slot", s.slot)
	return nil
}

// catchUp returns once every change committed before it was called is
// noted (CaptureLogical; under triggers a committed change is noted
// already). It reads the slot itself when no process does, and otherwise
// waits for the process that does to confirm as much. Tests and
// benchmarks call it before a pass, to plan what they just wrote.
func (s *Server) catchUp(ctx context.Context) error {
	if s.opts.Capture != CaptureLogical {
		return nil
	}
	target, err := s.flushWAL(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, catchUpTimeout, fmt.Errorf("replication slot %s not confirmed up to %s within %v", s.slot, target, catchUpTimeout))
	defer cancel()
	for {
		r, err := s.openSlot(ctx, nil)
		if err == nil {
			// Read up to target: the notes of every change before it are
			// committed then, whenever PostgreSQL shows the slot
			// confirmed that far.
			defer closeConn(ctx, r.conn)
			r.until = target
			return r.run(ctx)
		}
		if !errors.Is(err, errSlotTaken) {
			return err
		}
		var text string
		if err := s.pool.QueryRow(ctx, s.sql.of(qSlotConfirmed), s.slot).Scan(&text); err != nil {
			return fmt.Errorf("reading how far replication slot %s is confirmed: %w", s.slot, err)
		}
		if confirmed, err := pglogrepl.ParseLSN(text); err == nil && confirmed >= target {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (confirmed: %s)", context.Cause(ctx), text)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// flushWAL flushes the WAL written so far and returns where it ends: the
// slot streams only what is flushed, and a change committed
// asynchronously may not be yet.
func (s *Server) flushWAL(ctx context.Context) (pglogrepl.LSN, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var set, xid, text string
	if err := tx.QueryRow(ctx, s.sql.of(qWALFlushAll)).Scan(&set, &xid, &text); err != nil {
		return 0, fmt.Errorf("reading where the WAL ends: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(text)
}

// closeConn closes a replication connection, giving it 5 s once ctx ended.
func closeConn(ctx context.Context, conn *pgconn.PgConn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = conn.Close(cctx)
}

// slotState reads whether the slot exists and whether a process reads it.
// A slot PostgreSQL invalidated — it held back more WAL than the host's
// max_slot_wal_keep_size allows, and the WAL it needed is gone — is
// dropped and reported missing: it is made again, and every row noted
// once more, as for a slot lost.
func (s *Server) slotState(ctx context.Context) (exists, active bool, err error) {
	var lost bool
	err = s.pool.QueryRow(ctx, s.sql.of(qSlotState), s.slot).Scan(&active, &lost)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("reading replication slot %s: %w", s.slot, err)
	case lost && !active:
		s.log.Warn("magicsync/server: the replication slot lost the WAL it needed (max_slot_wal_keep_size); making it again and planning every row", "slot", s.slot)
		if _, err := s.pool.Exec(ctx, s.sql.of(qDropSlot), s.slot); err != nil {
			return false, false, fmt.Errorf("dropping invalidated replication slot %s: %w", s.slot, err)
		}
		return false, false, nil
	}
	return true, active, nil
}

// replicationConn opens a replication connection to the pool's database.
func (s *Server) replicationConn(ctx context.Context) (*pgconn.PgConn, error) {
	cfg := s.pool.Config().ConnConfig.Config.Copy()
	params := make(map[string]string, len(cfg.RuntimeParams)+1)
	for k, v := range cfg.RuntimeParams {
		params[k] = v
	}
	params["replication"] = "database"
	cfg.RuntimeParams = params
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening a replication connection: %w", err)
	}
	return conn, nil
}

// seed notes every row of the declared tables, in one transaction with
// the record that it did, unless that record is there (makeSlot forgets
// it): the changes the slot streams begin where it was made, and the rows
// written before must be planned too.
func (s *Server) seed(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var seeded bool
	if err := tx.QueryRow(ctx, s.sql.of(qCaptureSeeded), s.slot).Scan(&seeded); err != nil {
		return fmt.Errorf("reading whether replication slot %s was seeded: %w", s.slot, err)
	}
	if seeded {
		return nil
	}
	start := time.Now()
	for _, ts := range s.m.triggerSets() {
		if _, err := tx.Exec(ctx, ts.seedSQL()); err != nil {
			return fmt.Errorf("noting the rows of %s: %w", ts.qname(), err)
		}
	}
	if _, err := tx.Exec(ctx, s.sql.of(qCaptureRecord), s.slot); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	s.log.Info("magicsync/server: noted every row of the declared tables for the new replication slot", "slot", s.slot, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// slotRelation is what the reader knows of a published table: its
// columns, by position in the tuples pgoutput sends, and what the engine
// notes of it (nil for a table the engine does not read).
type slotRelation struct {
	ts      *triggerSet
	columns []string
}

// slotNotes are the rows of one table waiting to be noted: a JSON array of
// objects of their columns' text.
type slotNotes struct {
	rows []byte
	n    int
}

// slotReader reads one stream of the slot. Only its goroutine uses it.
type slotReader struct {
	s    *Server
	conn *pgconn.PgConn
	kick chan<- struct{}
	rels map[uint32]*slotRelation

	pending   map[*triggerSet]*slotNotes
	truncated []*triggerSet // tables truncated, their known rows to note
	held      int           // rows pending
	flushDue  time.Time     // when the pending notes of committed transactions are written; zero when none
	flushed   time.Time     // when notes were last written

	inTx      bool
	xid       uint32        // the transaction streaming
	xidNoted  bool          // whether xids holds it
	xids      []uint32      // the transactions whose changes are pending
	committed pglogrepl.LSN // the end of the last transaction whose changes are read
	written   pglogrepl.LSN // the position whose changes are all noted (confirmed)
	statusDue time.Time

	// until, when not zero, ends run once every change up to it is
	// noted: a reader catching up (the tests' passes), not Run's.
	until pglogrepl.LSN
}

// run receives the stream until it fails or ctx ends.
func (r *slotReader) run(ctx context.Context) error {
	r.statusDue = time.Now().Add(r.statusEvery())
	for {
		deadline := r.statusDue
		if !r.flushDue.IsZero() && r.flushDue.Before(deadline) {
			deadline = r.flushDue
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		msg, err := r.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil && (ctx.Err() != nil || !pgconn.Timeout(err)) {
			return err
		}
		if err == nil {
			if err := r.receive(ctx, msg); err != nil {
				return err
			}
		}
		if !r.flushDue.IsZero() && !time.Now().Before(r.flushDue) {
			if err := r.flush(ctx); err != nil {
				return err
			}
		}
		if !time.Now().Before(r.statusDue) {
			if err := r.status(ctx); err != nil {
				return err
			}
		}
		if r.until != 0 && r.written >= r.until {
			return nil
		}
	}
}

// receive handles one message of the stream.
func (r *slotReader) receive(ctx context.Context, msg pgproto3.BackendMessage) error {
	switch m := msg.(type) {
	case *pgproto3.ErrorResponse:
		return pgconn.ErrorResponseToPgError(m)
	case *pgproto3.CopyData:
		if len(m.Data) == 0 {
			return nil
		}
		switch m.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
			if err != nil {
				return err
			}
			// Everything up to the server's end was sent: with nothing
			// pending, the slot may move past the WAL of tables the engine
			// does not read, which it would otherwise keep.
			// Saying so at once lets a process waiting for the slot to
			// confirm a position (catchUp) go on, and PostgreSQL recycle
			// that WAL; PostgreSQL sends such a keepalive only as it
			// falls idle.
			if !r.inTx && r.held == 0 && len(r.truncated) == 0 && k.ServerWALEnd > r.written {
				r.written = k.ServerWALEnd
				r.statusDue = time.Time{}
			}
			if k.ReplyRequested {
				r.statusDue = time.Time{}
			}
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(m.Data[1:])
			if err != nil {
				return err
			}
			return r.change(ctx, x.WALData)
		}
	}
	return nil
}

// change handles one logical replication message.
func (r *slotReader) change(ctx context.Context, data []byte) error {
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return fmt.Errorf("decoding a change of the replication stream: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		r.rels[m.RelationID] = r.relation(m)
	case *pglogrepl.BeginMessage:
		r.inTx, r.xid, r.xidNoted = true, m.Xid, false
	case *pglogrepl.InsertMessage:
		r.note(m.RelationID, m.Tuple, nil)
	case *pglogrepl.UpdateMessage:
		r.note(m.RelationID, m.OldTuple, nil)
		r.note(m.RelationID, m.NewTuple, m.OldTuple)
	case *pglogrepl.DeleteMessage:
		r.note(m.RelationID, m.OldTuple, nil)
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			if rel := r.rels[id]; rel != nil && rel.ts != nil {
				r.truncated = append(r.truncated, rel.ts)
				r.pendingXid()
			}
		}
	case *pglogrepl.CommitMessage:
		r.inTx = false
		r.committed = m.TransactionEndLSN
		if r.held == 0 && len(r.truncated) == 0 {
			r.written = r.committed
		} else if r.flushDue.IsZero() {
			// Under Options.Linger, the notes wait out the rest of it
			// since the last were written, as the planner does.
			r.flushDue = later(time.Now().Add(slotFlushAfter), r.flushed.Add(r.s.opts.Linger))
		}
	}
	if r.held >= slotNoteBatch {
		return r.flush(ctx)
	}
	return nil
}

// relation maps a published table to what the engine notes of it.
func (r *slotReader) relation(m *pglogrepl.RelationMessage) *slotRelation {
	rel := &slotRelation{columns: make([]string, len(m.Columns))}
	for i, c := range m.Columns {
		rel.columns[i] = c.Name
	}
	for _, ts := range r.s.m.triggerSets() {
		if ts.schema == m.Namespace && ts.table == m.RelationName {
			rel.ts = ts
		}
	}
	return rel
}

// note adds a row of a change to the pending notes: tuple's columns as
// text, an unchanged TOASTed value taken from old when it has it (a value
// stored out of line and not changed is not sent again).
func (r *slotReader) note(relation uint32, tuple, old *pglogrepl.TupleData) {
	rel := r.rels[relation]
	if tuple == nil || rel == nil || rel.ts == nil {
		return
	}
	r.pendingXid()
	p := r.pending[rel.ts]
	if p == nil {
		p = &slotNotes{rows: []byte{'['}}
		r.pending[rel.ts] = p
	}
	if p.n > 0 {
		p.rows = append(p.rows, ',')
	}
	p.rows = append(p.rows, '{')
	first := true
	for i, c := range tuple.Columns {
		if i >= len(rel.columns) {
			break
		}
		data, ok := c.Data, c.DataType == pglogrepl.TupleDataTypeText
		if c.DataType == pglogrepl.TupleDataTypeToast && old != nil && i < len(old.Columns) && old.Columns[i].DataType == pglogrepl.TupleDataTypeText {
			data, ok = old.Columns[i].Data, true
		}
		if !ok {
			continue // NULL, or a TOASTed value unknown: the column is left NULL
		}
		if !first {
			p.rows = append(p.rows, ',')
		}
		first = false
		p.rows = appendJSONString(p.rows, rel.columns[i])
		p.rows = append(p.rows, ':')
		p.rows = appendJSONString(p.rows, string(data))
	}
	p.rows = append(p.rows, '}')
	p.n++
	r.held++
}

// pendingXid records that the transaction streaming has changes pending.
func (r *slotReader) pendingXid() {
	if !r.xidNoted {
		r.xids, r.xidNoted = append(r.xids, r.xid), true
	}
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// flush writes the pending notes in one transaction, confirms the
// position of the transactions they complete and kicks the planner.
func (r *slotReader) flush(ctx context.Context) error {
	if r.held == 0 && len(r.truncated) == 0 {
		r.flushDue = time.Time{}
		return nil
	}
	if err := r.s.awaitVisible(ctx, r.xids); err != nil {
		return err
	}
	tx, err := r.s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var top int64
	for ts, p := range r.pending {
		var id int64
		if err := tx.QueryRow(ctx, ts.noteRowsSQL(), string(append(p.rows, ']'))).Scan(&id); err != nil {
			return fmt.Errorf("noting the changes of %s: %w", ts.qname(), err)
		}
		top = max(top, id)
	}
	for _, ts := range r.truncated {
		if err := r.s.noteKnown(ctx, tx, ts); err != nil {
			return err
		}
	}
	// Before the commit, so that the watch never sees these notes before
	// it knows the planner is kicked for them; notes that fail to commit
	// are gone, and their ids with them.
	r.s.plan.noteKicked(top)
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if h := r.s.hooks.slotFlushed; h != nil {
		h(r.inTx)
	}
	clear(r.pending)
	r.truncated, r.held, r.flushDue, r.flushed = r.truncated[:0], 0, time.Time{}, time.Now()
	r.xids, r.xidNoted = r.xids[:0], false
	// Every transaction that ended so far is noted now; one still
	// streaming is confirmed at its own commit.
	r.written = max(r.written, r.committed)
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return r.status(ctx)
}

// statusEvery is how often the reader tells PostgreSQL where it stands:
// often while catching up, each word drawing a keepalive that says how
// far the stream went.
func (r *slotReader) statusEvery() time.Duration {
	if r.until != 0 {
		return 20 * time.Millisecond
	}
	return slotStatusEvery
}

// awaitVisible returns once none of the transactions xids shows running
// to a new snapshot. PostgreSQL sends a transaction's changes once its
// commit is in the WAL, a moment before the other sessions see it
// committed (longer where the commit waits for a synchronous standby): a
// pass that read its rows in that moment would find them as they were
// before, and plan nothing, the notes spent. Once the notes commit after
// this, every pass that reads them sees the rows they name.
func (s *Server) awaitVisible(ctx context.Context, xids []uint32) error {
	wait := 100 * time.Microsecond
	for len(xids) > 0 {
		var snap string
		if err := s.pool.QueryRow(ctx, s.sql.of(qSnapshot)).Scan(&snap); err != nil {
			return fmt.Errorf("reading which transactions run: %w", err)
		}
		if !anyRunning(snap, xids) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Millisecond)
	}
	return nil
}

// anyRunning reports whether a snapshot (pg_snapshot's text,
// xmin:xmax:xip1,xip2,…) sees any of xids running: at or above xmax (a
// transaction that ended after the last one the snapshot saw end), or
// listed. pgoutput sends the low 32 bits of a transaction's id; they are
// widened to the snapshot's 64 bits by the epoch that puts them nearest
// below xmax + 2³¹, as PostgreSQL widens them.
func anyRunning(snap string, xids []uint32) bool {
	parts := strings.SplitN(snap, ":", 3)
	if len(parts) < 3 {
		return false
	}
	xmax, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return false
	}
	listed := map[uint64]bool{}
	for field := range strings.SplitSeq(parts[2], ",") {
		if id, err := strconv.ParseUint(field, 10, 64); err == nil {
			listed[id] = true
		}
	}
	for _, xid := range xids {
		full := xmax&^0xffffffff | uint64(xid)
		if full > xmax+1<<31 && full >= 1<<32 {
			full -= 1 << 32
		} else if full+1<<31 < xmax {
			full += 1 << 32
		}
		if full >= xmax || listed[full] {
			return true
		}
	}
	return false
}

// status tells PostgreSQL the position whose changes are all noted.
func (r *slotReader) status(ctx context.Context) error {
	r.statusDue = time.Now().Add(r.statusEvery())
	return pglogrepl.SendStandbyStatusUpdate(ctx, r.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: r.written, WALFlushPosition: r.written, WALApplyPosition: r.written,
	})
}

// noteKnown notes, after a TRUNCATE of the table of ts, every key its
// notes may name that the engine holds: the rows gone are then planned as
// deletes, as a TRUNCATE's trigger would have noted them before they went.
func (s *Server) noteKnown(ctx context.Context, tx pgx.Tx, ts *triggerSet) error {
	for _, n := range ts.notes {
		var target *triggerSet
		var rows []byte
		var err error
		switch n.label {
		case touchedReplicas, touchedMembers:
			target = &triggerSet{schema: s.m.replicas.schema, table: s.m.replicas.table, engine: s.m.engine,
				notes: []note{{label: n.label, cols: []string{s.m.replicas.column}, as: []string{"r"}}}}
			rows, err = s.knownReplicaRows(ctx, tx, s.m.replicas.column)
		default:
			t := s.m.byName[n.label]
			if t == nil {
				continue
			}
			key := t.tc.ColumnNames(t.tc.KeyIndex)
			target = &triggerSet{schema: t.tc.Schema, table: t.tc.Name, engine: s.m.engine,
				notes: []note{{label: n.label, cols: key, as: key}}}
			rows, err = s.knownKeyRows(ctx, tx, t, key)
		}
		if err != nil {
			return err
		}
		var top int64
		if err := tx.QueryRow(ctx, target.noteRowsSQL(), string(rows)).Scan(&top); err != nil {
			return fmt.Errorf("noting the rows a TRUNCATE of %s removed: %w", ts.qname(), err)
		}
	}
	return nil
}

// knownKeyRows are the keys of catalog t the engine holds, as a JSON array
// of objects of the key columns' text.
func (s *Server) knownKeyRows(ctx context.Context, tx pgx.Tx, t *table, key []string) ([]byte, error) {
	rows, err := tx.Query(ctx, s.sql.of(qKnownKeys), t.name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []byte{'['}
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		vals, err := codec.Key(k).Values()
		if err != nil || len(vals) != len(key) {
			return nil, fmt.Errorf("a key of %s held by the engine does not decode: %v", t.name, err)
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, '{')
		for i, v := range vals {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendJSONString(out, key[i])
			out = append(out, ':')
			out = appendJSONString(out, valueText(v))
		}
		out = append(out, '}')
	}
	return append(out, ']'), rows.Err()
}

// knownReplicaRows are the replicas the engine knows, as a JSON array of
// objects of the replicas table's id column.
func (s *Server) knownReplicaRows(ctx context.Context, tx pgx.Tx, column string) ([]byte, error) {
	rows, err := tx.Query(ctx, s.sql.of(qKnownReplicas))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []byte{'['}
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, '{')
		out = appendJSONString(out, column)
		out = append(out, ':')
		out = appendJSONString(out, id.String())
		out = append(out, '}')
	}
	return append(out, ']'), rows.Err()
}

// valueText is a key's value as PostgreSQL's text input reads it back.
func valueText(v codec.Value) string {
	switch v.Kind {
	case wire.Int:
		return strconv.FormatInt(v.I, 10)
	case wire.Bool:
		return strconv.FormatBool(v.I != 0)
	case wire.Float:
		return strconv.FormatFloat(v.F, 'g', -1, 64)
	case wire.Bytes:
		return `\x` + hex.EncodeToString(v.B)
	case wire.UUID:
		return uuid.UUID(v.U).String()
	case wire.Time:
		return time.UnixMicro(v.I).UTC().Format("2006-01-02 15:04:05.999999Z07:00")
	}
	return v.S
}
