package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// outbox.go holds the outbox's front: what a replica is handed next (Next),
// read from the poll's word (outbox_seen.go), built when none waits
// (outbox_build.go, outbox_deltas.go), in batches (outbox_batch.go), from
// cached ranges of the groups' logs (outbox_cache.go), woken when something
// new is there (outbox_wake.go), and acknowledged (outbox_ack.go).

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
	// lingered is when each replica was last handed a message of changes
	// (Options.Linger).
	lingered lingerMarks
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
	// changed says the look is for changes in its groups' logs, which
	// may linger (Options.Linger).
	woken, changed := false, false
	if state != nil && !s.memo.still(replica, state.groups, token) {
		// Something changed for it since state was read, and woke no
		// waiter of it: look as a waiter woken does.
		state, woken, changed = nil, true, true
	}
	for {
		s.lingerBeforeDelta(ctx, replica, state, changed)
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
			s.handedDelta(replica, msg)
			return msg, true, nil
		}
		s.hub.follow(w, groups)
		select {
		case <-w.ch:
			woken, changed = true, !s.hub.tookOwn(w)
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

// nextState is what a replica's next message depends on.
type nextState struct {
	provisioning bool    // a provisioning is due or under way
	queued       bool    // a message other than a Filed waits in the outbox
	filed        bool    // a Filed waits in the outbox
	behind       bool    // some of its groups' logs went past its cursors
	groups       []int64 // its groups, to wait on
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
