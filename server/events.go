package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync"
)

// events.go holds the events a host follows (Events, FollowEvents): what
// the fleet did, written by the engine in its own transactions — filing
// an upload, filing answers to wishes, ending a provisioning, announcing a
// replica online or offline — so that the host's own writes pay nothing.
//
// A position is a PostgreSQL snapshot (pg_current_snapshot). The events
// after it are those of the transactions it does not see and a newer
// snapshot does: ids are drawn before commit, so a transaction that drew a
// lower id and committed later is still found, where "id > last" would
// skip it. A read that stops at its limit pages on within the same pair of
// snapshots, by (transaction, id), before it moves on to the next.

// EventKind says what an Event reports.
type EventKind int

// The kinds of events. Their numbers are stored: they never change.
const (
	// RecordsFiled: an upload of Replica was filed, and with it the rows
	// of Table named by Keys (upserted or deleted; a row whose version was
	// older than the server's is named although it changed nothing). One
	// event per table of the upload.
	RecordsFiled EventKind = 1
	// WishAnswered: Replica answered wish number Wish of the setting row
	// of Table whose key is Keys[0], with State.
	WishAnswered EventKind = 2
	// CommandAnswered: Replica said command Command stands in
	// CommandState (server.CommandOf reads the rest).
	CommandAnswered EventKind = 3
	// ReplicaOnline: Replica came online, as Status has it (it polled
	// within twice its window).
	ReplicaOnline EventKind = 4
	// ReplicaOffline: Replica went offline, as Status has it.
	ReplicaOffline EventKind = 5
	// Provisioned: Replica acknowledged the end of a provisioning: it
	// holds a full copy of its rows again.
	Provisioned EventKind = 6
)

// String names the kind, e.g. "records filed".
func (k EventKind) String() string {
	switch k {
	case RecordsFiled:
		return "records filed"
	case WishAnswered:
		return "wish answered"
	case CommandAnswered:
		return "command answered"
	case ReplicaOnline:
		return "replica online"
	case ReplicaOffline:
		return "replica offline"
	case Provisioned:
		return "provisioned"
	}
	return "event kind " + strconv.Itoa(int(k))
}

// Event is one thing the fleet did, as Events reports it.
type Event struct {
	// ID tells the event from every other; it does not order them (the
	// order of Events is that of their transactions' ids).
	ID int64
	// Kind says what happened; the fields it does not name are zero.
	Kind EventKind
	// At is when the transaction that wrote the event began, by the
	// database's clock.
	At time.Time
	// Replica is the replica that did it.
	Replica uuid.UUID
	// Table and Keys name the rows filed (RecordsFiled) or the setting
	// row whose wish was answered (WishAnswered): the table's name as
	// declared, and the rows' keys as magicsync.KeyOf has them.
	Table string
	Keys  []magicsync.Key
	// Wish and State are the number of the wish answered and the answer
	// (WishAnswered).
	Wish  uint64
	State WishState
	// Resent is true for rows and answers the replica sent again after a
	// provisioning: filed before, most likely (RecordsFiled, WishAnswered).
	Resent bool
	// Command and CommandState are the command answered and where it
	// stands now (CommandAnswered).
	Command      uuid.UUID
	CommandState CommandState
}

// EventPosition is where a host stands in the events: text that Events
// and FollowEvents return, for the host to store and give back, opaque
// otherwise. The empty position is now: the events from then on.
type EventPosition string

// ErrEventsTrimmed is wrapped by the error of Events and FollowEvents
// when events after the position given were trimmed already (they are
// kept Options.KeepEvents), or the position is ahead of the database (a
// database restored from an older copy): the host may have missed some,
// and should take stock from its tables again, then follow from a
// position taken with EventPositionNow in the same REPEATABLE READ
// transaction.
var ErrEventsTrimmed = errors.New("magicsync/server: events after the position were trimmed")

// defaultKeepEvents is Options.KeepEvents's zero value.
const defaultKeepEvents = 7 * 24 * time.Hour

// defaultEventLimit is the limit of Events when it is given none, and the
// size of FollowEvents's batches.
const defaultEventLimit = 1000

// position is an EventPosition read: the snapshot seen (from), and, while
// a read is paged, the snapshot it reads up to (to) and the last event it
// returned (xid, id).
type position struct {
	from, to string
	xid      string
	id       int64
}

// isSnapshot reports whether s reads as a pg_snapshot's text,
// xmin:xmax:xip,... (PostgreSQL checks the rest).
func isSnapshot(s string) bool {
	xmin, rest, ok1 := strings.Cut(s, ":")
	xmax, xip, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || !isXID(xmin) || !isXID(xmax) {
		return false
	}
	if xip == "" {
		return true
	}
	for x := range strings.SplitSeq(xip, ",") {
		if !isXID(x) {
			return false
		}
	}
	return true
}

// snapshotXmax is the xmax of a snapshot isSnapshot accepted.
func snapshotXmax(s string) uint64 {
	_, rest, _ := strings.Cut(s, ":")
	xmax, _, _ := strings.Cut(rest, ":")
	n, _ := strconv.ParseUint(xmax, 10, 64)
	return n
}

// isXID reports whether s reads as a 64-bit transaction id.
func isXID(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil && s[0] != '+'
}

// parsePosition reads a position Events returned.
func parsePosition(p EventPosition) (position, error) {
	parts := strings.Split(string(p), ";")
	bad := fmt.Errorf("magicsync/server: event position %.80q is not one Events returned", string(p))
	var out position
	switch len(parts) {
	case 1:
		out.from = parts[0]
	case 4:
		id, err := strconv.ParseInt(parts[3], 10, 64)
		if err != nil || !isSnapshot(parts[1]) || !isXID(parts[2]) {
			return position{}, bad
		}
		out = position{from: parts[0], to: parts[1], xid: parts[2], id: id}
	default:
		return position{}, bad
	}
	if !isSnapshot(out.from) {
		return position{}, bad
	}
	return out, nil
}

// String writes the position.
func (p position) String() EventPosition {
	if p.to == "" {
		return EventPosition(p.from)
	}
	return EventPosition(p.from + ";" + p.to + ";" + p.xid + ";" + strconv.FormatInt(p.id, 10))
}

// EventPositionNow returns the position of now, read through q (nil: the
// server's pool): the events after it are those of the transactions its
// snapshot does not see. Read in a REPEATABLE READ transaction, it is the
// position of what that transaction's reads see: a host that takes stock
// from its tables and this position in one such transaction, then follows
// the events after it, counts each filing exactly once.
func (s *Server) EventPositionNow(ctx context.Context, q Querier) (EventPosition, error) {
	if q == nil {
		q = s.pool
	}
	rows, err := q.Query(ctx, qEventSnapshot)
	if err != nil {
		return "", fmt.Errorf("magicsync/server: reading the events' position: %w", err)
	}
	snap, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("magicsync/server: reading the events' position: %w", err)
	}
	return EventPosition(snap), nil
}

// Events returns the events after position after, in the order of their
// transactions (and, within one, of their writing), at most limit of them
// (zero or less: 1000), and the position after them: give it to the next
// call. Fewer than limit means none more had committed when Events began.
// Events are reported once their transaction committed, and none is
// skipped, whatever order the transactions committed in. An empty after
// is now: Events returns no events, and the position of now.
//
// A host applying events should store the position returned in the same
// transaction as their effect: after a crash it then resumes where its
// effects stop, neither missing events nor applying one twice. Events
// after a position older than Options.KeepEvents may be trimmed: the
// error then wraps ErrEventsTrimmed.
func (s *Server) Events(ctx context.Context, after EventPosition, limit int) ([]Event, EventPosition, error) {
	if after == "" {
		p, err := s.EventPositionNow(ctx, nil)
		return nil, p, err
	}
	p, err := parsePosition(after)
	if err != nil {
		return nil, after, err
	}
	if limit <= 0 {
		limit = defaultEventLimit
	}
	var evs []Event
	start := p.from
	for {
		fresh := p.to == ""
		if fresh {
			if err := s.pool.QueryRow(ctx, qEventSnapshot).Scan(&p.to); err != nil {
				return nil, after, fmt.Errorf("magicsync/server: reading events: %w", err)
			}
			p.xid, p.id = "0", 0
			if snapshotXmax(p.to) < snapshotXmax(start) {
				// Transactions the database has not reached yet: the
				// position is another database's, or this one was
				// restored from a copy older than it.
				return nil, after, fmt.Errorf("%w: the position is ahead of the database (restored from an older copy?): take stock again, and follow from a new position", ErrEventsTrimmed)
			}
		}
		page, more, err := s.eventsPage(ctx, &p, limit-len(evs))
		if err != nil {
			return nil, after, fmt.Errorf("magicsync/server: reading events: %w", err)
		}
		evs = append(evs, page...)
		if more {
			break // p pages on within the same snapshots
		}
		// The events up to p.to are read: the position is p.to, and a
		// read that paged up to it goes on from there.
		p = position{from: p.to}
		if fresh || len(evs) == limit {
			break
		}
	}
	// Read after the events, so that a trimming that ran before or while
	// they were read is seen.
	var trimmed bool
	if err := s.pool.QueryRow(ctx, s.sql.of(qEventsTrimmedPast), start).Scan(&trimmed); err != nil {
		return nil, after, fmt.Errorf("magicsync/server: reading events: %w", err)
	}
	if trimmed {
		return nil, after, fmt.Errorf("%w (they are kept %v, Options.KeepEvents): take stock again, and follow from a new position", ErrEventsTrimmed, s.keepEvents())
	}
	return evs, p.String(), nil
}

// eventsPage reads up to limit events after p.from and up to p.to, after
// (p.xid, p.id), moving p's last to the last read; more is true when
// others follow it.
func (s *Server) eventsPage(ctx context.Context, p *position, limit int) (evs []Event, more bool, err error) {
	rows, err := s.pool.Query(ctx, s.sql.of(qEventsOf), p.from, p.to, p.xid, p.id, limit+1)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		if len(evs) == limit {
			return evs, true, nil // one more than asked
		}
		var (
			e           Event
			xid         string
			kind, state int16
			keys        [][]byte
		)
		var command *uuid.UUID
		if err := rows.Scan(&e.ID, &xid, &e.At, &kind, &e.Replica, &e.Table, &keys, &e.Wish, &state, &e.Resent, &command); err != nil {
			return nil, false, err
		}
		e.Kind = EventKind(kind)
		if e.Kind == CommandAnswered && command != nil {
			e.Command, e.CommandState = *command, CommandState(state)
		} else {
			e.State = WishState(state)
		}
		if len(keys) > 0 {
			e.Keys = make([]magicsync.Key, len(keys))
			for i, k := range keys {
				e.Keys[i] = magicsync.Key(k)
			}
		}
		evs = append(evs, e)
		p.xid, p.id = xid, e.ID
	}
	return evs, false, rows.Err()
}

// keepEvents is how long events are kept.
func (s *Server) keepEvents() time.Duration {
	if s.opts.KeepEvents > 0 {
		return s.opts.KeepEvents
	}
	return defaultKeepEvents
}

// followEventsEvery bounds how long FollowEvents waits before it reads
// again when nothing woke it: events of another process are heard at
// once only in a process that Runs.
const followEventsEvery = time.Second

// FollowEvents calls fn with the events after position after, in order,
// in batches (of at most 1000), each with the position after it, until
// ctx ends (it then returns nil) or fn returns an error (returned as it
// is). When no event waits, it waits for the next: woken at once in a
// process that Runs (whose listener hears the other processes' filings),
// and reading again at least every second otherwise. An empty after is
// now.
//
// Delivery is at least once: fn should store the position in the same
// transaction as its effect, so that after a crash the host resumes from
// the position stored and sees again only the batch it had not stored.
// A failure to read the events is logged and tried again; events trimmed
// past the position (ErrEventsTrimmed) end FollowEvents with the error.
func (s *Server) FollowEvents(ctx context.Context, after EventPosition, fn func(ctx context.Context, events []Event, next EventPosition) error) error {
	if after != "" {
		if _, err := parsePosition(after); err != nil {
			return err
		}
	}
	pos := after
	var out outage
	for {
		wake := s.bell.wait() // before reading: a wake during the read is not lost
		evs, next, err := s.Events(ctx, pos, defaultEventLimit)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrEventsTrimmed) {
			return err
		}
		wait := out.note(s.log, err, "magicsync/server: reading events fails; trying again until it works", "magicsync/server: reading events works again")
		if err == nil {
			if len(evs) > 0 {
				if err := fn(ctx, evs, next); err != nil {
					return err
				}
			}
			pos = next
			if len(evs) == defaultEventLimit {
				continue // more wait
			}
			wait = followEventsEvery
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// eventBell wakes the FollowEvents calls of this process when events may
// have come. The zero bell is ready.
type eventBell struct {
	mu sync.Mutex
	ch chan struct{} // closed by ring; nil when nobody waits
}

// wait returns a channel closed at the next ring.
func (b *eventBell) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// ring wakes every waiter.
func (b *eventBell) ring() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
