package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// outbox_build.go builds a replica's next message when none waits: a
// provisioning's part, or a delta of its groups' logs since its cursors, in
// one transaction of its own (build), and ahead of the poll for a replica
// provisioning (buildAhead, one of Run's services).

// askAhead asks Run to build the replica's next message before it is
// asked for (buildAhead); a request that finds the queue full is dropped:
// Next builds on demand anyway.
func (s *Server) askAhead(replica uuid.UUID) {
	select {
	case s.out.ahead <- replica:
	default:
	}
}

// buildAhead is Run's builder of messages ahead of time: while a replica
// applies one part of its provisioning, the next is built, so that the
// server's work overlaps the replica's. It returns when ctx ends.
func (s *Server) buildAhead(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case replica := <-s.out.ahead:
			bctx, cancel := context.WithTimeout(ctx, buildTimeout)
			if _, _, err := s.build(bctx, replica, true); err != nil && ctx.Err() == nil {
				s.log.Warn("magicsync/server: building a message ahead failed; it is built when asked for", "replica", replica, "err", err)
			}
			cancel()
		}
	}
}

// replicaState is a replica's row of sync_replicas, locked for building.
type replicaState struct {
	id               uuid.UUID
	nextID           int64
	provisionNeeded  bool
	snapshot         int64
	snapGrp          int64
	snapTbl          string
	snapKey          []byte
	memberships      []membership
	groupSet         map[int64]bool
	provisionStarted bool
}

// membership is a replica's cursor in one of its groups' logs, and the
// group's head.
type membership struct {
	grp, sentPos, head int64
}

// built is a message built and the state it brings the replica to.
type built struct {
	kind    string // "down", "part", "end"
	toRep   *syncpb.ToReplica
	grps    []int64
	poss    []int64
	snapGrp int64
	snapTbl string
	snapKey []byte
}

// build builds, stores and returns the replica's next message — or, when
// confirmations of uploads (Filed) were queued before it, the oldest of
// them, for messages are handed out in id order; with nothing to build, it
// returns that oldest confirmation too. A message other than a Filed
// already queued is not built again: the oldest queued is returned. With
// ahead, it builds the message after the one handed out and not yet
// acknowledged, and only while a provisioning is under way; it does
// nothing otherwise.
func (s *Server) build(ctx context.Context, replica uuid.UUID, ahead bool) (Message, bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Message{}, false, fmt.Errorf("magicsync/server: building a message: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	st := &replicaState{id: replica}
	err = tx.QueryRow(ctx, s.sql.of(qLockForBuild), replica).
		Scan(&st.nextID, &st.provisionNeeded, &st.snapshot, &st.snapGrp, &st.snapTbl, &st.snapKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return Message{}, false, fmt.Errorf("%w %s", ErrUnknownReplica, replica)
	}
	if err != nil {
		return Message{}, false, fmt.Errorf("magicsync/server: building a message: %w", err)
	}
	if err := s.idsWentBack(replica, st.nextID); err != nil {
		return Message{}, false, err
	}
	// filedFirst: confirmations of uploads are queued before what is built.
	filedFirst, build, err := s.queuedForBuild(ctx, tx, st, ahead)
	if err != nil || !build {
		if err == nil && !ahead {
			// Another process, or Run ahead, built it meanwhile.
			return s.oldest(ctx, tx, replica)
		}
		return Message{}, false, err
	}
	if st.provisionNeeded {
		if err := s.startProvisioning(ctx, tx, st); err != nil {
			return Message{}, false, err
		}
	}
	if err := s.loadMemberships(ctx, tx, st); err != nil {
		return Message{}, false, err
	}
	var b *built
	if st.snapshot != 0 {
		b, err = s.buildSnapshot(ctx, tx, st)
	} else {
		b, err = s.buildDelta(ctx, tx, st)
	}
	if err != nil {
		return Message{}, false, fmt.Errorf("magicsync/server: building a message for %s: %w", replica, err)
	}
	if st.provisionStarted && s.hooks.provisionBuilt != nil {
		s.hooks.provisionBuilt(replica)
	}
	if b == nil {
		return s.handOut(ctx, tx, replica, filedFirst)
	}
	if b.toRep == nil {
		// Positions moved over entries that carry nothing (tables no longer
		// declared): no message, the cursors move on.
		if _, err := tx.Exec(ctx, s.sql.of(qSkipPositions), replica, b.grps, b.poss); err != nil {
			return Message{}, false, err
		}
		return s.handOut(ctx, tx, replica, filedFirst)
	}
	id, body, err := s.storeBuilt(ctx, tx, st, b)
	if err != nil {
		return Message{}, false, err
	}
	// What this process knew of the replica is behind now. The build is
	// not announced: a notifying commit holds PostgreSQL's notify lock
	// through its WAL flush, and a fleet's provisionings would commit one
	// at a time. The others need no announcement of it: what made this
	// message due (a provisioning, an upload's Filed, a log grown past
	// the replica's cursors) was announced at its own commit ("r:",
	// "g:"), and dropped their entries already.
	defer s.memo.drop(replica)
	if filedFirst {
		return s.handOut(ctx, tx, replica, true)
	}
	if err := tx.Commit(ctx); err != nil {
		return Message{}, false, fmt.Errorf("magicsync/server: storing message %d for %s: %w", id, replica, err)
	}
	return Message{ID: uint64(id), Body: body, kind: b.kind}, true, nil
}

// queuedForBuild reads what the replica's outbox holds before a build:
// build is false when there is nothing to build now — ahead, unless the
// outbox holds a lone part of a provisioning, handed out (never past its
// end); otherwise, when a message other than Filed waits, built by another
// process or by Run ahead. filedFirst is true when confirmations of
// uploads wait, to be handed out before what is built.
func (s *Server) queuedForBuild(ctx context.Context, tx pgx.Tx, st *replicaState, ahead bool) (filedFirst, build bool, err error) {
	if ahead {
		// Only past a lone part, handed out: never past the end (a second
		// end of the same snapshot would empty the replica's tables, its
		// staged rows switched in by the first). Confirmations of uploads
		// queued beside it are no part of the provisioning.
		var queued int
		var parts bool
		if err := tx.QueryRow(ctx, s.sql.of(qQueuedParts), st.id).Scan(&queued, &parts); err != nil {
			return false, false, fmt.Errorf("magicsync/server: building a message: %w", err)
		}
		return false, queued == 1 && parts && !st.provisionNeeded && st.snapshot != 0, nil
	}
	var other bool
	if err := tx.QueryRow(ctx, s.sql.of(qQueuedKinds), st.id).Scan(&other, &filedFirst); err != nil {
		return false, false, fmt.Errorf("magicsync/server: building a message: %w", err)
	}
	return filedFirst, !other, nil
}

// storeBuilt numbers the message built with the replica's next id,
// encodes and stores it, and moves the replica's cursors and its
// provisioning's place past what it carries.
func (s *Server) storeBuilt(ctx context.Context, tx pgx.Tx, st *replicaState, b *built) (int64, []byte, error) {
	id := st.nextID
	b.toRep.Id = uint64(id)
	body, err := wire.EncodeToReplica(b.toRep)
	if err != nil {
		return 0, nil, fmt.Errorf("magicsync/server: encoding message %d for %s: %w", id, st.id, err)
	}
	if _, err := tx.Exec(ctx, s.sql.of(qStoreMessage),
		st.id, id, b.kind, body, b.grps, b.poss); err != nil {
		return 0, nil, fmt.Errorf("magicsync/server: storing message %d for %s: %w", id, st.id, err)
	}
	if len(b.grps) > 0 {
		if _, err := tx.Exec(ctx, s.sql.of(qMoveSent), st.id, b.grps, b.poss); err != nil {
			return 0, nil, err
		}
	}
	if _, err := tx.Exec(ctx, s.sql.of(qRecordBuilt),
		st.id, id, b.snapGrp, b.snapTbl, b.snapKey, st.provisionStarted); err != nil {
		return 0, nil, err
	}
	return id, body, nil
}

// handOut commits a build and returns what to hand out instead of what it
// built, if anything: the oldest message queued when confirmations were
// queued before it (filedFirst), else none.
func (s *Server) handOut(ctx context.Context, tx pgx.Tx, replica uuid.UUID, filedFirst bool) (Message, bool, error) {
	var msg Message
	var ok bool
	if filedFirst {
		var err error
		if msg, ok, err = s.oldest(ctx, tx, replica); err != nil {
			return Message{}, false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return Message{}, false, fmt.Errorf("magicsync/server: building a message for %s: %w", replica, err)
	}
	return msg, ok, nil
}

// loadMemberships reads the replica's cursors and their groups' heads.
func (s *Server) loadMemberships(ctx context.Context, tx pgx.Tx, st *replicaState) error {
	rows, err := tx.Query(ctx, s.sql.of(qMemberships), st.id)
	if err != nil {
		return err
	}
	defer rows.Close()
	st.groupSet = map[int64]bool{}
	st.memberships = st.memberships[:0]
	for rows.Next() {
		var m membership
		if err := rows.Scan(&m.grp, &m.sentPos, &m.head); err != nil {
			return err
		}
		st.memberships = append(st.memberships, m)
		st.groupSet[m.grp] = true
	}
	return rows.Err()
}

// changes gathers one message's rows, per table, each key once.
type changes struct {
	tables map[*table]*tableChanges
	size   int
}

// tableChanges is one table's part of a message.
type tableChanges struct {
	pb    *syncpb.TableChanges
	idx   map[string]int // key → index in upserts (>= 0) or ^index in deletes
	holes bool           // some upserts or deletes were replaced (nil)
}

// newChanges returns an empty message.
func newChanges() *changes { return &changes{tables: map[*table]*tableChanges{}, size: msgOverhead} }

// table returns a table's part of the message, adding it if need be.
func (c *changes) table(t *table) *tableChanges {
	tc := c.tables[t]
	if tc == nil {
		tc = &tableChanges{pb: &syncpb.TableChanges{Table: t.name, Columns: t.downNames}, idx: map[string]int{}}
		c.tables[t] = tc
		c.size += 64 + len(t.name)
		for _, n := range t.downNames {
			c.size += len(n) + 2
		}
	}
	return tc
}

// upsert adds a row (replacing an earlier change of the same key).
func (c *changes) upsert(t *table, key, tuple []byte) {
	tc := c.table(t)
	if i, ok := tc.idx[string(key)]; ok {
		if i >= 0 {
			tc.pb.Upserts[i] = tuple
			return
		}
		tc.pb.Deletes[^i] = nil // dropped when the message is assembled
		tc.holes = true
	}
	tc.idx[string(key)] = len(tc.pb.Upserts)
	tc.pb.Upserts = append(tc.pb.Upserts, tuple)
	tc.pb.UpsertKeys = append(tc.pb.UpsertKeys, key)
	c.size += len(tuple) + len(key) + 8
}

// remove adds a delete (replacing an earlier change of the same key).
func (c *changes) remove(t *table, key []byte) {
	tc := c.table(t)
	if i, ok := tc.idx[string(key)]; ok {
		if i < 0 {
			return
		}
		tc.pb.Upserts[i], tc.pb.UpsertKeys[i] = nil, nil
		tc.holes = true
	}
	tc.idx[string(key)] = ^len(tc.pb.Deletes)
	tc.pb.Deletes = append(tc.pb.Deletes, key)
	c.size += len(key) + 4
}

// empty reports whether the message holds no table.
func (c *changes) empty() bool { return len(c.tables) == 0 }

// down assembles the Down message, tables in declaration order, then the
// wishes and the commands.
func (c *changes) down(s *Server, snapshot int64) (*syncpb.ToReplica, error) {
	d := &syncpb.Down{Snapshot: uint64(snapshot)}
	for _, t := range s.m.catalogs() {
		tc := c.tables[t]
		if tc == nil {
			continue
		}
		pb := tc.compact()
		if t == s.m.wishes {
			ws, err := s.wishesDown(pb)
			if err != nil {
				return nil, fmt.Errorf("magicsync/server: the wishes of a message: %w", err)
			}
			d.Wishes = ws
			continue
		}
		if t == s.m.commands {
			cs, err := s.commandsDown(pb)
			if err != nil {
				return nil, fmt.Errorf("magicsync/server: the commands of a message: %w", err)
			}
			d.Commands = cs
			continue
		}
		d.Tables = append(d.Tables, pb)
	}
	return &syncpb.ToReplica{Body: &syncpb.ToReplica_Down{Down: d}}, nil
}

// compact returns the table's part with the changes replaced by later
// ones of the same key left out.
func (tc *tableChanges) compact() *syncpb.TableChanges {
	pb := tc.pb
	if !tc.holes {
		return pb
	}
	var ups, keys, dels [][]byte
	for i, u := range pb.Upserts {
		if u != nil {
			ups, keys = append(ups, u), append(keys, pb.UpsertKeys[i])
		}
	}
	for _, k := range pb.Deletes {
		if k != nil {
			dels = append(dels, k)
		}
	}
	pb.Upserts, pb.UpsertKeys, pb.Deletes = ups, keys, dels
	return pb
}

// buildDelta builds the changes of the replica's groups' logs after its
// cursors, under the size bound.
func (s *Server) buildDelta(ctx context.Context, tx pgx.Tx, st *replicaState) (*built, error) {
	c := newChanges()
	b := &built{kind: "down"}
	budget := s.opts.MaxMessageBytes
	full := false
	moved := false
	for _, m := range st.memberships {
		if m.head <= m.sentPos || full {
			continue
		}
		pos := m.sentPos
		for pos < m.head && !full {
			to := min(m.head, pos+rangeSpan)
			r, err := s.rangeOf(ctx, tx, m.grp, pos, to)
			if err != nil {
				return nil, err
			}
			reached := to
			for i := range r.entries {
				e := &r.entries[i]
				need := len(e.key) + 8
				if e.tuple != nil {
					need += len(e.tuple) + len(e.key)
				}
				if c.size+need > budget && !c.empty() {
					full = true
					if i == 0 {
						reached = pos
					} else {
						reached = r.entries[i-1].pos
					}
					break
				}
				if e.tuple != nil && st.groupSet[e.grp] {
					c.upsert(e.tbl, e.key, e.tuple)
				} else {
					c.remove(e.tbl, e.key)
				}
			}
			pos = reached
		}
		if pos > m.sentPos {
			b.grps = append(b.grps, m.grp)
			b.poss = append(b.poss, pos)
			moved = true
		}
	}
	if !moved {
		return nil, nil
	}
	if !c.empty() {
		var err error
		if b.toRep, err = c.down(s, 0); err != nil {
			return nil, err
		}
	}
	return b, nil
}
