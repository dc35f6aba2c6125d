// What the main lane reports beside its rows: the last message applied, the
// server's rows it could not take and the ones it cleared, the messages it
// could not decode, and the counts of what waits.

package replica

import (
	"context"
	"database/sql"
	"time"

	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// gatherReports adds to up what the main lane says besides rows: the last
// message applied, the rows it could not take, the answers to wishes and,
// when due, its digests. news is true when any of it is to be said.
func (r *Replica) gatherReports(ctx context.Context, conn *sql.Conn, l *lane, up *syncpb.Up, out *outgoing, stale int64, now time.Time) (news bool, err error) {
	var last, reported, digestsAt int64
	if err := conn.QueryRowContext(ctx, selectReplicaProgress).Scan(&last, &reported, &digestsAt); err != nil {
		return false, err
	}
	up.LastApplied = uint64(last)
	out.applied = uint64(last)
	say := last > reported
	rejected, cleared, undecodable, err := r.unreported(ctx, conn, stale, l.rowCap(r.settings.MaxRows))
	if err != nil {
		return false, err
	}
	up.Rejected, up.Cleared, up.Undecodable = rejected, cleared, undecodable
	out.rejected = len(rejected) + len(cleared) + len(undecodable)
	say = say || out.rejected > 0
	// Answers to wishes share the reports' cap.
	if room := l.rowCap(r.settings.MaxRows) - out.rejected; room > 0 {
		if up.Answers, out.answersResent, err = r.answersDue(ctx, conn, out.rows > 0, up.Resent, stale, room); err != nil {
			return false, err
		}
		out.answers = len(up.Answers)
		if out.answers > 0 && out.rows == 0 {
			up.Resent = out.answersResent
		}
		say = say || out.answers > 0
	}
	// So do those on commands.
	if room := l.rowCap(r.settings.MaxRows) - out.rejected - out.answers; room > 0 {
		if up.CommandAnswers, err = commandAnswersDue(ctx, conn, stale, room); err != nil {
			return false, err
		}
		out.commandAnswers = len(up.CommandAnswers)
		say = say || out.commandAnswers > 0
	}
	if r.digestsDue(now, digestsAt) {
		if up.Digests, err = r.digests(ctx, conn, uint64(last)); err != nil {
			return false, err
		}
		out.digests = true
		say = true
	}
	return say, nil
}

// unreported lists the rows this replica could not take that are due to be
// reported — never reported, or reported before stale and not confirmed —
// the reports of own rows set aside that it cleared since, and the
// messages it could not decode (ReportUndecodable: a report naming no
// table).
func (r *Replica) unreported(ctx context.Context, conn *sql.Conn, stale int64, limit int) (rejected, cleared []*syncpb.Rejected, undecodable []*syncpb.Undecodable, err error) {
	rows, err := conn.QueryContext(ctx, selectUnreported, stale, limit)
	if err != nil {
		return nil, nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		rj := &syncpb.Rejected{}
		var wasCleared bool
		if err := rows.Scan(&rj.Table, &rj.Key, &rj.Reason, &rj.Message, &wasCleared); err != nil {
			return nil, nil, nil, err
		}
		safeReport(rj)
		switch {
		case rj.Table == "":
			undecodable = append(undecodable, &syncpb.Undecodable{Message: rj.Message, Reason: rj.Reason})
		case wasCleared:
			rj.Reason = ""
			cleared = append(cleared, rj)
		default:
			rejected = append(rejected, rj)
		}
	}
	return rejected, cleared, undecodable, rows.Err()
}

// safeReport makes a report one a message can carry, whatever an older
// build recorded: its table and reason safe text, and its key left out
// when it is no tuple the wire takes. Such a key only named the row for
// people to see; its clearing leaves it out the same way, so the server
// still matches the two.
func safeReport(rj *syncpb.Rejected) {
	rj.Table = safetext.Text(rj.Table, safetext.MaxReason)
	rj.Reason = safetext.Reason(rj.Reason)
	if len(rj.Key) > 0 {
		if _, err := wire.ValidateTuple(rj.Key); err != nil {
			rj.Key = nil
		}
	}
}

// counts tells the server how many rows of each of the lane's tables wait
// to go up after this message, and how many wait in the backlog. It runs
// once the message's rows are recorded as sent: rows sent and not yet
// confirmed are not counted — they are on the server, or will be sent
// again and counted then — so the figure is exact, and is 0 when the
// message carries all there was to send: the server shows 0 from the last
// message on, with no message of its own once the rows are filed.
func (r *Replica) counts(ctx context.Context, conn *sql.Conn, l *lane, up *syncpb.Up) error {
	rows, err := conn.QueryContext(ctx, countUnsentAndHeld)
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
