package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// outbox_seen.go records what a poll says — the replica was seen, and the
// last message it applied — in batches with the other polls that arrive
// meanwhile, and reads back the replica's window and state for Next.

// pollState is what one poll reads of a replica: where its messages
// stand, and what its next message depends on (see nextOnce).
type pollState struct {
	nextID, acked int64
	// issued is the sum of the message the replica says it applied, as
	// the server issued it, if it keeps it.
	issued []byte
	next   nextState
}

// seenReq is one poll's read waiting for its batch; seenOutcome what the
// batch read, or alone when the engine does not know the replica (yet).
type seenReq struct {
	replica uuid.UUID
	applied int64
}

type seenOutcome struct {
	p     pollState
	alone bool
}

// seenBatch reads the polls of a batch in one statement (qPollMany).
func (s *Server) seenBatch(ctx context.Context, reqs []seenReq) ([]seenOutcome, error) {
	ids := make([][16]byte, len(reqs))
	applied := make([]int64, len(reqs))
	for i, r := range reqs {
		ids[i], applied[i] = r.replica, r.applied
	}
	rows, err := s.pool.Query(ctx, s.sql.of(qPollMany), ids, applied)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: %w", err)
	}
	defer rows.Close()
	// A replica polling twice in one batch (a poll replaced by its
	// next) has a row for each word.
	read := make(map[seenReq]pollState, len(reqs))
	for rows.Next() {
		var r seenReq
		var p pollState
		n := &p.next
		if err := rows.Scan(&r.replica, &r.applied, &p.nextID, &p.acked, &p.issued, &n.provisioning, &n.queued, &n.filed, &n.groups, &n.behind); err != nil {
			return nil, fmt.Errorf("magicsync/server: %w", err)
		}
		read[r] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("magicsync/server: %w", err)
	}
	outs := make([]seenOutcome, len(reqs))
	for i, r := range reqs {
		p, ok := read[r]
		outs[i] = seenOutcome{p: p, alone: !ok}
	}
	return outs, nil
}

// seen reads, in one statement, where a replica's messages stand and what
// its next message depends on, adopting the replica when the replicas
// table has it and the engine does not yet; and it notes the poll (and,
// with window, how long the replica waits), for recordPolls to write.
func (s *Server) seen(ctx context.Context, replica uuid.UUID, window *time.Duration, applied uint64) (pollState, error) {
	out, err := s.out.seens.do(ctx, s.batchContext, seenReq{replica: replica, applied: int64(min(applied, math.MaxInt64))})
	if err != nil {
		return pollState{}, err
	}
	if out.alone {
		if err := s.ensureReplica(ctx, s.pool, replica); err != nil {
			return pollState{}, err
		}
		return s.seenAlone(ctx, replica, window, applied)
	}
	s.out.polls.note(replica, window)
	return out.p, nil
}

// seenAlone is seen in a statement of its own, for a replica just
// adopted.
func (s *Server) seenAlone(ctx context.Context, replica uuid.UUID, window *time.Duration, applied uint64) (pollState, error) {
	var p pollState
	n := &p.next
	err := s.pool.QueryRow(ctx, s.sql.of(qPoll), [16]byte(replica), int64(min(applied, math.MaxInt64))).
		Scan(&p.nextID, &p.acked, &p.issued, &n.provisioning, &n.queued, &n.filed, &n.groups, &n.behind)
	if errors.Is(err, pgx.ErrNoRows) {
		return pollState{}, fmt.Errorf("magicsync/server: replica %s: %w", replica, ErrUnknownReplica)
	}
	if err != nil {
		return pollState{}, fmt.Errorf("magicsync/server: %w", err)
	}
	s.out.polls.note(replica, window)
	return p, nil
}

// ensureReplica adopts a replica of the replicas table the engine does not
// know yet, or says it is unknown.
func (s *Server) ensureReplica(ctx context.Context, q querier, replica uuid.UUID) error {
	rt := s.m.replicas
	var known bool
	err := q.QueryRow(ctx, s.sql.onReplicas(qAdoptReplicaFmt, rt), replica).Scan(&known)
	if err != nil {
		return fmt.Errorf("magicsync/server: looking up replica %s: %w", replica, err)
	}
	if !known {
		// A concurrent adoption (a pass) wins the insert; a new statement
		// sees it.
		if err := q.QueryRow(ctx, s.sql.of(qReplicaKnown), replica).Scan(&known); err != nil {
			return fmt.Errorf("magicsync/server: looking up replica %s: %w", replica, err)
		}
	}
	if !known {
		return fmt.Errorf("%w %s: no row of %s has it", ErrUnknownReplica, replica, rt.qname())
	}
	return nil
}
