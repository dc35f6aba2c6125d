package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// outbox.go holds the outbox: what a replica is handed next (Next,
// Next), the building of its messages and of the deltas of its groups'
// logs, and the acknowledgement of what it applied (Ack).

// outbox is the state of handing messages out that lives beside the
// database: the cache of message ranges built for groups, the replicas
// whose next message Run builds ahead, and when each replica's poll was
// last recorded. The messages themselves are rows of sync_outbox.
type outbox struct {
	cache *rangeCache
	// ahead queues the replicas whose next message Run builds before it
	// is asked for.
	ahead chan uuid.UUID
	// polls is when each replica's last poll was recorded.
	polls pollMarks
	// acks batches the acknowledgements (Ack) of many replicas.
	acks batcher[ackReq, ackOutcome]
	// deltas batches the builds of many replicas' deltas (buildDeltas).
	deltas batcher[uuid.UUID, deltaOutcome]
	// seens batches the reads of many replicas' polls (seenBatch).
	seens batcher[seenReq, seenOutcome]
}

// Message is one message to a replica: its id (per replica, increasing,
// never reused) and its bytes, for the transport to carry as they are.
type Message struct {
	ID   uint64
	Body []byte
	// kind is the outbox's: "down", "part", "end" or "filed".
	kind string
}

// Sizes of the work units of building messages.
const (
	rangeSpan    = 4096 // log positions per cached range
	snapshotPage = 2000 // rows per page of a provisioning
	msgOverhead  = 256  // bytes kept for the envelope

	buildTimeout = time.Minute // bounds one build, whatever the caller's deadline
)

// Applied is what a replica says, as it asks for its next message, of the
// last message it applied.
type Applied struct {
	// ID is the id of the last message the replica applied (its last
	// applied); 0 says nothing.
	ID uint64
	// Sum, when set, is the SHA-256 of the bytes of that message, as the
	// replica received them (sha256.Sum256 of Message.Body): it tells the
	// message the server issued under ID from another it issued under the
	// same id after a restore. Nil says nothing.
	Sum []byte
}

// next is Endpoint.Next.
func (s *Server) next(ctx context.Context, replica uuid.UUID, applied Applied) (Message, bool, error) {
	if len(applied.Sum) != 0 && len(applied.Sum) != sha256.Size {
		return Message{}, false, fmt.Errorf("%w: the sum of the message applied has %d bytes, not %d", ErrPermanent, len(applied.Sum), sha256.Size)
	}
	// The statements run to their end even when the caller stops
	// waiting (a newer poll of the replica replaced this one, say):
	// cancelling one mid-flight closes its connection, and a replica
	// polling again and again would have the pool reconnect each time.
	// Only the wait for a message ends with ctx.
	var window *time.Duration
	if d, ok := ctx.Deadline(); ok {
		w := time.Until(d)
		window = &w
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.pollQueryTimeout)
	defer cancel()
	// token is when what state says was read (memo.go): a change heard
	// since, before the waiter below is registered, would wake nobody.
	token := s.memo.token()
	state, err := s.remembered(qctx, replica, applied, window, &token)
	if state == nil && err == nil {
		var p pollState
		p, err = s.seen(qctx, replica, window, applied.ID)
		// Most polls say what the server knows already: the last message
		// acknowledged, as the server issued it.
		state = &p.next
		if err == nil {
			var word idWord
			word, err = judgeID(replica, applied.ID, p.nextID, true)
			sumDiffers := len(applied.Sum) > 0 && p.issued != nil && !bytes.Equal(p.issued, applied.Sum)
			switch {
			case err != nil:
			case word == idAhead || word == idIssued && (sumDiffers || int64(applied.ID) > p.acked):
				err = s.reportApplied(qctx, replica, applied)
				state = nil // read again
			default:
				s.remember(replica, applied, p, token)
			}
		}
	}
	// A statement's failure is the database's, never the caller's leaving.
	if err != nil {
		return Message{}, false, err
	}
	// A ctx already ended still looks once: a caller that waits for
	// nothing (a poll of wait=0) gets a message already due.
	w := s.hub.register(replica)
	defer s.hub.unregister(w)
	woken := false
	if state != nil && !s.memo.still(replica, state.groups, token) {
		// Something changed for it since state was read, and woke no
		// waiter of it: look as a waiter woken does.
		state, woken = nil, true
	}
	for {
		msg, ok, groups, err := s.nextStep(ctx, replica, state, woken)
		state = nil
		if err != nil {
			return Message{}, false, err
		}
		if ctx.Err() != nil && !ok {
			return Message{}, false, nil
		}
		if ok {
			if msg.kind == "part" {
				// The replica applies one part of its provisioning: Run
				// builds the next meanwhile.
				s.askAhead(replica)
			}
			return msg, true, nil
		}
		s.hub.follow(w, groups)
		select {
		case <-w.ch:
			woken = true
		case <-ctx.Done():
			return Message{}, false, nil
		}
	}
}

// remembered returns the replica's next state from this process's memory
// (memo.go) when its word is exactly the last message this process issued
// it, as issued: nothing queued then but that message, which the word
// acknowledges (through the batch of acknowledgements, if no Ack did
// already), no provisioning, and its groups' logs, unless they grew since,
// at its cursors. It returns nil when the poll takes the full path: no
// entry trusted, another word, or the acknowledgement not taken. It sets
// token to the entry's: what changed since the entry's read began (a
// group's log grown) is what the caller must look at.
func (s *Server) remembered(ctx context.Context, replica uuid.UUID, applied Applied, window *time.Duration, token *uint64) (*nextState, error) {
	e, ok := s.memo.get(replica)
	if !ok || !e.matches(applied) {
		return nil, nil
	}
	if e.acked < e.issued {
		out, err := s.out.acks.do(ctx, s.batchContext, ackReq{replica: replica, id: applied.ID})
		if err != nil || out.alone || out.err != nil {
			// Refused (an id the database never issued: restored?), or
			// failed: the full path judges the word.
			s.memo.drop(replica)
			return nil, nil
		}
		s.memo.acked(replica, e.issued)
	}
	s.out.polls.note(replica, window)
	*token = e.token
	return &nextState{groups: e.groups}, nil
}

// remember fills the memo from a poll's read of a quiet replica: its word
// is the last message issued it, as issued and acknowledged, nothing is
// queued, no provisioning is due and its cursors are at its groups' heads.
func (s *Server) remember(replica uuid.UUID, applied Applied, p pollState, token uint64) {
	n := &p.next
	if applied.ID == 0 || len(applied.Sum) != sha256.Size || p.nextID != int64(applied.ID)+1 || p.acked < int64(applied.ID) ||
		!bytes.Equal(p.issued, applied.Sum) || n.provisioning || n.queued || n.filed || n.behind {
		return
	}
	e := memoEntry{issued: int64(applied.ID), acked: p.acked, groups: n.groups, token: token}
	copy(e.sum[:], applied.Sum)
	s.memo.put(replica, e)
}

// nextStep is one look of a waiting Next for the replica's next message:
// with state as seen, or, once woken, in a batch with the others woken
// (most wakes are changes to the replica's groups' logs: its delta is
// built without its state read first, and the batch tells when its next
// message is something else). Its statements run to their end, bounded by
// pollQueryTimeout from this step on, whether or not the caller waits.
func (s *Server) nextStep(ctx context.Context, replica uuid.UUID, state *nextState, woken bool) (Message, bool, []int64, error) {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.pollQueryTimeout)
	defer cancel()
	if !woken {
		return s.nextOnce(qctx, replica, state)
	}
	out, err := s.out.deltas.do(qctx, s.batchContext, replica)
	if err == nil {
		err = out.err
	}
	if err != nil {
		return Message{}, false, nil, err
	}
	if out.alone {
		return s.nextOnce(qctx, replica, nil)
	}
	return out.msg, out.ok, out.groups, nil
}

// pollQueryTimeout bounds the statements of one look of a poll, which
// run to their end whether or not the poll's caller still waits.
const pollQueryTimeout = 15 * time.Second

// reportApplied takes a replica's word of the last message it applied
// (Next), in a transaction of its own.
func (s *Server) reportApplied(ctx context.Context, replica uuid.UUID, applied Applied) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("magicsync/server: next: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	restored, err := s.acknowledge(ctx, tx, replica, applied.ID, applied.Sum, true)
	if err != nil {
		return err
	}
	if restored {
		if _, err := tx.Exec(ctx, qNotify, s.m.engine.wakeChannel(), "r:"+replica.String()); err != nil {
			return fmt.Errorf("magicsync/server: next: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("magicsync/server: next: %w", err)
	}
	// What this process knew of the replica is behind: the word moved its
	// acknowledgement, or its ids.
	s.memo.drop(replica)
	if restored {
		s.hub.wakeReplica(replica)
	}
	return nil
}

// pollState is what one poll reads of a replica: where its messages
// stand, and what its next message depends on (see nextOnce).
type pollState struct {
	nextID, acked int64
	// issued is the sum of the message the replica says it applied, as
	// the server issued it, if it keeps it.
	issued []byte
	next   nextState
}

// nextState is what a replica's next message depends on.
type nextState struct {
	provisioning bool    // a provisioning is due or under way
	queued       bool    // a message other than a Filed waits in the outbox
	filed        bool    // a Filed waits in the outbox
	behind       bool    // some of its groups' logs went past its cursors
	groups       []int64 // its groups, to wait on
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

// nextOnce returns the oldest unacknowledged message, or builds the next
// one; when there is none it returns the replica's groups, to wait on.
//
// Confirmations of uploads (Filed) queued do not hold back the build of
// what the replica lacks: with only those in the outbox, the next message
// is built behind them (under the next id), and the oldest is returned. A
// lane's confirmations merge into one while queued (queueFiled), and one
// queued after the build goes after it: a catalog change waits for at
// most one confirmation per lane, however fast uploads come.
func (s *Server) nextOnce(ctx context.Context, replica uuid.UUID, state *nextState) (Message, bool, []int64, error) {
	if state == nil {
		state = &nextState{}
		err := s.pool.QueryRow(ctx, s.sql.of(qNextState), [16]byte(replica)).
			Scan(&state.provisioning, &state.queued, &state.filed, &state.groups, &state.behind)
		if errors.Is(err, pgx.ErrNoRows) {
			return Message{}, false, nil, fmt.Errorf("%w %s", ErrUnknownReplica, replica)
		}
		if err != nil {
			return Message{}, false, nil, fmt.Errorf("magicsync/server: next: %w", err)
		}
	}
	st := *state
	if st.queued || st.filed && !st.provisioning && !st.behind {
		msg, ok, err := s.oldest(ctx, s.pool, replica)
		if err != nil || ok {
			return msg, ok, nil, err
		}
	}
	if !st.provisioning && !st.behind {
		return Message{}, false, st.groups, nil
	}
	if !st.provisioning && !st.filed {
		// The common case at fleet scale: the changes of its groups' logs,
		// built with those of the other replicas asking now.
		out, err := s.out.deltas.do(ctx, s.batchContext, replica)
		if err == nil {
			err = out.err
		}
		if err != nil {
			return Message{}, false, nil, err
		}
		if !out.alone {
			return out.msg, out.ok, out.groups, nil
		}
	}
	// A build once begun is finished even if the caller stops waiting: its
	// message waits in the outbox for the next call.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), buildTimeout)
	defer cancel()
	msg, ok, err := s.build(bctx, replica, false)
	return msg, ok, st.groups, err
}

// idsWentBack is the last guard of the memo (memo.go): a replica's next
// id, read under its row's lock, at or below the last this process issued
// it means the database went back (restored from an older backup without
// the listener noticing). Everything remembered is forgotten and the call
// fails: the replica asks again, and its word is judged against the
// database.
func (s *Server) idsWentBack(replica uuid.UUID, nextID int64) error {
	if h := s.memo.issuedHere(replica); h != 0 && nextID <= h {
		s.memo.forgetAll()
		s.creds.clear()
		s.hub.wakeAll()
		return fmt.Errorf("magicsync/server: replica %s: its next id in the database is %d, yet this process issued it %d: was the database restored? reading its state again", replica, nextID, h)
	}
	return nil
}

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

// oldest returns the replica's oldest message queued, if any.
func (s *Server) oldest(ctx context.Context, q querier, replica uuid.UUID) (Message, bool, error) {
	var m Message
	var id int64
	err := q.QueryRow(ctx, s.sql.of(qOldest), [16]byte(replica)).Scan(&id, &m.Body, &m.kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return Message{}, false, nil
	}
	if err != nil {
		return Message{}, false, fmt.Errorf("magicsync/server: reading the outbox: %w", err)
	}
	m.ID = uint64(id)
	return m, true, nil
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
// wishes.
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

// rangeOf returns the entries of a group's log in (from, to], built once
// for every member at the same position.
func (s *Server) rangeOf(ctx context.Context, q querier, grp, from, to int64) (*builtRange, error) {
	k := rangeKey{grp, from, to}
	if r := s.out.cache.get(k); r != nil {
		return r, nil
	}
	gen := s.out.cache.generation(grp)
	rows, err := q.Query(ctx, s.sql.of(qLogRange), grp, from, to)
	if err != nil {
		return nil, fmt.Errorf("reading the log of group %d: %w", grp, err)
	}
	r := &builtRange{key: k, gen: gen}
	byTable := map[*table][][]byte{}
	for rows.Next() {
		var tbl string
		var key []byte
		var pos int64
		if err := rows.Scan(&tbl, &key, &pos); err != nil {
			rows.Close()
			return nil, err
		}
		t := s.m.byName[tbl]
		if t == nil || !t.catalog {
			continue
		}
		r.entries = append(r.entries, entry{tbl: t, key: key, pos: pos})
		byTable[t] = append(byTable[t], key)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	now := map[*table]map[string]current{}
	for t, keys := range byTable {
		cur, err := s.plannedRows(ctx, q, t, keys)
		if err != nil {
			return nil, err
		}
		now[t] = cur
	}
	for i := range r.entries {
		e := &r.entries[i]
		if c, ok := now[e.tbl][string(e.key)]; ok {
			e.tuple, e.grp = c.tuple, c.grp
		}
		r.size += len(e.key) + len(e.tuple) + 64
	}
	s.out.cache.put(r)
	return r, nil
}
