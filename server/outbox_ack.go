package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// outbox_ack.go holds the acknowledgements: a replica's word that it applied
// the messages up to an id, taken alone (acknowledge) or, for Ack, in a batch
// with the other replicas' that arrive meanwhile (ackBatch).

// ack is Endpoint.Ack.
func (s *Server) ack(ctx context.Context, replica uuid.UUID, id uint64) error {
	if id == 0 {
		return fmt.Errorf("%w: message 0 to replica %s (ids start at 1)", ErrNotIssued, replica)
	}
	out, err := s.out.acks.do(ctx, s.batchContext, ackReq{replica: replica, id: id})
	if err != nil {
		return err
	}
	if !out.alone {
		if out.err == nil {
			s.memo.acked(replica, int64(id))
		}
		return out.err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("magicsync/server: ack: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := s.acknowledge(ctx, tx, replica, id, nil, false); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("magicsync/server: ack: %w", err)
	}
	s.memo.acked(replica, int64(id))
	return nil
}

// batchContext is the context a batch of calls runs under: none of its
// callers', so that one leaving fails nobody else's call.
func (s *Server) batchContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), buildTimeout)
}

// ackReq is one acknowledgement waiting for its batch.
type ackReq struct {
	replica uuid.UUID
	id      uint64
}

// ackOutcome is what a batch made of one acknowledgement: its error (a
// refusal), or alone when it is to be taken in a transaction of its own
// (a replica the engine has yet to adopt).
type ackOutcome struct {
	err   error
	alone bool
}

// Sizes of the batches of calls.
const (
	maxAckBatch     = 512 // acknowledgements per transaction
	maxAckRunning   = 2   // transactions of acknowledgements at once
	maxDeltaBatch   = 256 // builds of deltas per transaction
	maxDeltaRunning = 2   // transactions of builds at once
	maxSeenBatch    = 512 // polls' reads per statement
	maxSeenRunning  = 2   // statements of polls' reads at once
)

// ackBatch takes a batch of acknowledgements in one transaction: the same
// checks and effects as acknowledge, for every replica of the batch at
// once. Several acknowledgements of one replica take the highest it
// issued; each of the others is refused alone.
func (s *Server) ackBatch(ctx context.Context, reqs []ackReq) ([]ackOutcome, error) {
	outs := make([]ackOutcome, len(reqs))
	ids := make([][16]byte, 0, len(reqs))
	for _, r := range reqs {
		ids = append(ids, r.replica)
	}
	slices.SortFunc(ids, func(a, b [16]byte) int { return bytes.Compare(a[:], b[:]) })
	ids = slices.Compact(ids)

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: ack: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	type standing struct{ nextID, acked, to int64 }
	at := make(map[uuid.UUID]*standing, len(ids))
	rows, err := tx.Query(ctx, s.sql.of(qLockManyForAck), ids)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: ack: %w", err)
	}
	for rows.Next() {
		var id [16]byte
		st := &standing{}
		if err := rows.Scan(&id, &st.nextID, &st.acked); err != nil {
			rows.Close()
			return nil, fmt.Errorf("magicsync/server: ack: %w", err)
		}
		st.to = st.acked
		at[id] = st
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("magicsync/server: ack: %w", err)
	}
	for i, r := range reqs {
		st := at[r.replica]
		if st == nil {
			outs[i].alone = true
			continue
		}
		if _, err := judgeID(r.replica, r.id, st.nextID, false); err != nil {
			outs[i].err = err
			continue
		}
		st.to = max(st.to, int64(r.id))
	}
	var moving [][16]byte
	var upto []int64
	for id, st := range at {
		if st.to > st.acked {
			moving, upto = append(moving, id), append(upto, st.to)
		}
	}
	if len(moving) == 0 {
		return outs, nil
	}
	if err := s.takeAckedBatch(ctx, tx, moving, upto); err != nil {
		return nil, fmt.Errorf("magicsync/server: ack: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("magicsync/server: ack: %w", err)
	}
	return outs, nil
}

// takeAckedBatch moves each replica's acknowledgement up to its id in
// upto: the messages up to it go, the cursors they carried move, and so
// does what the replica is known to have applied.
func (s *Server) takeAckedBatch(ctx context.Context, tx pgx.Tx, replicas [][16]byte, upto []int64) error {
	rows, err := tx.Query(ctx, s.sql.of(qTakeAckedMany), replicas, upto)
	if err != nil {
		return err
	}
	msgs := map[uuid.UUID][]ackedMsg{}
	var ended []uuid.UUID
	var posReplicas [][16]byte
	var posGroups, posAt []int64
	pos := map[uuid.UUID]map[int64]int64{}
	for rows.Next() {
		var replica [16]byte
		var a ackedMsg
		var kind string
		if err := rows.Scan(&replica, &a.id, &kind, &a.grps, &a.poss); err != nil {
			rows.Close()
			return err
		}
		if kind == "end" {
			ended = append(ended, replica)
		}
		if len(a.grps) == 0 {
			continue
		}
		msgs[replica] = append(msgs[replica], a)
		p := pos[replica]
		if p == nil {
			p = map[int64]int64{}
			pos[replica] = p
		}
		for i, g := range a.grps {
			p[g] = max(p[g], a.poss[i])
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(msgs) > 0 {
		if err := s.clearRejectedMany(ctx, tx, msgs); err != nil {
			return err
		}
	}
	for replica, p := range pos {
		for g, at := range p {
			posReplicas, posGroups, posAt = append(posReplicas, replica), append(posGroups, g), append(posAt, at)
		}
	}
	if len(posReplicas) > 0 {
		if _, err := tx.Exec(ctx, s.sql.of(qMoveAckedMany), posReplicas, posGroups, posAt); err != nil {
			return err
		}
	}
	// Recording the acknowledgements forgets, in the same statement, the
	// sums of the messages below them (qForgetIssuedBelowMany).
	if _, err := tx.Exec(ctx, s.sql.of(qRecordAckedMany), replicas, upto); err != nil {
		return err
	}
	for _, replica := range ended {
		if _, err := tx.Exec(ctx, s.sql.of(qEndProvisioning), replica); err != nil {
			return err
		}
		if err := s.provisionedEvent(ctx, tx, replica); err != nil {
			return err
		}
	}
	return nil
}

// clearRejectedMany clears, for each replica of msgs, the rows it could
// not take that the acknowledged messages brought again (clearRejected),
// asking first, in one statement, which replicas have any.
func (s *Server) clearRejectedMany(ctx context.Context, tx pgx.Tx, msgs map[uuid.UUID][]ackedMsg) error {
	ids := make([][16]byte, 0, len(msgs))
	for id := range msgs {
		ids = append(ids, id)
	}
	rows, err := tx.Query(ctx, s.sql.of(qRejectedByMessageAmong), ids)
	if err != nil {
		return err
	}
	some, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (uuid.UUID, error) {
		var id [16]byte
		err := r.Scan(&id)
		return id, err
	})
	if err != nil {
		return err
	}
	for _, replica := range some {
		if err := s.clearRejected(ctx, tx, replica, msgs[replica]); err != nil {
			return err
		}
	}
	return nil
}

// ackTx takes, in tx, the replica's own report of the last message it
// applied (Up.LastApplied), locking the replica's row: see Next.
func (s *Server) ackTx(ctx context.Context, tx pgx.Tx, replica uuid.UUID, id uint64) error {
	_, err := s.acknowledge(ctx, tx, replica, id, nil, true)
	return err
}

// acknowledge acknowledges up to id in tx, locking the replica's row. With
// report, id is the replica's word of the last message it applied (and sum,
// when set, the SHA-256 of that message): an id the server never issued, or
// a message other than the one it holds under id, shows the server restored
// from an older backup, and the replica is provisioned again (restored is
// then true). Without report, id is an acknowledgement, and one of an id
// never issued is refused.
func (s *Server) acknowledge(ctx context.Context, tx pgx.Tx, replica uuid.UUID, id uint64, sum []byte, report bool) (restored bool, err error) {
	var nextID, acked int64
	err = tx.QueryRow(ctx, s.sql.of(qLockForAck), replica).Scan(&nextID, &acked)
	if errors.Is(err, pgx.ErrNoRows) {
		if err := s.ensureReplica(ctx, tx, replica); err != nil {
			return false, err
		}
		return s.acknowledge(ctx, tx, replica, id, sum, report)
	}
	if err != nil {
		return false, fmt.Errorf("magicsync/server: ack: %w", err)
	}
	switch word, err := judgeID(replica, id, nextID, report); {
	case err != nil:
		return false, err
	case word == idNone:
		return false, nil
	case word == idAhead:
		reason := fmt.Sprintf("the replica applied message %d, but the server issued only up to %d: was the server restored from an older backup?", id, nextID-1)
		return true, s.reissued(ctx, tx, replica, id, nextID, reason)
	}
	if len(sum) > 0 {
		// What the server issued under id, kept until a later message is
		// acknowledged (sync_issued), even if the message went since
		// (merged into a later one), and even if an acknowledgement or an
		// Up.LastApplied without a sum took id already — as it would from
		// a replica that applied another message under it.
		var issued []byte
		err := tx.QueryRow(ctx, s.sql.of(qIssuedSum), replica, int64(id)).Scan(&issued)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return false, fmt.Errorf("magicsync/server: ack: %w", err)
		case !bytes.Equal(issued, sum):
			reason := fmt.Sprintf("the replica applied another message %d than the server issued under that id: was the server restored from an older backup?", id)
			return true, s.reissued(ctx, tx, replica, id, nextID, reason)
		}
	}
	if int64(id) <= acked {
		return false, nil
	}
	// The sum of the message acknowledged stays, for the replica's next
	// word of what it applied to be compared with.
	if _, err := tx.Exec(ctx, s.sql.of(qForgetIssuedBelow), replica, int64(id)); err != nil {
		return false, fmt.Errorf("magicsync/server: ack: %w", err)
	}
	if err := s.takeAcked(ctx, tx, replica, id); err != nil {
		return false, err
	}
	return false, nil
}

// takeAcked takes the replica's messages up to id as acknowledged: they
// leave the outbox, its cursors move to the positions they brought it,
// the rows it could not take of them are forgotten when it holds them
// now, its acknowledged id moves on, and a provisioning they ended ends.
func (s *Server) takeAcked(ctx context.Context, tx pgx.Tx, replica uuid.UUID, id uint64) error {
	rows, err := tx.Query(ctx, s.sql.of(qTakeAcked), replica, int64(id))
	if err != nil {
		return fmt.Errorf("magicsync/server: ack: %w", err)
	}
	var msgs []ackedMsg
	pos := map[int64]int64{}
	ended := false
	for rows.Next() {
		var a ackedMsg
		var kind string
		if err := rows.Scan(&a.id, &kind, &a.grps, &a.poss); err != nil {
			rows.Close()
			return err
		}
		ended = ended || kind == "end"
		for i, g := range a.grps {
			pos[g] = max(pos[g], a.poss[i])
		}
		if len(a.grps) > 0 {
			msgs = append(msgs, a)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(msgs) > 0 {
		if err := s.clearRejected(ctx, tx, replica, msgs); err != nil {
			return err
		}
	}
	if len(pos) > 0 {
		grps := make([]int64, 0, len(pos))
		poss := make([]int64, 0, len(pos))
		for g, p := range pos {
			grps, poss = append(grps, g), append(poss, p)
		}
		if _, err := tx.Exec(ctx, s.sql.of(qMoveAcked), replica, grps, poss); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, s.sql.of(qRecordAcked), replica, int64(id)); err != nil {
		return err
	}
	if ended {
		// What the replica could not take of what it held before goes:
		// the snapshot replaced it. What it could not take of this
		// snapshot (from its first message on) stays. Its reports of own
		// rows it could not read, made before, go too: at the end of the
		// snapshot it reads all its own rows again and reports those it
		// still cannot read, naming a message of this snapshot.
		if _, err := tx.Exec(ctx, s.sql.of(qEndProvisioning),
			replica); err != nil {
			return err
		}
		if err := s.provisionedEvent(ctx, tx, replica); err != nil {
			return err
		}
	}
	return nil
}
