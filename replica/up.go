package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
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
		var wait time.Duration
		switch {
		case err == nil && more:
			failures = 0
			continue
		case err == nil:
			failures = 0
			select {
			case <-ctx.Done():
				return
			case <-l.nudge:
			case <-r.clock.After(r.settings.Idle):
			}
			continue
		case isRetryable(err):
			failures++
			wait = r.backoff(failures)
			// Said once per outage; every retry after it is detail.
			level := slog.LevelDebug
			if failures == 1 {
				level = slog.LevelWarn
			}
			r.log.Log(ctx, level, "magicsync: send failed; retrying with backoff", "lane", l.name, "failures", failures, "wait", wait, "err", err)
		default:
			// Refused for good: what the message carried is set aside, and
			// the lane backs off all the same. What is left to say — the
			// last message applied — goes again after the wait: a refusal
			// of every message (a revoked token) must not become a loop.
			failures++
			wait = r.backoff(failures)
			r.log.Error("magicsync: the server refused a message for good; its rows wait in the backlog", "lane", l.name, "failures", failures, "wait", wait, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(wait):
		}
	}
}

func isRetryable(err error) bool {
	var se *SendError
	if errors.As(err, &se) {
		return se.Retryable
	}
	return true
}

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
		return r.sent(context.WithoutCancel(ctx), l, out)
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
	tables, err := r.readRows(ctx, conn, due)
	if err != nil {
		return nil, err
	}
	up.Tables = tables
	out := &outgoing{rows: len(due)}
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
		rejected, err := r.unreported(ctx, conn, stale)
		if err != nil {
			return nil, err
		}
		up.Rejected, out.rejected = rejected, len(rejected)
		say = say || len(rejected) > 0
		if r.digestsDue(now, digestsAt) {
			if up.Digests, err = r.digests(ctx, conn, uint64(last)); err != nil {
				return nil, err
			}
			out.digests = true
			say = true
		}
	}
	if !say {
		return nil, nil
	}
	var seq uint64
	if err := conn.QueryRowContext(ctx, "INSERT INTO sync_lanes (lane, next_seq) VALUES (?, 2) ON CONFLICT (lane) DO UPDATE SET next_seq = next_seq + 1 RETURNING next_seq - 1", l.name).Scan(&seq); err != nil {
		return nil, err
	}
	out.seq = seq
	mark, err := conn.PrepareContext(ctx, "UPDATE sync_pending SET sent_lane = ?, sent_seq = ?, sent_change = ?, sent_at = ? WHERE tbl = ? AND key = ?")
	if err != nil {
		return nil, err
	}
	defer mark.Close()
	for _, p := range due {
		if _, err := mark.ExecContext(ctx, l.name, seq, p.change, now.UnixMicro(), p.tbl, p.key); err != nil {
			return nil, err
		}
	}
	if out.rejected > 0 {
		// The same rows unreported read, in the same transaction.
		if _, err := conn.ExecContext(ctx, "UPDATE sync_rejected SET reported_seq = ?, reported_at = ? WHERE id IN (SELECT id FROM sync_rejected WHERE "+rejectedDue+" ORDER BY id LIMIT ?)",
			seq, now.UnixMicro(), stale, r.settings.MaxRows); err != nil {
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

// pendingDue is the condition of a noted row due to go up, given the time
// before which an unconfirmed send is sent again.
const pendingDue = "held IS NULL AND (sent_seq IS NULL OR change <> sent_change OR sent_at < ?)"

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
		args = append(args, resent, stale, r.settings.MaxRows)
		rows, err := conn.QueryContext(ctx, `SELECT tbl, key, change FROM sync_pending
			WHERE tbl IN (`+in+`) AND resent = ? AND `+pendingDue+`
			ORDER BY tbl, key LIMIT ?`, args...)
		if err != nil {
			return nil, false, err
		}
		var due []pendingRow
		for rows.Next() {
			var p pendingRow
			if err := rows.Scan(&p.tbl, &p.key, &p.change); err != nil {
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

// readRows reads the due rows as they are now: upserts of rows that exist,
// deletes of rows that do not.
func (r *Replica) readRows(ctx context.Context, conn *sql.Conn, due []pendingRow) ([]*syncpb.TableChanges, error) {
	var out []*syncpb.TableChanges
	for start := 0; start < len(due); {
		end := start
		for end < len(due) && due[end].tbl == due[start].tbl {
			end++
		}
		tc, err := r.codecs.Table(due[start].tbl)
		if err != nil {
			return nil, err
		}
		ch, err := r.readTable(ctx, conn, tc, due[start:end])
		if err != nil {
			return nil, fmt.Errorf("magicsync: reading %q to send: %w", tc.Name, err)
		}
		out = append(out, ch)
		start = end
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
// anew, and a rowid could then name another row.
func (r *Replica) readTable(ctx context.Context, conn *sql.Conn, tc *magicsync.TableCodec, due []pendingRow) (*syncpb.TableChanges, error) {
	cols := upColumns(tc)
	ch := &syncpb.TableChanges{Table: tc.Name, Columns: tc.ColumnNames(cols)}
	found := map[magicsync.Key][]magicsync.Value{}
	nk := len(tc.KeyIndex)
	keyCols := strings.Join(quoteAll(tc.ColumnNames(tc.KeyIndex)), ", ")
	row := "?"
	if nk > 1 {
		keyCols = "(" + keyCols + ")"
		row = "(" + placeholders(nk) + ")"
	}
	selectList := strings.Join(quoteAll(tc.ColumnNames(cols)), ", ")
	full := make([]magicsync.Value, len(tc.Columns))
	// Well below SQLite's smallest limit of bound parameters (999).
	per := max(1, 900/nk)
	for start := 0; start < len(due); start += per {
		part := due[start:min(start+per, len(due))]
		args := make([]any, 0, len(part)*nk)
		for _, p := range part {
			vals, err := parseQuoted(p.key)
			if err != nil {
				return nil, fmt.Errorf("the noted key %s: %w", p.key, err)
			}
			if len(vals) != nk {
				return nil, fmt.Errorf("the noted key %s has %d values for a key of %d columns", p.key, len(vals), nk)
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
			return nil, err
		}
		for rows.Next() {
			vals, err := tc.ScanValues(rows, cols, nil)
			if err != nil {
				rows.Close()
				return nil, err
			}
			for i, c := range cols {
				full[c] = vals[i]
			}
			found[tc.KeyOfRow(full)] = vals
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	for _, p := range due {
		key, err := parseKeyText(tc, p.key)
		if err != nil {
			return nil, fmt.Errorf("the noted key %s: %w", p.key, err)
		}
		vals := found[key]
		if vals == nil {
			ch.Deletes = append(ch.Deletes, []byte(key))
			continue
		}
		ch.Upserts = append(ch.Upserts, tc.EncodeRow(nil, vals, nil))
		ch.UpsertKeys = append(ch.UpsertKeys, []byte(key))
	}
	return ch, nil
}

// unreported lists the rows this replica could not take that are due to be
// reported: never reported, or reported before stale and not confirmed.
func (r *Replica) unreported(ctx context.Context, conn *sql.Conn, stale int64) ([]*syncpb.Rejected, error) {
	rows, err := conn.QueryContext(ctx, "SELECT tbl, key, reason, message FROM sync_rejected WHERE "+rejectedDue+" ORDER BY id LIMIT ?", stale, r.settings.MaxRows)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*syncpb.Rejected
	for rows.Next() {
		rj := &syncpb.Rejected{}
		if err := rows.Scan(&rj.Table, &rj.Key, &rj.Reason, &rj.Message); err != nil {
			return nil, err
		}
		out = append(out, rj)
	}
	return out, rows.Err()
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
		count(*) FILTER (WHERE held IS NULL AND (sent_seq IS NULL OR change <> sent_change)),
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

// parseKeyText reads a key as the note triggers wrote it — SQLite quote()
// of each key column, joined by commas — into the canonical key.
func parseKeyText(tc *magicsync.TableCodec, text string) (magicsync.Key, error) {
	raw, err := parseQuoted(text)
	if err != nil {
		return "", err
	}
	if len(raw) != len(tc.KeyIndex) {
		return "", fmt.Errorf("%d values for a key of %d columns", len(raw), len(tc.KeyIndex))
	}
	vals := make([]magicsync.Value, len(raw))
	for i, src := range raw {
		v, err := tc.Columns[tc.KeyIndex[i]].Canonical(src)
		if err != nil {
			return "", err
		}
		vals[i] = v
	}
	return magicsync.KeyOfValues(vals...), nil
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
