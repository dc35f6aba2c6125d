package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Run sends up what the replica has to say — the rows written since, the
// rows it could not take, the last message applied, its fingerprints —
// one goroutine per lane, until ctx ends. It then waits for the sends in
// flight to finish, giving up on one still running after SendTimeout
// (whether or not its uplink honours its context), and returns nil. It
// never waits for a call given up on before: such a call is the lane's,
// and the lane's next Run waits for it before it sends.
func (r *Replica) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, l := range r.lanes {
		wg.Go(func() { r.runLane(ctx, l) })
	}
	wg.Wait()
	return nil
}

// runLane is one lane's loop: send while there is something to send, wait
// for a nudge or the idle timer when there is not, and back off alone after
// a failure.
func (r *Replica) runLane(ctx context.Context, l *lane) {
	defer r.stopLane(ctx, l)
	failures := 0
	for ctx.Err() == nil {
		more, err := r.sendOnce(ctx, l)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			failures = 0
			l.setProblem("", time.Time{})
			if more {
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-l.nudge:
			case <-r.clock.After(r.settings.Idle):
			}
			continue
		}
		failures++
		wait := r.backoff(failures)
		switch refusalOf(err) {
		case Unreachable:
			// Said once per outage; every retry after it is detail.
			level := slog.LevelDebug
			if failures == 1 {
				level = slog.LevelWarn
			}
			r.log.Log(ctx, level, "magicsync: send failed; retrying with backoff", "lane", l.name, "failures", failures, "wait", wait, "err", err)
		case TooLarge:
			// The message is gathered again, smaller, at once.
			r.log.Warn("magicsync: the server found the message too large; sending its rows in smaller messages", "lane", l.name, "rows", l.rowCap(r.settings.MaxRows), "err", err)
			continue
		case Misconfigured:
			// Loud at every try: nothing goes up until someone mends it.
			l.setProblem(err.Error(), r.clock.Now())
			r.log.Warn("magicsync: the server refuses this replica; its rows stay queued until the configuration is mended", "lane", l.name, "failures", failures, "wait", wait, "err", err)
		case OlderServer:
			wait = r.jitter(10 * r.settings.BackoffMax)
			l.setProblem(err.Error(), r.clock.Now())
			r.log.Warn("magicsync: the server speaks an older protocol; the rows stay queued until it is upgraded", "lane", l.name, "wait", wait, "err", err)
		default:
			// Refused for good: what the message carried is set aside, and
			// the lane backs off all the same. What is left to say — the
			// last message applied — goes again after the wait: a refusal
			// of every message must not become a loop.
			r.log.Error("magicsync: the server refused a message for good; its rows wait in the backlog", "lane", l.name, "failures", failures, "wait", wait, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(wait):
		}
	}
}

// refusalOf says why an uplink's error kept a message from the server; an
// unmarked error counts as the server out of reach.
func refusalOf(err error) Refusal {
	var se *SendError
	if !errors.As(err, &se) {
		return Unreachable
	}
	if !se.Retryable {
		return Rejected
	}
	if se.Refusal == Rejected {
		return Unreachable
	}
	return se.Refusal
}

func isRetryable(err error) bool { return refusalOf(err) != Rejected }

// backoff is the jittered exponential wait after the n-th failure in a row.
func (r *Replica) backoff(n int) time.Duration {
	d := r.settings.BackoffMin
	for i := 1; i < n && d < r.settings.BackoffMax; i++ {
		d *= 2
	}
	return r.jitter(min(d, r.settings.BackoffMax))
}

// outgoing is one upward message and what it carries.
type outgoing struct {
	replica  uuid.UUID
	seq      uint64
	body     []byte
	rows     int
	setAside int
	applied  uint64
	digests  bool
	rejected int
	// tries counts the calls of the uplink the message was given to;
	// givenUp is set once one was given up on after SendTimeout.
	tries   int
	givenUp bool
}

// laneSend is what a lane's sending keeps from one turn to the next. Only
// the lane's own goroutine uses it.
//
// A message the uplink did not take may still reach the server: a call
// that failed or ran out of time may have delivered it, or may deliver
// it later. So the lane sends it again as it is — its sequence, its bytes,
// which the server takes for a repeat when it filed it already — until
// the uplink takes it or refuses it for good, and only then gathers its
// next message: a later message can never reach the server before an
// earlier one it might undo (a delete of a row written again since). What
// was written after the message was gathered waits for the next one.
type laneSend struct {
	// pending is the message gathered and recorded as sent that the
	// uplink has not taken yet; unsentSeq is its sequence (0: none), for
	// Status, which counts its rows as not sent.
	pending   *outgoing
	unsentSeq atomic.Uint64
	// abandoned, while not nil, delivers what the lane's call given up on
	// after SendTimeout returns at last; the lane starts no other call
	// before, so that at most one call per lane is ever left behind.
	abandoned <-chan error
	// waiting, set by tests, runs when the lane waits for a call given up
	// on.
	waiting func()
}

func (s *laneSend) setPending(out *outgoing) {
	s.pending = out
	var seq uint64
	if out != nil {
		seq = out.seq
	}
	s.unsentSeq.Store(seq)
}

// sendOnce sends the lane's message the uplink has not taken yet, or else
// gathers, records and sends the next one. more is true when the uplink
// took a message carrying rows, so there may be more to send at once.
func (r *Replica) sendOnce(ctx context.Context, l *lane) (more bool, err error) {
	s := &l.send
	if s.abandoned != nil {
		// A call given up on: nothing else goes until it returned. What it
		// returns is the outcome of the message; after a retryable failure
		// the message goes again now (the lane backed off when it gave
		// the call up).
		if s.waiting != nil {
			s.waiting()
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case lateErr := <-s.abandoned:
			s.abandoned = nil
			r.log.Info("magicsync: a send given up on returned at last", "lane", l.name, "seq", s.pending.seq, "err", lateErr)
			if lateErr == nil || !isRetryable(lateErr) || ctx.Err() != nil {
				return r.outcome(ctx, l, lateErr)
			}
		}
	}
	if s.pending == nil {
		id, known, err := r.whoAmI(ctx)
		if err != nil || !known {
			return false, err
		}
		out, err := r.gather(ctx, l, id)
		if err != nil || out == nil {
			return false, err
		}
		if out.body == nil {
			// Rows were set aside and nothing else was due: look again.
			return true, nil
		}
		out.replica = id
		s.setPending(out)
	}
	sendErr := r.send(ctx, l, s.pending)
	if errors.Is(sendErr, context.DeadlineExceeded) {
		sendErr = TransportError(true, fmt.Errorf("no answer within %v: %w", r.settings.SendTimeout, sendErr))
	}
	return r.outcome(ctx, l, sendErr)
}

// outcome settles what a call of the lane's pending message came to: taken,
// refused for good (its record undone, what it carried set aside), or a
// retryable failure, after which it is kept, to go again as it is.
func (r *Replica) outcome(ctx context.Context, l *lane, sendErr error) (more bool, err error) {
	s := &l.send
	out := s.pending
	switch {
	case sendErr == nil:
		s.setPending(nil)
		if l.rows > 0 {
			// Grown back slowly: the server's limit rarely moves, and
			// every message found too large costs a round trip.
			if l.taken++; l.taken >= 8 {
				l.taken = 0
				if l.rows *= 2; l.rows >= r.settings.MaxRows {
					l.rows = 0
				}
			}
		}
		return r.sent(context.WithoutCancel(ctx), l, out)
	case refusalOf(sendErr) == TooLarge && out.rows+out.rejected > 1:
		// Gathered again, in messages of half as many rows: the server
		// never filed one it found too large.
		s.setPending(nil)
		l.rows, l.taken = max(1, min(l.rowCap(r.settings.MaxRows), out.rows+out.rejected)/2), 0
		if err := r.unsent(context.WithoutCancel(ctx), l, out, sendErr); err != nil {
			return false, errors.Join(sendErr, err)
		}
		return false, sendErr
	case refusalOf(sendErr) == TooLarge:
		// One row, or none, and still too large: the server's judgement of
		// the row itself, which waits in the backlog.
		s.setPending(nil)
		refused := Refuse(Rejected, fmt.Errorf("a row larger than the server accepts in one message: %w", sendErr))
		if err := r.unsent(context.WithoutCancel(ctx), l, out, refused); err != nil {
			return false, errors.Join(sendErr, err)
		}
		return false, refused
	case !isRetryable(sendErr):
		s.setPending(nil)
		if err := r.unsent(context.WithoutCancel(ctx), l, out, sendErr); err != nil {
			return false, errors.Join(sendErr, err)
		}
		return false, sendErr
	case ctx.Err() != nil:
		if err := r.stopLane(ctx, l); err != nil {
			return false, errors.Join(sendErr, err)
		}
	}
	return false, sendErr
}

// stopLane lets go of the lane's pending message when the lane stops: its
// record is undone, so that its rows go at once when the lane starts
// again, in a message gathered anew — unless a call given up on may still
// deliver it, and then it is kept (its rows wait as unconfirmed, until
// ResendAfter for another Replica over the database; the lane's next Run
// waits for the call, and sends the message again if need be).
func (r *Replica) stopLane(ctx context.Context, l *lane) error {
	s := &l.send
	if s.pending == nil || s.abandoned != nil {
		return nil
	}
	out := s.pending
	s.setPending(nil)
	err := r.unsent(context.WithoutCancel(ctx), l, out, TransportError(true, errors.New("the lane stopped")))
	if err != nil {
		r.log.Error("magicsync: a stopped lane could not undo the record of a message the uplink did not take; its rows go again after ResendAfter", "lane", l.name, "seq", out.seq, "err", err)
	}
	return err
}

// send hands one message to the uplink, under a context that ends after
// SendTimeout (but not with ctx: Run finishes the send in flight). It
// waits for the uplink that long, and a little more for one that returns
// once its context ended; then it gives up on an uplink that ignores its
// context: a retryable failure, and the call is kept as the lane's
// abandoned one, which the lane waits for before its next call.
func (r *Replica) send(ctx context.Context, l *lane, out *outgoing) error {
	out.tries++
	sendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.settings.SendTimeout)
	done := make(chan error, 1)
	go func() {
		defer cancel()
		done <- r.uplink.Send(sendCtx, out.replica, l.name, out.body)
	}()
	select {
	case err := <-done:
		return err
	case <-sendCtx.Done():
	}
	grace := time.NewTimer(min(r.settings.SendTimeout/10, time.Second))
	defer grace.Stop()
	select {
	case err := <-done:
		return err
	case <-grace.C:
	}
	out.givenUp = true
	l.send.abandoned = done
	r.log.Warn("magicsync: the uplink ignored its context and had not returned after SendTimeout; the lane sends nothing until it returns, then the same message again unless it was taken (an Uplink must return once its context ends)",
		"lane", l.name, "seq", out.seq, "timeout", r.settings.SendTimeout)
	return TransportError(true, sendCtx.Err())
}

// pendingRow is a noted write due to go up.
type pendingRow struct {
	tbl    string
	key    string
	change int64
	// unreadable is true when the row was set aside before, the engine
	// unable to read it, and has been written again or deleted since.
	unreadable bool
}

// gather builds the lane's next message and records it as sent in flight,
// or returns nil when the lane has nothing to say.
func (r *Replica) gather(ctx context.Context, l *lane, id uuid.UUID) (*outgoing, error) {
	now := r.clock.Now()
	// Most turns find nothing: they read, and leave the write lock to the
	// host.
	if say, err := r.anythingToSay(ctx, l, now); err != nil || !say {
		return nil, err
	}
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return nil, err
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	stale := now.Add(-r.settings.ResendAfter).UnixMicro()
	due, resent, err := r.dueRows(ctx, conn, l, stale)
	if err != nil {
		return nil, err
	}
	up := &syncpb.Up{Resent: resent, Build: r.build}
	read, err := r.readRows(ctx, conn, due)
	if err != nil {
		return nil, err
	}
	if err := r.setAside(ctx, conn, read, now); err != nil {
		return nil, err
	}
	due = read.sent
	up.Tables = read.tables
	out := &outgoing{rows: len(due), setAside: len(read.unreadable) + len(read.dropped)}
	say := len(due) > 0
	if l.name == "main" {
		var last, reported, digestsAt int64
		if err := conn.QueryRowContext(ctx, "SELECT last_applied, reported_applied, digests_at FROM sync_replica").Scan(&last, &reported, &digestsAt); err != nil {
			return nil, err
		}
		up.LastApplied = uint64(last)
		out.applied = uint64(last)
		if last > reported {
			say = true
		}
		rejected, cleared, err := r.unreported(ctx, conn, stale, l.rowCap(r.settings.MaxRows))
		if err != nil {
			return nil, err
		}
		up.Rejected, up.Cleared, out.rejected = rejected, cleared, len(rejected)+len(cleared)
		say = say || out.rejected > 0
		if r.digestsDue(now, digestsAt) {
			if up.Digests, err = r.digests(ctx, conn, uint64(last)); err != nil {
				return nil, err
			}
			out.digests = true
			say = true
		}
	}
	if !say {
		if out.setAside > 0 {
			// Nothing to send, but rows were set aside: that is news for
			// the record, and the lane looks again at once.
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
				return nil, err
			}
			committed = true
			return &outgoing{setAside: out.setAside}, nil
		}
		return nil, nil
	}
	var seq uint64
	if err := conn.QueryRowContext(ctx, "INSERT INTO sync_lanes (lane, next_seq) VALUES (?, 2) ON CONFLICT (lane) DO UPDATE SET next_seq = next_seq + 1 RETURNING next_seq - 1", l.name).Scan(&seq); err != nil {
		return nil, err
	}
	out.seq = seq
	if err := markSent(ctx, conn, l.name, seq, now.UnixMicro(), due); err != nil {
		return nil, err
	}
	if out.rejected > 0 {
		// The same rows unreported read, in the same transaction.
		if _, err := conn.ExecContext(ctx, "UPDATE sync_rejected SET reported_seq = ?, reported_at = ? WHERE id IN (SELECT id FROM sync_rejected WHERE "+rejectedDue+" ORDER BY id LIMIT ?)",
			seq, now.UnixMicro(), stale, l.rowCap(r.settings.MaxRows)); err != nil {
			return nil, err
		}
	}
	// Counted once the message's rows are recorded as sent.
	if err := r.counts(ctx, conn, l, up); err != nil {
		return nil, err
	}
	body, err := wire.EncodeToServer(&syncpb.ToServer{Replica: id[:], Lane: l.name, Sequence: seq, Up: up})
	if err != nil {
		return nil, fmt.Errorf("magicsync: encoding lane %q's message: %w", l.name, err)
	}
	out.body = body
	// The commit is not cut short by ctx: a driver may report a context
	// that ended while the COMMIT ran as its error though the commit went
	// through (modernc.org/sqlite does), and the rows would then stay
	// recorded as sent in a message no uplink was given, unconfirmed until
	// ResendAfter. Once committed, sendOnce sends the message or undoes
	// its record.
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		return nil, err
	}
	committed = true
	return out, nil
}

// markSent records the due rows, grouped by table, as sent in message seq
// of lane: a statement per table and batch of keys, not one per row.
// gather holds the write lock since it read them, so each row's change is
// still the one it read.
func markSent(ctx context.Context, conn *sql.Conn, lane string, seq uint64, at int64, due []pendingRow) error {
	const per = 500
	for start := 0; start < len(due); {
		end := start
		for end < len(due) && due[end].tbl == due[start].tbl && end-start < per {
			end++
		}
		args := make([]any, 0, 4+end-start)
		args = append(args, lane, seq, at, due[start].tbl)
		for _, p := range due[start:end] {
			args = append(args, p.key)
		}
		if _, err := conn.ExecContext(ctx, "UPDATE sync_pending SET sent_lane = ?, sent_seq = ?, sent_change = change, sent_at = ? WHERE tbl = ? AND key IN ("+placeholders(end-start)+")", args...); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// pendingDue is the condition of a noted row due to go up, given the time
// before which an unconfirmed send is sent again.
const pendingDue = "held IS NULL AND (unreadable IS NULL OR change <> unreadable) AND (sent_seq IS NULL OR change <> sent_change OR sent_at < ?)"

// rejectedDue is the condition of a row this replica could not take that
// is due to be reported, given the time before which an unconfirmed report
// is sent again: like a row, a report is forgotten only once the server
// confirms it.
const rejectedDue = "filed = 0 AND held IS NULL AND (reported_seq IS NULL OR reported_at < ?)"

// anythingToSay reads, without taking the write lock, whether the lane has
// something to send. gather takes the lock only then: a lock taken on
// every idle turn of every lane would make the host's own writes wait, or
// fail as "database is locked" without a busy timeout.
func (r *Replica) anythingToSay(ctx context.Context, l *lane, now time.Time) (bool, error) {
	stale := now.Add(-r.settings.ResendAfter).UnixMicro()
	var args []any
	pending := "0"
	if len(l.tables) > 0 {
		pending = "EXISTS (SELECT 1 FROM sync_pending WHERE tbl IN (" + placeholders(len(l.tables)) + ") AND " + pendingDue + ")"
		for _, t := range l.tables {
			args = append(args, t)
		}
		args = append(args, stale)
	}
	if l.name != "main" {
		var say bool
		err := r.db.QueryRowContext(ctx, "SELECT "+pending, args...).Scan(&say)
		return say, err
	}
	var say bool
	var digestsAt int64
	err := r.db.QueryRowContext(ctx, "SELECT "+pending+" OR last_applied > reported_applied OR EXISTS (SELECT 1 FROM sync_rejected WHERE "+rejectedDue+"), digests_at FROM sync_replica",
		append(args, stale)...).Scan(&say, &digestsAt)
	if err != nil {
		return false, err
	}
	return say || r.digestsDue(now, digestsAt), nil
}

// digestsDue says whether the digests are due, last sent at digestsAt.
func (r *Replica) digestsDue(now time.Time, digestsAt int64) bool {
	return r.settings.DigestsEvery > 0 && now.Sub(time.UnixMicro(digestsAt)) >= r.settings.DigestsEvery
}

// dueRows lists the lane's rows to send: never sent, written again since
// they were sent, or sent too long ago without a confirmation. Rows sent
// again after a provisioning go in messages of their own.
func (r *Replica) dueRows(ctx context.Context, conn *sql.Conn, l *lane, stale int64) ([]pendingRow, bool, error) {
	if len(l.tables) == 0 {
		return nil, false, nil
	}
	in := placeholders(len(l.tables))
	for _, resent := range []int{1, 0} {
		args := make([]any, 0, len(l.tables)+3)
		for _, t := range l.tables {
			args = append(args, t)
		}
		args = append(args, resent, stale, l.rowCap(r.settings.MaxRows))
		rows, err := conn.QueryContext(ctx, `SELECT tbl, key, change, unreadable IS NOT NULL FROM sync_pending
			WHERE tbl IN (`+in+`) AND resent = ? AND `+pendingDue+`
			ORDER BY tbl, key LIMIT ?`, args...)
		if err != nil {
			return nil, false, err
		}
		var due []pendingRow
		for rows.Next() {
			var p pendingRow
			if err := rows.Scan(&p.tbl, &p.key, &p.change, &p.unreadable); err != nil {
				rows.Close()
				return nil, false, err
			}
			due = append(due, p)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, false, err
		}
		if len(due) > 0 {
			return due, resent == 1, nil
		}
	}
	return nil, false, nil
}

// read is what gather read of the due rows: the tables' changes to send
// and the rows they carry, and what it set aside.
type read struct {
	tables []*syncpb.TableChanges
	// sent are the due rows the changes carry.
	sent []pendingRow
	// unreadable are own rows the engine cannot read, with why.
	unreadable []unreadableRow
	// dropped are deletes of rows whose key the engine cannot read: the
	// server never had such a row, so there is nothing to send.
	dropped []pendingRow
	// cleared are rows set aside before that are now sent or dropped.
	cleared []pendingRow
}

// unreadableRow is an own row whose values the engine cannot read: written
// behind its back (the sqlite3 CLI, another program) with a value its
// column's type cannot hold.
type unreadableRow struct {
	pendingRow
	// key is the row's canonical key, or, when the key itself does not
	// read, a tuple of its values as text, to name it.
	key    magicsync.Key
	reason string
}

// readRows reads the due rows as they are now: upserts of rows that exist,
// deletes of rows that do not; rows that do not read are set apart.
func (r *Replica) readRows(ctx context.Context, conn *sql.Conn, due []pendingRow) (*read, error) {
	out := &read{sent: make([]pendingRow, 0, len(due))}
	for start := 0; start < len(due); {
		end := start
		for end < len(due) && due[end].tbl == due[start].tbl {
			end++
		}
		tc, err := r.codecs.Table(due[start].tbl)
		if err != nil {
			return nil, err
		}
		if err := r.readTable(ctx, conn, tc, due[start:end], out); err != nil {
			return nil, fmt.Errorf("magicsync: reading %q to send: %w", tc.Name, err)
		}
		start = end
	}
	for _, p := range append(out.sent, out.dropped...) {
		if p.unreadable {
			out.cleared = append(out.cleared, p)
		}
	}
	return out, nil
}

// upColumns are the columns of an own table that go up: all but generated.
func upColumns(tc *magicsync.TableCodec) []int {
	var idx []int
	for i, c := range tc.Columns {
		if !c.Generated {
			idx = append(idx, i)
		}
	}
	return idx
}

// readTable reads the due rows of one table by their noted keys, in
// batches, and matches each row found with its note by its canonical key.
// Rows are never looked up by the rowid a note kept: a table rebuilt the
// way SQLite recommends (create, copy, drop, rename) numbers its rows
// anew, and a rowid could then name another row. A row whose key or
// values do not read is set apart, never sent: one such row must not
// block the lane.
func (r *Replica) readTable(ctx context.Context, conn *sql.Conn, tc *magicsync.TableCodec, due []pendingRow, out *read) error {
	cols := upColumns(tc)
	ch := &syncpb.TableChanges{Table: tc.Name, Columns: tc.ColumnNames(cols)}
	nk := len(tc.KeyIndex)
	keys := make([]magicsync.Key, len(due))
	var readable []int
	for i, p := range due {
		key, raw, err := parseNotedKey(tc, p.key)
		if err != nil {
			bad, err := r.badKey(ctx, conn, tc, p, raw, err)
			if err != nil {
				return err
			}
			if bad == nil {
				out.dropped = append(out.dropped, p)
			} else {
				out.unreadable = append(out.unreadable, *bad)
			}
			continue
		}
		keys[i] = key
		readable = append(readable, i)
	}
	found := map[magicsync.Key][]magicsync.Value{}
	failed := map[magicsync.Key]string{}
	keyCols := strings.Join(quoteAll(tc.ColumnNames(tc.KeyIndex)), ", ")
	row := "?"
	if nk > 1 {
		keyCols = "(" + keyCols + ")"
		row = "(" + placeholders(nk) + ")"
	}
	selectList := strings.Join(quoteAll(tc.ColumnNames(cols)), ", ")
	full := make([]magicsync.Value, len(tc.Columns))
	raw := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	// Well below SQLite's smallest limit of bound parameters (999).
	per := max(1, 900/nk)
	for start := 0; start < len(readable); start += per {
		part := readable[start:min(start+per, len(readable))]
		args := make([]any, 0, len(part)*nk)
		for _, i := range part {
			vals, err := parseQuoted(due[i].key)
			if err != nil {
				return fmt.Errorf("the noted key %s: %w", due[i].key, err)
			}
			args = append(args, vals...)
		}
		list := strings.TrimSuffix(strings.Repeat(row+", ", len(part)), ", ")
		if nk > 1 {
			list = "VALUES " + list
		}
		rows, err := conn.QueryContext(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE %s IN (%s)",
			selectList, magicsync.QuoteIdent(tc.Name), keyCols, list), args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return err
			}
			vals := make([]magicsync.Value, len(cols))
			bad := ""
			for i, c := range cols {
				v, err := tc.Columns[c].Canonical(raw[i])
				if err != nil && bad == "" {
					bad = unreadableValue(tc, c, raw[i])
				}
				vals[i], full[c] = v, v
			}
			if bad != "" {
				// The key read (else parseNotedKey refused it), so it names
				// the row.
				key, err := keyOfRaw(tc, cols, raw)
				if err != nil {
					continue
				}
				failed[key] = bad
				continue
			}
			found[tc.KeyOfRow(full)] = vals
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	for _, i := range readable {
		p, key := due[i], keys[i]
		if why, bad := failed[key]; bad {
			out.unreadable = append(out.unreadable, unreadableRow{pendingRow: p, key: key, reason: why})
			continue
		}
		out.sent = append(out.sent, p)
		vals := found[key]
		if vals == nil {
			ch.Deletes = append(ch.Deletes, []byte(key))
			continue
		}
		ch.Upserts = append(ch.Upserts, tc.EncodeRow(nil, vals, nil))
		ch.UpsertKeys = append(ch.UpsertKeys, []byte(key))
	}
	if len(ch.Upserts)+len(ch.Deletes) > 0 {
		out.tables = append(out.tables, ch)
	}
	return nil
}

// keyOfRaw is the canonical key of a row read as raw values of cols.
func keyOfRaw(tc *magicsync.TableCodec, cols []int, raw []any) (magicsync.Key, error) {
	vals := make([]magicsync.Value, len(tc.KeyIndex))
	for i, k := range tc.KeyIndex {
		j := slices.Index(cols, k)
		if j < 0 {
			return "", fmt.Errorf("key column %q is not read", tc.Columns[k].Name)
		}
		v, err := tc.Columns[k].Canonical(raw[j])
		if err != nil {
			return "", err
		}
		vals[i] = v
	}
	return magicsync.KeyOfValues(vals...), nil
}

// badKey sets apart a noted row whose key does not read: it is unreadable
// while the row exists, and a delete with nothing to send once it is gone.
func (r *Replica) badKey(ctx context.Context, conn *sql.Conn, tc *magicsync.TableCodec, p pendingRow, raw []any, keyErr error) (*unreadableRow, error) {
	if raw == nil {
		// The note itself does not parse: no trigger of the engine writes
		// such a note.
		return nil, fmt.Errorf("the noted key %s: %w", p.key, keyErr)
	}
	var n int
	if err := conn.QueryRowContext(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE %s", magicsync.QuoteIdent(tc.Name), keyWhere(tc)), raw...).Scan(&n); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	named := make([]magicsync.Value, len(raw))
	reason := ""
	for i, v := range raw {
		named[i] = wire.TextValue(fmt.Sprint(v))
		if c := tc.Columns[tc.KeyIndex[i]]; reason == "" {
			if _, err := c.Canonical(v); err != nil {
				reason = unreadableValue(tc, tc.KeyIndex[i], v)
			}
		}
	}
	if reason == "" {
		reason = "its key does not read: " + keyErr.Error()
	}
	return &unreadableRow{pendingRow: p, key: magicsync.KeyOfValues(named...), reason: reason}, nil
}

// unreadableValue says why an own row's value at column c cannot be read.
func unreadableValue(tc *magicsync.TableCodec, c int, v any) string {
	col := tc.Columns[c]
	shown := fmt.Sprintf("%v", v)
	if b, ok := v.([]byte); ok {
		shown = fmt.Sprintf("%q", b)
	} else if s, ok := v.(string); ok {
		shown = fmt.Sprintf("%q", s)
	}
	if len(shown) > 64 {
		shown = shown[:61] + "..."
	}
	return fmt.Sprintf("the engine cannot read this row: column %q holds %s (%T), which is no %v for %s.%s; write the row again with a value of its type, or delete it",
		col.Name, shown, v, col.Kind, tc.Type, col.Field)
}

// parseNotedKey reads a key as the note triggers wrote it into its
// canonical form. raw holds the note's values when they parse, even if
// they are no values of the key's columns.
func parseNotedKey(tc *magicsync.TableCodec, text string) (magicsync.Key, []any, error) {
	raw, err := parseQuoted(text)
	if err != nil {
		return "", nil, err
	}
	if len(raw) != len(tc.KeyIndex) {
		return "", nil, fmt.Errorf("%d values for a key of %d columns", len(raw), len(tc.KeyIndex))
	}
	vals := make([]magicsync.Value, len(raw))
	for i, src := range raw {
		v, err := tc.Columns[tc.KeyIndex[i]].Canonical(src)
		if err != nil {
			return "", raw, err
		}
		vals[i] = v
	}
	return magicsync.KeyOfValues(vals...), raw, nil
}

// setAside records, in gather's transaction, the rows read set apart:
// unreadable ones wait, reported, until they are written again or
// deleted; deletes of rows whose key never read are forgotten; rows set
// aside before and now sent or forgotten have their report cleared, which
// goes up in turn.
func (r *Replica) setAside(ctx context.Context, conn *sql.Conn, rd *read, now time.Time) error {
	if len(rd.unreadable)+len(rd.dropped)+len(rd.cleared) == 0 {
		return nil
	}
	for _, p := range rd.cleared {
		if _, err := conn.ExecContext(ctx, "UPDATE sync_pending SET unreadable = NULL WHERE tbl = ? AND key = ?", p.tbl, p.key); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, "UPDATE sync_rejected SET cleared = 1, filed = 0, reported_seq = NULL, reported_at = NULL, held = NULL WHERE tbl = ? AND note = ? AND cleared = 0",
			p.tbl, p.key); err != nil {
			return err
		}
	}
	for _, p := range rd.dropped {
		if _, err := conn.ExecContext(ctx, "DELETE FROM sync_pending WHERE tbl = ? AND key = ? AND change = ?", p.tbl, p.key, p.change); err != nil {
			return err
		}
	}
	// A report names the last message applied when it was made: a
	// provisioning that ends after it has the row read again, and
	// reported again if it still does not read, so the server forgets
	// reports older than the provisioning.
	var last int64
	if len(rd.unreadable) > 0 {
		if err := conn.QueryRowContext(ctx, "SELECT last_applied FROM sync_replica").Scan(&last); err != nil {
			return err
		}
	}
	for _, u := range rd.unreadable {
		r.log.Warn("magicsync: an own row cannot be read; it is set aside until it is written again or deleted", "table", u.tbl, "key", u.key, "reason", u.reason)
		if _, err := conn.ExecContext(ctx, "UPDATE sync_pending SET unreadable = change, sent_lane = NULL, sent_seq = NULL, sent_change = NULL, sent_at = NULL WHERE tbl = ? AND key = ?",
			u.tbl, u.pendingRow.key); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, "DELETE FROM sync_rejected WHERE tbl = ? AND note = ?", u.tbl, u.pendingRow.key); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO sync_rejected (tbl, key, reason, message, at, note) VALUES (?, ?, ?, ?, ?, ?)",
			u.tbl, []byte(u.key), u.reason, last, now.UnixMicro(), u.pendingRow.key); err != nil {
			return err
		}
	}
	return nil
}

// unreported lists the rows this replica could not take that are due to be
// reported — never reported, or reported before stale and not confirmed —
// and the reports of own rows set aside that it cleared since.
func (r *Replica) unreported(ctx context.Context, conn *sql.Conn, stale int64, limit int) (rejected, cleared []*syncpb.Rejected, err error) {
	rows, err := conn.QueryContext(ctx, "SELECT tbl, key, reason, message, cleared FROM sync_rejected WHERE "+rejectedDue+" ORDER BY id LIMIT ?", stale, limit)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		rj := &syncpb.Rejected{}
		var wasCleared bool
		if err := rows.Scan(&rj.Table, &rj.Key, &rj.Reason, &rj.Message, &wasCleared); err != nil {
			return nil, nil, err
		}
		if wasCleared {
			rj.Reason = ""
			cleared = append(cleared, rj)
			continue
		}
		rejected = append(rejected, rj)
	}
	return rejected, cleared, rows.Err()
}

// downColumns are the columns of a catalog the server sends, and that
// digests cover: all but generated and replica_owned.
func downColumns(tc *magicsync.TableCodec) []int {
	var idx []int
	for i, c := range tc.Columns {
		if !c.Generated && !c.ReplicaOwned {
			idx = append(idx, i)
		}
	}
	return idx
}

// digests fingerprints every catalog the replica holds.
func (r *Replica) digests(ctx context.Context, conn *sql.Conn, asOf uint64) ([]*syncpb.Digest, error) {
	var out []*syncpb.Digest
	for _, tc := range r.catalogs {
		cols := downColumns(tc)
		rows, err := conn.QueryContext(ctx, fmt.Sprintf("SELECT %s FROM %s",
			strings.Join(quoteAll(tc.ColumnNames(cols)), ", "), magicsync.QuoteIdent(tc.Name)))
		if err != nil {
			return nil, err
		}
		var sum digest.Sum
		var vals []magicsync.Value
		var buf []byte
		for rows.Next() {
			vals, err = tc.ScanValues(rows, cols, vals)
			if err != nil {
				rows.Close()
				return nil, err
			}
			buf = tc.EncodeRow(buf[:0], vals, nil)
			sum.Add(buf)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out = append(out, &syncpb.Digest{Table: tc.Name, Sum: sum.Bytes(), Rows: sum.Rows(), AsOf: asOf})
	}
	return out, nil
}

// counts tells the server how many rows of each of the lane's tables wait
// to go up after this message, and how many wait in the backlog. It runs
// once the message's rows are recorded as sent: rows sent and not yet
// confirmed are not counted — they are on the server, or will be sent
// again and counted then — so the figure is exact, and is 0 when the
// message carries all there was to send: the server shows 0 from the last
// message on, with no message of its own once the rows are filed.
func (r *Replica) counts(ctx context.Context, conn *sql.Conn, l *lane, up *syncpb.Up) error {
	rows, err := conn.QueryContext(ctx, `SELECT tbl,
		count(*) FILTER (WHERE held IS NULL AND (unreadable IS NULL OR change <> unreadable) AND (sent_seq IS NULL OR change <> sent_change)),
		count(held)
		FROM sync_pending GROUP BY tbl`)
	if err != nil {
		return err
	}
	defer rows.Close()
	unsent := map[string]int{}
	for rows.Next() {
		var tbl string
		var n, held int
		if err := rows.Scan(&tbl, &n, &held); err != nil {
			return err
		}
		up.Backlog += uint64(held)
		unsent[tbl] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, tbl := range l.tables {
		up.Unsent = append(up.Unsent, &syncpb.Count{Table: tbl, Rows: uint64(unsent[tbl])})
	}
	return nil
}

// sent records that the uplink took a message.
func (r *Replica) sent(ctx context.Context, l *lane, out *outgoing) (bool, error) {
	now := r.clock.Now().UnixMicro()
	q := "UPDATE sync_replica SET reported_applied = max(reported_applied, ?)"
	args := []any{out.applied}
	if out.digests {
		q += ", digests_at = ?"
		args = append(args, now)
	}
	if out.tries == 1 && !out.givenUp {
		if _, err := r.db.ExecContext(ctx, q, args...); err != nil {
			return false, err
		}
	} else if err := r.sentLate(ctx, l, out, now, q, args); err != nil {
		return false, err
	}
	r.log.Debug("magicsync: sent", "lane", l.name, "seq", out.seq, "rows", out.rows, "rejected", out.rejected)
	return out.rows > 0, nil
}

// sentLate records that the uplink took a message at a later try, or late:
// what it carried counts as sent from now, so that ResendAfter does not
// send again rows whose confirmation could not come before.
func (r *Replica) sentLate(ctx context.Context, l *lane, out *outgoing, now int64, q string, args []any) (err error) {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return err
	}
	if out.rows > 0 {
		if _, err := tx.ExecContext(ctx, "UPDATE sync_pending SET sent_at = ? WHERE sent_lane = ? AND sent_seq = ?", now, l.name, out.seq); err != nil {
			return err
		}
	}
	if l.name == "main" && out.rejected > 0 {
		if _, err := tx.ExecContext(ctx, "UPDATE sync_rejected SET reported_at = ? WHERE reported_seq = ? AND filed = 0", now, out.seq); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// unsent undoes the record of a message the uplink did not take: what it
// carried is due again, or, when it was refused for good, set aside until a
// different build starts — its rows in the backlog, its reports of rows
// the replica could not take alike; its digests count as sent, and are
// due again after DigestsEvery.
func (r *Replica) unsent(ctx context.Context, l *lane, out *outgoing, sendErr error) (err error) {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	// Reports go in the main lane only, numbered by its sequence.
	main := l.name == "main"
	if !isRetryable(sendErr) {
		reason := "the server refused the message: " + sendErr.Error()
		if _, err := tx.ExecContext(ctx, "UPDATE sync_pending SET held = ?, held_reason = ? WHERE sent_lane = ? AND sent_seq = ? AND change = sent_change",
			r.build, reason, l.name, out.seq); err != nil {
			return err
		}
		if main && out.rejected > 0 {
			if _, err := tx.ExecContext(ctx, "UPDATE sync_rejected SET held = ? WHERE reported_seq = ? AND filed = 0", r.build, out.seq); err != nil {
				return err
			}
		}
		if main && out.digests {
			if _, err := tx.ExecContext(ctx, "UPDATE sync_replica SET digests_at = ?", r.clock.Now().UnixMicro()); err != nil {
				return err
			}
		}
	}
	if _, err := tx.ExecContext(ctx, "UPDATE sync_pending SET sent_lane = NULL, sent_seq = NULL, sent_change = NULL, sent_at = NULL WHERE sent_lane = ? AND sent_seq = ?",
		l.name, out.seq); err != nil {
		return err
	}
	if main {
		if _, err := tx.ExecContext(ctx, "UPDATE sync_rejected SET reported_seq = NULL, reported_at = NULL WHERE reported_seq = ? AND filed = 0", out.seq); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// parseQuoted reads values written by SQLite's quote(), separated by
// commas: NULL, integers, reals, 'text' and X'blob'.
func parseQuoted(s string) ([]any, error) {
	var out []any
	for {
		if s == "" {
			return nil, errors.New("an empty value")
		}
		var v any
		var rest string
		switch {
		case s[0] == '\'':
			var b strings.Builder
			i := 1
			for {
				j := strings.IndexByte(s[i:], '\'')
				if j < 0 {
					return nil, errors.New("an unterminated text")
				}
				b.WriteString(s[i : i+j])
				i += j + 1
				if i < len(s) && s[i] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				break
			}
			v, rest = b.String(), s[i:]
		case len(s) > 1 && (s[0] == 'X' || s[0] == 'x') && s[1] == '\'':
			end := strings.IndexByte(s[2:], '\'')
			if end < 0 {
				return nil, errors.New("an unterminated blob")
			}
			hex := s[2 : 2+end]
			if len(hex)%2 != 0 {
				return nil, fmt.Errorf("a blob of %d hex digits, not whole bytes", len(hex))
			}
			b := make([]byte, len(hex)/2)
			for i := range b {
				n, err := strconv.ParseUint(hex[2*i:2*i+2], 16, 8)
				if err != nil {
					return nil, fmt.Errorf("a blob: %w", err)
				}
				b[i] = byte(n)
			}
			v, rest = b, s[2+end+1:]
		default:
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			tok := s[:end]
			rest = s[end:]
			switch {
			case tok == "NULL":
				v = nil
			case strings.ContainsAny(tok, ".eE") || tok == "Inf" || tok == "-Inf":
				// quote() writes an infinity as 9.0e+999, which ParseFloat
				// reads as one while it reports the range.
				f, err := strconv.ParseFloat(tok, 64)
				if err != nil && !errors.Is(err, strconv.ErrRange) {
					return nil, fmt.Errorf("a real %q: %w", tok, err)
				}
				v = f
			default:
				i, err := strconv.ParseInt(tok, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("an integer %q: %w", tok, err)
				}
				v = i
			}
		}
		out = append(out, v)
		if rest == "" {
			return out, nil
		}
		if rest[0] != ',' {
			return nil, fmt.Errorf("%q after a value", rest)
		}
		s = rest[1:]
	}
}
