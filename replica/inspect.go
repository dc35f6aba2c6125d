// Inspect: what a replica's database says of it, read without the host's
// declarations and without a Replica, for an operator's tools.

package replica

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
)

// InspectRows is how many rows of each list Inspect reads (the backlog,
// the rows the replica could not take, the wishes): the first ones, as
// each list orders them. The counts beside them count them all.
const InspectRows = 100

// Inspection is what a replica's database says of it, as Inspect reads it.
// It holds only what the file records: the host's declarations — which
// table goes up in which lane, the running process's lane problems, the
// message an uplink has not taken yet — live in the running process, whose
// Status tells them.
type Inspection struct {
	// SchemaVersion is the version of the engine's tables.
	SchemaVersion int
	// ID is the replica's id; Known is false while it is being set up.
	ID    uuid.UUID
	Known bool
	// LastApplied is the id of the last message applied; ReportedApplied,
	// the last the replica told the server it applied.
	LastApplied, ReportedApplied uint64
	// Build names the build that last started the replica.
	Build string
	// DigestsAt is when the digests last went up; zero if never.
	DigestsAt time.Time
	// Tables says, per own table with rows noted, what waits to go up, by
	// name.
	Tables []TableInspection
	// Lanes says, per lane that ever sent, how far its messages are
	// numbered and how many rows it sent that the server has not yet
	// confirmed (the rows of a message the uplink has not taken included:
	// the file does not tell them apart), by name.
	Lanes []LaneInspection
	// Backlog counts the rows set aside after the server refused them for
	// good; BacklogRows lists the first InspectRows of them by table and
	// key. HeldReports and HeldAnswers count the reports of rows the
	// replica could not take, and the answers to wishes, set aside alike.
	// ReleaseBacklog, or a different build starting, sends them again.
	Backlog     int
	BacklogRows []BacklogRow
	HeldReports int
	HeldAnswers int
	// Unreadable counts own rows set aside because the engine cannot read
	// them.
	Unreadable int
	// Rejected lists the rows this replica could not take, newest first
	// (at most InspectRows); RejectedTotal counts them all.
	Rejected      []RejectedRow
	RejectedTotal int
	// Wishes counts the server's wishes by where they stand; WishList lists
	// the first InspectRows of them, with their answers, by table and key.
	// MoreWishes says there are more: InspectWishes pages through them all,
	// from WishList's last (its Cursor).
	Wishes     WishCounts
	WishList   []WishInspection
	MoreWishes bool
	// Commands counts the server's commands the replica holds, by state;
	// CommandList lists the InspectRows issued last, newest first.
	Commands    CommandCounts
	CommandList []CommandInspection
	// Retained counts, per catalog, the rows kept retired; nil when none.
	Retained map[string]int
	// Staged counts the rows of a provisioning staged and not yet switched
	// in: a provisioning is under way while it is not zero.
	Staged int
}

// TableInspection is what waits to go up of one own table.
type TableInspection struct {
	Table string
	// Unsent counts rows written and not yet sent; Unconfirmed, rows sent
	// that the server has not yet confirmed; Backlog, rows set aside after
	// a refusal for good; Unreadable, rows set aside as unreadable.
	Unsent, Unconfirmed, Backlog, Unreadable int
}

// LaneInspection is how far one lane went.
type LaneInspection struct {
	Name string
	// Sent is the sequence number of the lane's last message.
	Sent uint64
	// Unconfirmed counts the rows it sent that the server has not yet
	// confirmed.
	Unconfirmed int
}

// BacklogRow is a row set aside after the server refused it for good.
type BacklogRow struct {
	Table string
	// Key is the row's key as the triggers noted it.
	Key string
	// Build is the build that set it aside; Reason says why.
	Build, Reason string
}

// WishInspection is one of the server's wishes and the replica's answer.
type WishInspection struct {
	Table string
	Key   magicsync.Key
	// Wish numbers the wish; Note is the server's note of it; Columns, the
	// columns it wishes other values; WishedAt, when the server made it.
	Wish     uint64
	Note     string
	Columns  []string
	WishedAt time.Time
	// State is the replica's answer (WishPending until it answered), with
	// its Reason and AnsweredAt (zero while pending).
	State      WishState
	Reason     string
	AnsweredAt time.Time
	// Filed says the server confirmed the answer; Held, that the answer is
	// set aside after the server refused its message for good.
	Filed, Held bool
}

// CommandInspection is one of the server's commands and what became of it
// on the replica.
type CommandInspection struct {
	ID uuid.UUID
	// Name is the command's name; Note, the server's note of it; IssuedAt,
	// when the server issued it; Deadline, when it expires unstarted (zero:
	// never).
	Name     string
	Note     string
	IssuedAt time.Time
	Deadline time.Time
	// State is where it stands here, with its Reason and AnsweredAt (zero
	// while delivered and not started).
	State      CommandState
	Reason     string
	AnsweredAt time.Time
	// Filed says the server confirmed the last answer; Withdrawn, that the
	// server no longer asks it (it ended there, or was cancelled or
	// expired); Held, that its answer is set aside after the server
	// refused its message for good.
	Filed, Withdrawn, Held bool
}

// Cursor is where the page of InspectWishes after this wish starts.
func (w WishInspection) Cursor() WishCursor { return WishCursor{Table: w.Table, Key: w.Key} }

// WishCursor is where a page of InspectWishes starts: after the wish of
// Table and Key, in the order wishes are listed (by table, then key). The
// zero WishCursor starts at the first wish.
type WishCursor struct {
	Table string
	Key   magicsync.Key
}

// WishPage is one page of a replica's wishes, as InspectWishes reads it.
type WishPage struct {
	Wishes []WishInspection
	// More says more wishes follow; Next is where their page starts.
	More bool
	Next WishCursor
}

// Inspect reads where the replica of db stands from its file alone, in one
// read transaction: it writes nothing and takes no write lock, so that it
// is safe on the file of a running replica (open the file read-only, with
// a busy timeout: modernc.org/sqlite "file:PATH?mode=ro&_pragma=busy_timeout(5000)").
// It needs no declarations and opens nothing: the caller opens db and
// closes it. It refuses a database the engine was never installed in, or
// whose engine tables another build set up (a different schema version).
func Inspect(ctx context.Context, db *sql.DB) (Inspection, error) {
	var in Inspection
	err := readFile(ctx, db, func(conn *sql.Conn) error {
		var err error
		in, err = inspect(ctx, conn)
		return err
	})
	if err != nil {
		return Inspection{}, fmt.Errorf("magicsync/replica: inspect: %w", err)
	}
	return in, nil
}

// InspectWishes reads a page of the server's wishes with the replica's
// answers, at most limit of them (InspectRows when limit is not above
// zero) from cursor from, as Inspect reads its file: in one read
// transaction, safe on the file of a running replica. Inspect lists the
// first page; each page's Next starts the one after it.
func InspectWishes(ctx context.Context, db *sql.DB, from WishCursor, limit int) (WishPage, error) {
	if limit <= 0 {
		limit = InspectRows
	}
	var page WishPage
	err := readFile(ctx, db, func(conn *sql.Conn) error {
		if err := checkEngineTables(ctx, conn); err != nil {
			return err
		}
		var err error
		page, err = inspectWishes(ctx, conn, from, limit)
		return err
	})
	if err != nil {
		return WishPage{}, fmt.Errorf("magicsync/replica: inspecting the wishes: %w", err)
	}
	return page, nil
}

// readFile runs read in one deferred transaction of a connection of db:
// it reads one snapshot of the file and takes no write lock, and is
// rolled back. (database/sql's own transactions would not let the
// readers shared with Status run in it.)
func readFile(ctx context.Context, db *sql.DB, read func(conn *sql.Conn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, beginRead); err != nil {
		return err
	}
	defer func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), rollbackTx); err != nil {
			// A connection left in a transaction must not go back to the pool.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	return read(conn)
}

// inspect reads the Inspection in the transaction conn holds.
func inspect(ctx context.Context, conn *sql.Conn) (Inspection, error) {
	if err := checkEngineTables(ctx, conn); err != nil {
		return Inspection{}, err
	}
	var in Inspection
	var id sql.NullString
	var digestsAt int64
	if err := conn.QueryRowContext(ctx, selectInspected).Scan(&in.SchemaVersion, &id, &in.Known,
		&in.LastApplied, &in.ReportedApplied, &in.Build, &digestsAt); err != nil {
		return Inspection{}, err
	}
	if id.Valid {
		in.ID, _ = uuid.Parse(id.String)
	}
	if digestsAt > 0 {
		in.DigestsAt = time.UnixMicro(digestsAt).UTC()
	}
	rows, err := conn.QueryContext(ctx, countPendingStates+" ORDER BY tbl")
	if err != nil {
		return Inspection{}, err
	}
	for rows.Next() {
		var t TableInspection
		if err := rows.Scan(&t.Table, &t.Unsent, &t.Unconfirmed, &t.Backlog, &t.Unreadable); err != nil {
			rows.Close()
			return Inspection{}, err
		}
		in.Backlog += t.Backlog
		in.Unreadable += t.Unreadable
		in.Tables = append(in.Tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Inspection{}, err
	}
	if in.Lanes, err = inspectLanes(ctx, conn); err != nil {
		return Inspection{}, err
	}
	if in.BacklogRows, err = inspectBacklog(ctx, conn); err != nil {
		return Inspection{}, err
	}
	for q, n := range map[string]*int{countHeldReports: &in.HeldReports, countHeldAnswers: &in.HeldAnswers,
		countRejectedRows: &in.RejectedTotal, countStagedRows: &in.Staged} {
		if err := conn.QueryRowContext(ctx, q).Scan(n); err != nil {
			return Inspection{}, err
		}
	}
	if in.Rejected, err = inspectRejected(ctx, conn); err != nil {
		return Inspection{}, err
	}
	if in.Wishes, err = countWishes(ctx, conn); err != nil {
		return Inspection{}, err
	}
	page, err := inspectWishes(ctx, conn, WishCursor{}, InspectRows)
	if err != nil {
		return Inspection{}, err
	}
	in.WishList, in.MoreWishes = page.Wishes, page.More
	if in.Commands, err = countCommands(ctx, conn); err != nil {
		return Inspection{}, err
	}
	if in.CommandList, err = inspectCommands(ctx, conn); err != nil {
		return Inspection{}, err
	}
	if in.Retained, err = countRetainedRows(ctx, conn); err != nil {
		return Inspection{}, err
	}
	return in, nil
}

// checkEngineTables refuses a database without the engine's tables, or
// with those of another schema version, whose columns this build would
// misread.
func checkEngineTables(ctx context.Context, conn *sql.Conn) error {
	var n int
	if err := conn.QueryRowContext(ctx, countReplicaTable).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return errors.New("the database has no sync_replica table: it is not a magicsync replica's file (check the path), or replica.Install never ran on it")
	}
	var version int
	if err := conn.QueryRowContext(ctx, selectSchemaVersion).Scan(&version); err != nil {
		return err
	}
	if version != schemaVersion {
		return fmt.Errorf("the engine tables are at version %d and this build reads version %d: use the magicsync command of the replica's own build (or let the replica's replica.Install bring the file up to date)", version, schemaVersion)
	}
	return nil
}

// inspectLanes lists the lanes that sent.
func inspectLanes(ctx context.Context, conn *sql.Conn) ([]LaneInspection, error) {
	return queryAll(ctx, conn, func(rows *sql.Rows, l *LaneInspection) error {
		return rows.Scan(&l.Name, &l.Sent, &l.Unconfirmed)
	}, selectLanes)
}

// inspectCommands lists the commands issued last, newest first.
func inspectCommands(ctx context.Context, conn *sql.Conn) ([]CommandInspection, error) {
	return queryAll(ctx, conn, func(rows *sql.Rows, c *CommandInspection) error {
		var id []byte
		var issued, deadline, answered int64
		if err := rows.Scan(&id, &c.Name, &c.Note, &issued, &deadline, &c.State, &c.Reason, &answered,
			&c.Filed, &c.Withdrawn, &c.Held); err != nil {
			return err
		}
		var err error
		if c.ID, err = uuid.FromBytes(id); err != nil {
			return fmt.Errorf("a command's id of %d bytes: %w", len(id), err)
		}
		c.IssuedAt = time.UnixMicro(issued).UTC()
		if deadline > 0 {
			c.Deadline = time.UnixMicro(deadline).UTC()
		}
		if answered > 0 {
			c.AnsweredAt = time.UnixMicro(answered).UTC()
		}
		return nil
	}, selectCommandsInspected, InspectRows)
}

// inspectBacklog lists the first rows of the backlog.
func inspectBacklog(ctx context.Context, conn *sql.Conn) ([]BacklogRow, error) {
	return queryAll(ctx, conn, func(rows *sql.Rows, b *BacklogRow) error {
		return rows.Scan(&b.Table, &b.Key, &b.Build, &b.Reason)
	}, selectBacklog, InspectRows)
}

// inspectRejected lists the rows the replica could not take, newest first,
// as Status does.
func inspectRejected(ctx context.Context, conn *sql.Conn) ([]RejectedRow, error) {
	rows, err := conn.QueryContext(ctx, selectRejectedRows)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []RejectedRow
	for rows.Next() {
		var rj RejectedRow
		var key []byte
		var at int64
		if err := rows.Scan(&rj.Table, &key, &rj.Reason, &rj.Message, &at, &rj.Reported); err != nil {
			return nil, err
		}
		rj.Key, rj.Side, rj.At = magicsync.Key(key), magicsync.SideReplica, time.UnixMicro(at).UTC()
		out = append(out, rj)
	}
	return out, rows.Err()
}

// inspectWishes reads a page of the wishes with their answers: at most
// limit, after from.
func inspectWishes(ctx context.Context, conn *sql.Conn, from WishCursor, limit int) (WishPage, error) {
	rows, err := conn.QueryContext(ctx, selectWishList, from.Table, []byte(from.Key), limit+1)
	if err != nil {
		return WishPage{}, err
	}
	defer rows.Close()
	var page WishPage
	for rows.Next() {
		if len(page.Wishes) == limit {
			page.More = true
			page.Next = page.Wishes[limit-1].Cursor()
			break
		}
		var w WishInspection
		var key []byte
		var columns string
		var wishedAt, answeredAt int64
		if err := rows.Scan(&w.Table, &key, &w.Wish, &w.Note, &columns, &wishedAt, &w.State, &w.Reason, &answeredAt, &w.Filed, &w.Held); err != nil {
			return WishPage{}, err
		}
		w.Key, w.Columns, w.WishedAt = magicsync.Key(key), strings.Split(columns, "\x1f"), time.UnixMicro(wishedAt).UTC()
		if answeredAt != 0 {
			w.AnsweredAt = time.UnixMicro(answeredAt).UTC()
		}
		page.Wishes = append(page.Wishes, w)
	}
	return page, rows.Err()
}
