// Status: where a replica stands, read in one go from its database.

package replica

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
)

// Status is where a replica stands, read in one go from its database.
type Status struct {
	// ID is the replica's id; Known is false while it is being set up.
	ID    uuid.UUID
	Known bool
	// LastApplied is the id of the last message applied.
	LastApplied uint64
	// Build names the running build.
	Build string
	// Lanes says, per lane, what waits to go up.
	Lanes []LaneStatus
	// Backlog counts rows set aside after the server refused them for good;
	// they are sent again when a different build starts.
	Backlog int
	// Unreadable counts own rows set aside because the engine cannot read
	// them (written behind its back with a value their column's type
	// cannot hold); Rejected lists each with why. Such a row goes up once
	// it is written again with good values; its delete clears it.
	Unreadable int
	// Rejected lists the rows this replica could not take, newest first
	// (at most 100). A wish of a table this build does not handle is set
	// aside as such a row.
	Rejected []RejectedRow
	// Wishes counts the server's wishes by where they stand.
	Wishes WishCounts
	// Commands counts the server's commands the replica holds by where
	// they stand (those ended are kept Settings.CommandsKept).
	Commands CommandCounts
	// Retained counts, per catalog declaring Retired, the rows the server
	// let go that the replica keeps, marked retired, while a row of its
	// own points at them; nil when it keeps none.
	Retained map[string]int
}

// LaneStatus is what waits in one lane.
type LaneStatus struct {
	Name string
	// Unsent counts rows written and not yet sent, a message the uplink
	// has not taken (it goes again) included.
	Unsent int
	// Unconfirmed counts rows sent that the server has not yet confirmed
	// filing.
	Unconfirmed int
	// Problem, when not empty, is why the server refuses the lane's
	// messages (its credentials refused, a wrong address, an older
	// server), since ProblemSince: the rows stay queued, and go once it is
	// mended.
	Problem      string
	ProblemSince time.Time
}

// RejectedRow is a row the replica could not take — or, with no Table, a
// whole message it could not decode (ReportUndecodable): Message names it,
// Reason says why. It is magicsync.RejectedRow, whose fields are
// documented there; its Side is always magicsync.SideReplica.
type RejectedRow = magicsync.RejectedRow

// Status reports where the replica stands.
func (r *Replica) Status(ctx context.Context) (Status, error) {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return Status{}, err
	}
	defer conn.Close()
	var st Status
	var id sql.NullString
	if err := conn.QueryRowContext(ctx, selectStatus).Scan(&id, &st.Known, &st.LastApplied, &st.Build); err != nil {
		return Status{}, fmt.Errorf("magicsync/replica: status: %w", err)
	}
	if id.Valid {
		st.ID, _ = uuid.Parse(id.String)
	}
	perLane := map[*lane]*LaneStatus{}
	for _, l := range r.lanes {
		st.Lanes = append(st.Lanes, LaneStatus{Name: l.name})
	}
	for i := range st.Lanes {
		perLane[r.lanes[i]] = &st.Lanes[i]
		if p := r.lanes[i].problem.Load(); p != nil {
			st.Lanes[i].Problem, st.Lanes[i].ProblemSince = p.reason, p.since
		}
	}
	rows, err := conn.QueryContext(ctx, countPendingStates)
	if err != nil {
		return Status{}, err
	}
	for rows.Next() {
		var tbl string
		var unsent, unconfirmed, held, unreadable int
		if err := rows.Scan(&tbl, &unsent, &unconfirmed, &held, &unreadable); err != nil {
			rows.Close()
			return Status{}, err
		}
		st.Backlog += held
		st.Unreadable += unreadable
		if ls := perLane[r.laneOf[tbl]]; ls != nil {
			ls.Unsent += unsent
			ls.Unconfirmed += unconfirmed
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Status{}, err
	}
	// The rows of a message the uplink has not taken are not sent yet.
	for _, l := range r.lanes {
		seq := l.send.unsentSeq.Load()
		if seq == 0 {
			continue
		}
		var n int
		if err := conn.QueryRowContext(ctx, countUnsentOfMessage,
			l.name, seq).Scan(&n); err != nil {
			return Status{}, err
		}
		ls := perLane[l]
		n = min(n, ls.Unconfirmed)
		ls.Unsent += n
		ls.Unconfirmed -= n
	}
	if st.Retained, err = countRetainedRows(ctx, conn); err != nil {
		return Status{}, fmt.Errorf("magicsync/replica: status: %w", err)
	}
	if st.Commands, err = countCommands(ctx, conn); err != nil {
		return Status{}, fmt.Errorf("magicsync/replica: status: counting the commands: %w", err)
	}
	if st.Wishes, err = countWishes(ctx, conn); err != nil {
		return Status{}, fmt.Errorf("magicsync/replica: status: %w", err)
	}
	if st.Rejected, err = inspectRejected(ctx, conn); err != nil {
		return Status{}, fmt.Errorf("magicsync/replica: status: %w", err)
	}
	return st, nil
}

// countRetainedRows counts the rows kept retired, per table, or returns nil
// when there are none.
func countRetainedRows(ctx context.Context, conn *sql.Conn) (map[string]int, error) {
	rows, err := conn.QueryContext(ctx, countRetained)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out map[string]int
	for rows.Next() {
		var tbl string
		var n int
		if err := rows.Scan(&tbl, &n); err != nil {
			return nil, err
		}
		if out == nil {
			out = map[string]int{}
		}
		out[tbl] = n
	}
	return out, rows.Err()
}
