// Gathering an Up, in one immediate transaction: whether a lane has anything
// to say, the rows due to go up (dueRows) read as they are now (readrows.go),
// own rows that do not read set aside, what the main lane reports beside its
// rows (reports.go) and its digests (digests.go), the message encoded and
// recorded as sent in flight (recordSent, markSent) before it leaves.

package replica

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

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
	var out *outgoing
	err := r.engineWrite(ctx, func(conn *sql.Conn) (bool, error) {
		var commit bool
		var err error
		out, commit, err = r.gatherTx(ctx, conn, l, id, now)
		return commit, err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// gatherTx is gather's transaction: it returns the message, or nil when
// the lane has nothing to say, and whether to commit — not when nothing
// changed.
func (r *Replica) gatherTx(ctx context.Context, conn *sql.Conn, l *lane, id uuid.UUID, now time.Time) (*outgoing, bool, error) {
	// The host's writes gathered now may have let go of the last row
	// pointing at a retired one: it goes without waiting for the server.
	swept, err := r.sweepAfterHost(ctx, conn)
	if err != nil {
		return nil, false, err
	}
	stale := now.Add(-r.settings.ResendAfter).UnixMicro()
	due, resent, err := r.dueRows(ctx, conn, l, stale)
	if err != nil {
		return nil, false, err
	}
	up := &syncpb.Up{Resent: resent, Build: r.build}
	read, err := r.readRows(ctx, conn, due)
	if err != nil {
		return nil, false, err
	}
	if err := r.setAside(ctx, conn, read, now); err != nil {
		return nil, false, err
	}
	due = read.sent
	up.Tables = read.tables
	out := &outgoing{rows: len(due), setAside: len(read.unreadable) + len(read.dropped)}
	say := len(due) > 0
	if l.name == "main" {
		news, err := r.gatherReports(ctx, conn, l, up, out, stale, now)
		if err != nil {
			return nil, false, err
		}
		say = say || news
	}
	if !say {
		if out.setAside > 0 || swept > 0 {
			// Nothing to send, but rows were set aside (news for the
			// record, and the lane looks again at once) or swept.
			if out.setAside > 0 {
				return &outgoing{setAside: out.setAside}, true, nil
			}
			return nil, true, nil
		}
		return nil, false, nil
	}
	seq, err := r.recordSent(ctx, conn, l, up, out, due, stale, now)
	if err != nil {
		return nil, false, err
	}
	body, err := wire.EncodeToServer(&syncpb.ToServer{Replica: id[:], Lane: l.name, Sequence: seq, Up: up})
	if err != nil {
		return nil, false, fmt.Errorf("magicsync/replica: encoding lane %q's message: %w", l.name, err)
	}
	out.body = body
	// The commit is not cut short by ctx (immediate): were it reported
	// failed though it went through, the rows would stay recorded as sent
	// in a message no uplink was given, unconfirmed until ResendAfter.
	// Once committed, sendOnce sends the message or undoes its record.
	return out, true, nil
}

// recordSent records the message gathered as sent in flight under the
// lane's next sequence, which it returns: its rows, its reports and its
// answers; and counts what is left to send.
func (r *Replica) recordSent(ctx context.Context, conn *sql.Conn, l *lane, up *syncpb.Up, out *outgoing, due []pendingRow, stale int64, now time.Time) (uint64, error) {
	var seq uint64
	if err := conn.QueryRowContext(ctx, nextLaneSeq, l.name).Scan(&seq); err != nil {
		return 0, err
	}
	out.seq = seq
	if err := markSent(ctx, conn, l.name, seq, now.UnixMicro(), due); err != nil {
		return 0, err
	}
	if out.rejected > 0 {
		// The same rows unreported read, in the same transaction.
		if _, err := conn.ExecContext(ctx, markReported,
			seq, now.UnixMicro(), stale, l.rowCap(r.settings.MaxRows)); err != nil {
			return 0, err
		}
	}
	if out.answers > 0 {
		// The same answers answersDue read, in the same transaction.
		if _, err := conn.ExecContext(ctx, markAnswersSent,
			seq, now.UnixMicro(), out.answersResent, stale, out.answers); err != nil {
			return 0, err
		}
	}
	if out.commandAnswers > 0 {
		// The same answers commandAnswersDue read, in the same transaction.
		if _, err := conn.ExecContext(ctx, markCommandAnswersSent,
			seq, now.UnixMicro(), stale, out.commandAnswers); err != nil {
			return 0, err
		}
	}
	// Counted once the message's rows are recorded as sent.
	if err := r.counts(ctx, conn, l, up); err != nil {
		return 0, err
	}
	return seq, nil
}

// sweepAfterHost sweeps the retained rows (see Replica.sweep) in gather's
// transaction, and returns how many it deleted or forgot. A replica
// without a catalog declaring Retired reads nothing; one keeping no
// retained row reads one empty table. A delete the database refuses
// leaves the row to the sweeps of the server's messages (r.unswept); one
// that undid the whole transaction fails gather, which tries again
// without that row.
func (r *Replica) sweepAfterHost(ctx context.Context, conn *sql.Conn) (int, error) {
	if len(r.retiring) == 0 {
		return 0, nil
	}
	marked := false
	n, err := r.sweep(ctx, conn, func(ctx context.Context, tc *codec.TableCodec, key []byte, args []any) (bool, error) {
		id := tc.Name + "\x00" + string(key)
		if _, skip := r.unswept.Load(id); skip {
			return false, nil
		}
		if !marked {
			if _, err := conn.ExecContext(ctx, markSweeping); err != nil {
				return false, err
			}
			marked = true
		}
		if _, err := conn.ExecContext(ctx, savepointRow); err != nil {
			return false, err
		}
		_, delErr := conn.ExecContext(ctx, deleteByKey(tc), args...)
		if delErr == nil {
			_, err := conn.ExecContext(ctx, releaseRow)
			return err == nil, err
		}
		r.unswept.Store(id, true)
		r.log.Warn("magicsync/replica: a retired row nothing points at stays: the database refused its delete",
			"table", tc.Name, "key", codec.Key(key), "reason", delErr)
		var applying int
		if err := conn.QueryRowContext(ctx, selectApplying).Scan(&applying); err != nil || applying != 1 {
			return false, fmt.Errorf("magicsync/replica: deleting a retired row of %q undid gather's transaction: %w", tc.Name, delErr)
		}
		if _, err := conn.ExecContext(ctx, rollbackToRow); err != nil {
			return false, err
		}
		_, err := conn.ExecContext(ctx, releaseRow)
		return false, err
	})
	if err != nil {
		return 0, fmt.Errorf("magicsync/replica: sweeping the retired rows: %w", err)
	}
	if marked {
		if _, err := conn.ExecContext(ctx, unmarkSweeping); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// anythingToSay reads, without taking the write lock, whether the lane has
// something to send. gather takes the lock only then: a lock taken on
// every idle turn of every lane would make the host's own writes wait, or
// fail as "database is locked" without a busy timeout.
func (r *Replica) anythingToSay(ctx context.Context, l *lane, now time.Time) (bool, error) {
	stale := now.Add(-r.settings.ResendAfter).UnixMicro()
	var args []any
	pending := "0"
	if len(l.tables) > 0 {
		pending = fmt.Sprintf(anyPendingDueFormat, placeholders(len(l.tables)))
		for _, t := range l.tables {
			args = append(args, t)
		}
		args = append(args, stale)
	}
	if l.name != "main" {
		var say bool
		err := r.db.QueryRowContext(ctx, fmt.Sprintf(selectValueFormat, pending), args...).Scan(&say)
		return say, err
	}
	var say bool
	var digestsAt int64
	err := r.db.QueryRowContext(ctx, fmt.Sprintf(mainHasSayFormat, pending),
		append(args, stale, stale, stale)...).Scan(&say, &digestsAt)
	if err != nil {
		return false, err
	}
	return say || r.digestsDue(now, digestsAt), nil
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
		rows, err := conn.QueryContext(ctx, fmt.Sprintf(selectDueFormat, in), args...)
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
	key    codec.Key
	reason string
}

// maxNamedKeyValue bounds each value of the key that names an own row
// whose key does not read.
const maxNamedKeyValue = 256

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
		if _, err := conn.ExecContext(ctx, clearUnreadable, p.tbl, p.key); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, clearUnreadableReport,
			p.tbl, p.key); err != nil {
			return err
		}
	}
	for _, p := range rd.dropped {
		if _, err := conn.ExecContext(ctx, deleteDroppedNote, p.tbl, p.key, p.change); err != nil {
			return err
		}
	}
	// A report names the last message applied when it was made: a
	// provisioning that ends after it has the row read again, and
	// reported again if it still does not read, so the server forgets
	// reports older than the provisioning.
	var last int64
	if len(rd.unreadable) > 0 {
		if err := conn.QueryRowContext(ctx, selectLastApplied).Scan(&last); err != nil {
			return err
		}
	}
	for _, u := range rd.unreadable {
		r.log.Warn("magicsync/replica: an own row cannot be read; it is set aside until it is written again or deleted", "table", u.tbl, "key", u.key, "reason", u.reason)
		if _, err := conn.ExecContext(ctx, markUnreadable,
			u.tbl, u.pendingRow.key); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, deleteUnreadableReport, u.tbl, u.pendingRow.key); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, insertUnreadableReport,
			u.tbl, []byte(u.key), safetext.Reason(u.reason), last, now.UnixMicro(), u.pendingRow.key); err != nil {
			return err
		}
	}
	return nil
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
	// answers counts the answers to wishes the message carries, all sent
	// again after a provisioning when answersResent.
	answers int
	// commandAnswers counts the answers on commands the message carries.
	commandAnswers int
	answersResent  bool
	// tries counts the calls of the uplink the message was given to;
	// givenUp is set once one was given up on after SendTimeout.
	tries   int
	givenUp bool
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
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(markSentFormat, placeholders(end-start)), args...); err != nil {
			return err
		}
		start = end
	}
	return nil
}
