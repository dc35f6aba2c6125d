// A lane's loop, the top of the upward path: Run starts one goroutine a
// lane; each turn gathers the lane's next message (gather.go), sends it
// (send.go) and settles what the call came to (outcome.go), then waits for a
// nudge, the idle timer or its backoff. At start it sends again what an
// earlier process never saw confirmed (resendUnconfirmed); at the end it
// waits for the send in flight (stopLane).

package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Run sends up what the replica has to say — the rows written since, the
// rows it could not take, the last message applied, its fingerprints, the
// answers to wishes — one goroutine per lane, until ctx ends; and it
// offers the server's wishes to their handlers (see Settings.Wishes). It
// then waits for the sends in flight to finish, giving up on one still
// running after SendTimeout (whether or not its uplink honours its
// context), and for the wish handlers under way, whose context ends with
// ctx, recording what they answer — giving up on one still running after
// WishesTimeout — and returns nil. It never waits for a call given up on
// before: such a call is the lane's, and the lane's next Run waits for it
// before it sends.
func (r *Replica) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, l := range r.lanes {
		wg.Go(func() { r.runLane(ctx, l) })
	}
	if len(r.offers.handlers) > 0 {
		wg.Go(func() { r.runWishes(ctx) })
	}
	wg.Go(func() { r.runCommands(ctx) })
	wg.Wait()
	return nil
}

// runLane is one lane's loop: send while there is something to send, wait
// for a nudge or the idle timer when there is not, and back off alone after
// a failure.
func (r *Replica) runLane(ctx context.Context, l *lane) {
	defer r.stopLane(ctx, l)
	failures := 0
	for ctx.Err() == nil {
		more, err := r.sendOnce(ctx, l)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			failures = 0
			l.setProblem("", time.Time{})
			if more {
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-l.nudge:
			case <-r.clock.After(r.settings.Idle):
			}
			continue
		}
		failures++
		wait := r.backoff(failures)
		switch refusalOf(err) {
		case Unreachable:
			// Said once per outage; every retry after it is detail.
			level := slog.LevelDebug
			if failures == 1 {
				level = slog.LevelWarn
			}
			r.log.Log(ctx, level, "magicsync/replica: send failed; retrying with backoff", "lane", l.name, "failures", failures, "wait", wait, "err", err)
		case TooLarge:
			// The message is gathered again, smaller, at once.
			r.log.Warn("magicsync/replica: the server found the message too large; sending its rows in smaller messages", "lane", l.name, "rows", l.rowCap(r.settings.MaxRows), "err", err)
			continue
		case Misconfigured:
			// Loud at every try: nothing goes up until someone mends it.
			l.setProblem(err.Error(), r.clock.Now())
			r.log.Warn("magicsync/replica: the server refuses this replica; its rows stay queued until the configuration is mended", "lane", l.name, "failures", failures, "wait", wait, "err", err)
		case OlderServer:
			wait = r.jitter(10 * r.settings.BackoffMax)
			l.setProblem(err.Error(), r.clock.Now())
			r.log.Warn("magicsync/replica: the server speaks an older protocol; the rows stay queued until it is upgraded", "lane", l.name, "wait", wait, "err", err)
		default:
			// Refused for good: what the message carried is set aside, and
			// the lane backs off all the same. What is left to say — the
			// last message applied — goes again after the wait: a refusal
			// of every message must not become a loop.
			r.log.Error("magicsync/replica: the server refused a message for good; its rows wait in the backlog", "lane", l.name, "failures", failures, "wait", wait, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(wait):
		}
	}
}

// laneSend is what a lane's sending keeps from one turn to the next. Only
// the lane's own goroutine uses it.
//
// A message the uplink did not take may still reach the server: a call
// that failed or ran out of time may have delivered it, or may deliver
// it later. So the lane sends it again as it is — its sequence, its bytes,
// which the server takes for a repeat when it filed it already — until
// the uplink takes it or refuses it for good, and only then gathers its
// next message: a later message can never reach the server before an
// earlier one it might undo (a delete of a row written again since). What
// was written after the message was gathered waits for the next one.
type laneSend struct {
	// pending is the message gathered and recorded as sent that the
	// uplink has not taken yet; unsentSeq is its sequence (0: none), for
	// Status, which counts its rows as not sent.
	pending   *outgoing
	unsentSeq atomic.Uint64
	// abandoned, while not nil, delivers what the lane's call given up on
	// after SendTimeout returns at last; the lane starts no other call
	// before, so that at most one call per lane is ever left behind.
	abandoned <-chan error
	// waiting, set by tests, runs when the lane waits for a call given up
	// on.
	waiting func()
}

func (s *laneSend) setPending(out *outgoing) {
	s.pending = out
	var seq uint64
	if out != nil {
		seq = out.seq
	}
	s.unsentSeq.Store(seq)
}

// sendOnce sends the lane's message the uplink has not taken yet, or else
// gathers, records and sends the next one. more is true when the uplink
// took a message carrying rows, so there may be more to send at once.
func (r *Replica) sendOnce(ctx context.Context, l *lane) (more bool, err error) {
	s := &l.send
	if s.abandoned != nil {
		// A call given up on: nothing else goes until it returned. What it
		// returns is the outcome of the message; after a retryable failure
		// the message goes again now (the lane backed off when it gave
		// the call up).
		if s.waiting != nil {
			s.waiting()
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case lateErr := <-s.abandoned:
			s.abandoned = nil
			r.log.Info("magicsync/replica: a send given up on returned at last", "lane", l.name, "seq", s.pending.seq, "err", lateErr)
			if lateErr == nil || !isRetryable(lateErr) || ctx.Err() != nil {
				return r.outcome(ctx, l, lateErr)
			}
		}
	}
	if s.pending == nil {
		id, known, err := r.whoAmI(ctx)
		if err != nil || !known {
			return false, err
		}
		out, err := r.gather(ctx, l, id)
		if err != nil || out == nil {
			return false, err
		}
		if out.body == nil {
			// Rows were set aside and nothing else was due: look again.
			return true, nil
		}
		out.replica = id
		s.setPending(out)
	}
	sendErr := r.send(ctx, l, s.pending)
	if errors.Is(sendErr, context.DeadlineExceeded) {
		sendErr = TransportError(true, fmt.Errorf("no answer within %v: %w", r.settings.SendTimeout, sendErr))
	}
	return r.outcome(ctx, l, sendErr)
}

// stopLane lets go of the lane's pending message when the lane stops: its
// record is undone, so that its rows go at once when the lane starts
// again, in a message gathered anew — unless a call given up on may still
// deliver it, and then it is kept (its rows wait as unconfirmed, until
// ResendAfter for another Replica over the database; the lane's next Run
// waits for the call, and sends the message again if need be).
func (r *Replica) stopLane(ctx context.Context, l *lane) error {
	s := &l.send
	if s.pending == nil || s.abandoned != nil {
		return nil
	}
	out := s.pending
	s.setPending(nil)
	err := r.unsent(context.WithoutCancel(ctx), l, out, TransportError(true, errors.New("the lane stopped")))
	if err != nil {
		r.log.Error("magicsync/replica: a stopped lane could not undo the record of a message the uplink did not take; its rows go again after ResendAfter", "lane", l.name, "seq", out.seq, "err", err)
	}
	return err
}

// resendUnconfirmed makes what an earlier process recorded as sent, and
// never saw confirmed, due at once rather than after ResendAfter: that
// process may have been killed before its message reached the server. A
// copy that did reach it is filed as a repeat.
func (r *Replica) resendUnconfirmed(ctx context.Context) error {
	return r.writeEngine(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, resendUnconfirmedRows, int64(math.MinInt64), int64(math.MinInt64))
		if err != nil {
			return fmt.Errorf("magicsync/replica: sending again what was never confirmed: %w", err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			r.log.Info("magicsync/replica: rows sent before and never confirmed go again at once", "rows", n)
		}
		if _, err := tx.ExecContext(ctx, reportUnconfirmedAgain, int64(math.MinInt64), int64(math.MinInt64)); err != nil {
			return fmt.Errorf("magicsync/replica: reporting again what was never confirmed: %w", err)
		}
		if _, err := tx.ExecContext(ctx, answersUnconfirmedAgain, int64(math.MinInt64), int64(math.MinInt64)); err != nil {
			return fmt.Errorf("magicsync/replica: answering again what was never confirmed: %w", err)
		}
		if _, err := tx.ExecContext(ctx, commandAnswersUnconfirmedAgain, int64(math.MinInt64), int64(math.MinInt64)); err != nil {
			return fmt.Errorf("magicsync/replica: answering again what was never confirmed: %w", err)
		}
		return nil
	})
}

// Nudge asks every lane to send what it has now, rather than on the loop's
// next turn.
func (r *Replica) Nudge() {
	for _, l := range r.lanes {
		l.poke()
	}
}

func (l *lane) poke() {
	select {
	case l.nudge <- struct{}{}:
	default:
	}
}
