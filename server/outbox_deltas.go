package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/wire"
)

// outbox_deltas.go builds the deltas of many replicas in one transaction:
// when a change to a group's log wakes its members, their next messages are
// built together, each range of the log read once for all (rangeOf), and
// stored with a few statements and one commit for the whole batch.

// deltaOutcome is what a batch made of one replica's build: its message,
// or none (ok false: nothing to send), or alone when the replica's next
// message is no plain delta (a provisioning, a message queued already) and
// is built by build, in a transaction of its own.
type deltaOutcome struct {
	msg   Message
	ok    bool
	alone bool
	// groups are the replica's groups, to wait on when nothing was built.
	groups []int64
	// err fails this replica's call alone (idsWentBack).
	err error
}

// maxDeltaBatchBytes bounds the bodies one batch holds in memory; the
// replicas past it are built alone.
const maxDeltaBatchBytes = 32 << 20

// buildDeltas builds and stores, in one transaction, the next message of
// each replica whose next message is the changes of its groups' logs
// after its cursors (as build would, for each alone).
func (s *Server) buildDeltas(ctx context.Context, replicas []uuid.UUID) ([]deltaOutcome, error) {
	ids := make([][16]byte, 0, len(replicas))
	for _, r := range replicas {
		ids = append(ids, r)
	}
	slices.SortFunc(ids, func(a, b [16]byte) int { return bytes.Compare(a[:], b[:]) })
	ids = slices.Compact(ids)

	// The messages issued fill the memo (memo.go) as of before the
	// transaction: what is heard of them meanwhile is not lost.
	token := s.memo.token()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: building messages: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	states, err := s.lockForDeltas(ctx, tx, ids)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: building messages: %w", err)
	}
	var w deltaWrites
	built := make(map[uuid.UUID]deltaOutcome, len(states))
	var remember []memoFill
	// Replicas at the same cursors of the same groups get the same
	// message: it is built and encoded once, and each gets it under its
	// own id.
	same := map[string]*sharedDelta{}
	size := 0
	for _, st := range states {
		if size > maxDeltaBatchBytes {
			break // built alone
		}
		if err := s.idsWentBack(st.id, st.nextID); err != nil {
			built[st.id] = deltaOutcome{err: err}
			continue
		}
		key := cursorsKey(st.memberships)
		d := same[key]
		if d == nil {
			b, err := s.buildDelta(ctx, tx, st)
			if err != nil {
				return nil, fmt.Errorf("magicsync/server: building a message for %s: %w", st.id, err)
			}
			d = &sharedDelta{b: b, caughtUp: caughtUp(st.memberships, b)}
			if b != nil && b.toRep != nil {
				if d.body, err = wire.EncodeToReplicaShared(b.toRep); err != nil {
					return nil, fmt.Errorf("magicsync/server: encoding a message for %s: %w", st.id, err)
				}
			}
			same[key] = d
		}
		switch b := d.b; {
		case b == nil:
			built[st.id] = deltaOutcome{groups: st.groups()}
		case b.toRep == nil:
			// Positions moved over entries that carry nothing: no
			// message, the cursors move on.
			w.skip(st.id, b)
			built[st.id] = deltaOutcome{groups: st.groups()}
		default:
			body := d.body.Bytes(uint64(st.nextID))
			size += len(body)
			w.store(st.id, st.nextID, b, body)
			built[st.id] = deltaOutcome{msg: Message{ID: uint64(st.nextID), Body: body, kind: b.kind}, ok: true}
			if d.caughtUp {
				remember = append(remember, memoFill{st.id, memoEntry{issued: st.nextID, sum: sha256.Sum256(body),
					groups: st.groups(), token: token}})
			}
		}
	}
	if err := w.run(ctx, s, tx); err != nil {
		return nil, fmt.Errorf("magicsync/server: storing messages: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("magicsync/server: storing messages: %w", err)
	}
	for _, f := range remember {
		s.memo.put(f.replica, f.e)
	}
	outs := make([]deltaOutcome, len(replicas))
	for i, r := range replicas {
		out, ok := built[r]
		if !ok {
			out.alone = true
		}
		outs[i] = out
	}
	return outs, nil
}

// groups returns the groups the replica is a member of.
func (st *replicaState) groups() []int64 {
	out := make([]int64, len(st.memberships))
	for i, m := range st.memberships {
		out[i] = m.grp
	}
	return out
}

// sharedDelta is the message built for replicas at the same cursors.
type sharedDelta struct {
	b    *built // nil: nothing to send
	body wire.SharedToReplica
	// caughtUp: the message reaches the heads of all the replica's groups
	// (as this transaction read them).
	caughtUp bool
}

// memoFill is an entry of the memo to fill once a batch committed.
type memoFill struct {
	replica uuid.UUID
	e       memoEntry
}

// caughtUp reports whether b (nil: nothing built) brings cursors ms to
// their groups' heads.
func caughtUp(ms []membership, b *built) bool {
	for _, m := range ms {
		pos := m.sentPos
		if b != nil {
			if i := slices.Index(b.grps, m.grp); i >= 0 {
				pos = b.poss[i]
			}
		}
		if pos < m.head {
			return false
		}
	}
	return true
}

// cursorsKey names a replica's cursors: its groups and how far it was sent
// in each. Replicas with the same key get the same delta.
func cursorsKey(ms []membership) string {
	b := make([]byte, 0, len(ms)*16)
	for _, m := range ms {
		b = binary.BigEndian.AppendUint64(b, uint64(m.grp))
		b = binary.BigEndian.AppendUint64(b, uint64(m.sentPos))
	}
	return string(b)
}

// lockForDeltas locks the replicas' rows and returns, with its cursors,
// each of those whose next message is a delta: no provisioning due or
// under way, nothing queued in its outbox.
func (s *Server) lockForDeltas(ctx context.Context, tx pgx.Tx, ids [][16]byte) ([]*replicaState, error) {
	rows, err := tx.Query(ctx, s.sql.of(qLockForDeltas), ids)
	if err != nil {
		return nil, err
	}
	byID := map[uuid.UUID]*replicaState{}
	var states []*replicaState
	for rows.Next() {
		var id [16]byte
		var nextID int64
		var plain bool
		if err := rows.Scan(&id, &nextID, &plain); err != nil {
			rows.Close()
			return nil, err
		}
		if plain {
			st := &replicaState{id: id, nextID: nextID, groupSet: map[int64]bool{}}
			states = append(states, st)
			byID[id] = st
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if states, err = s.withoutQueued(ctx, tx, states); err != nil || len(states) == 0 {
		return nil, err
	}
	plainIDs := make([][16]byte, len(states))
	for i, st := range states {
		plainIDs[i] = st.id
	}
	rows, err = tx.Query(ctx, s.sql.of(qMembershipsOf), plainIDs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id [16]byte
		var m membership
		if err := rows.Scan(&id, &m.grp, &m.sentPos, &m.head); err != nil {
			return nil, err
		}
		st := byID[id]
		st.memberships = append(st.memberships, m)
		st.groupSet[m.grp] = true
	}
	return states, rows.Err()
}

// withoutQueued leaves out of states the replicas with a message queued
// in their outbox, read now that their rows are locked.
func (s *Server) withoutQueued(ctx context.Context, tx pgx.Tx, states []*replicaState) ([]*replicaState, error) {
	ids := make([][16]byte, len(states))
	for i, st := range states {
		ids[i] = st.id
	}
	rows, err := tx.Query(ctx, s.sql.of(qQueuedAmong), ids)
	if err != nil {
		return nil, err
	}
	queued := map[uuid.UUID]bool{}
	var id [16]byte
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		queued[id] = true
		return nil
	}); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(states, func(st *replicaState) bool { return queued[st.id] }), nil
}

// deltaWrites gathers a batch's writes, for a statement each.
type deltaWrites struct {
	// The messages stored: their replicas, ids, kinds and bodies, and the
	// cursors each moves, flattened (grps[lo[i]:hi[i]] for message i,
	// 1-based as SQL slices are).
	replicas   [][16]byte
	ids        []int64
	kinds      []string
	bodies     [][]byte
	lo, hi     []int32
	grps, poss []int64
	// The cursors moved over entries that carry nothing.
	skipReplicas [][16]byte
	skipGrps     []int64
	skipPoss     []int64
}

// store adds a message built.
func (w *deltaWrites) store(replica uuid.UUID, id int64, b *built, body []byte) {
	w.replicas = append(w.replicas, replica)
	w.ids = append(w.ids, id)
	w.kinds = append(w.kinds, b.kind)
	w.bodies = append(w.bodies, body)
	w.lo = append(w.lo, int32(len(w.grps)+1))
	w.grps = append(w.grps, b.grps...)
	w.poss = append(w.poss, b.poss...)
	w.hi = append(w.hi, int32(len(w.grps)))
}

// skip adds cursors moved without a message.
func (w *deltaWrites) skip(replica uuid.UUID, b *built) {
	for i, g := range b.grps {
		w.skipReplicas = append(w.skipReplicas, replica)
		w.skipGrps = append(w.skipGrps, g)
		w.skipPoss = append(w.skipPoss, b.poss[i])
	}
}

// run writes what was gathered: the messages stored, the cursors moved
// (sent_pos; acked_pos too where no message carries them), and each
// replica's next id.
func (w *deltaWrites) run(ctx context.Context, s *Server, tx pgx.Tx) error {
	if len(w.skipReplicas) > 0 {
		if _, err := tx.Exec(ctx, s.sql.of(qSkipPositionsMany), w.skipReplicas, w.skipGrps, w.skipPoss); err != nil {
			return err
		}
	}
	if len(w.replicas) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, s.sql.of(qStoreMessages),
		w.replicas, w.ids, w.kinds, w.bodies, w.lo, w.hi, w.grps, w.poss); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, s.sql.of(qMoveSentMany), w.replicas, w.lo, w.hi, w.grps, w.poss); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, s.sql.of(qRecordBuiltMany), w.replicas, w.ids,
		s.m.engine.wakeChannel(), issuedPayloads(s.nonce, w.replicas))
	return err
}
