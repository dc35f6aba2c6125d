// What a call of a lane's message came to (outcome): taken, refused for good
// (why: refusalOf), too large (gathered again with fewer rows: rowCap), or a
// retryable failure, after which the lane backs off (backoff, jitter) and
// shows its problem in Status (setProblem); and what a message taken
// (sent) or not taken (unsent) leaves in the engine's tables.

package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// refusalOf says why an uplink's error kept a message from the server; an
// unmarked error counts as the server out of reach.
func refusalOf(err error) Refusal {
	var se *SendError
	if !errors.As(err, &se) {
		return Unreachable
	}
	if !se.Retryable {
		return Rejected
	}
	if se.Refusal == Rejected {
		return Unreachable
	}
	return se.Refusal
}

func isRetryable(err error) bool { return refusalOf(err) != Rejected }

// outcome settles what a call of the lane's pending message came to: taken,
// refused for good (its record undone, what it carried set aside), or a
// retryable failure, after which it is kept, to go again as it is.
func (r *Replica) outcome(ctx context.Context, l *lane, sendErr error) (more bool, err error) {
	s := &l.send
	out := s.pending
	switch {
	case sendErr == nil:
		s.setPending(nil)
		if l.rows > 0 {
			// Grown back slowly: the server's limit rarely moves, and
			// every message found too large costs a round trip.
			if l.taken++; l.taken >= 8 {
				l.taken = 0
				if l.rows *= 2; l.rows >= r.settings.MaxRows {
					l.rows = 0
				}
			}
		}
		return r.sent(context.WithoutCancel(ctx), l, out)
	case refusalOf(sendErr) == TooLarge && out.rows+out.rejected+out.answers > 1:
		// Gathered again, in messages of half as many rows: the server
		// never filed one it found too large.
		s.setPending(nil)
		l.rows, l.taken = max(1, min(l.rowCap(r.settings.MaxRows), out.rows+out.rejected+out.answers)/2), 0
		if err := r.unsent(context.WithoutCancel(ctx), l, out, sendErr); err != nil {
			return false, errors.Join(sendErr, err)
		}
		return false, sendErr
	case refusalOf(sendErr) == TooLarge:
		// One row, or none, and still too large: the server's judgement of
		// the row itself, which waits in the backlog.
		s.setPending(nil)
		refused := Refuse(Rejected, fmt.Errorf("a row larger than the server accepts in one message: %w", sendErr))
		if err := r.unsent(context.WithoutCancel(ctx), l, out, refused); err != nil {
			return false, errors.Join(sendErr, err)
		}
		return false, refused
	case !isRetryable(sendErr):
		s.setPending(nil)
		if err := r.unsent(context.WithoutCancel(ctx), l, out, sendErr); err != nil {
			return false, errors.Join(sendErr, err)
		}
		return false, sendErr
	case ctx.Err() != nil:
		if err := r.stopLane(ctx, l); err != nil {
			return false, errors.Join(sendErr, err)
		}
	}
	return false, sendErr
}

// backoff is the jittered exponential wait after the n-th failure in a row.
func (r *Replica) backoff(n int) time.Duration {
	d := r.settings.BackoffMin
	for i := 1; i < n && d < r.settings.BackoffMax; i++ {
		d *= 2
	}
	return r.jitter(min(d, r.settings.BackoffMax))
}

// jitter returns a duration in [d/2, d].
func (r *Replica) jitter(d time.Duration) time.Duration {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	if d <= 1 {
		return d
	}
	return d/2 + time.Duration(r.rng.Int64N(int64(d/2)+1))
}

// rowCap is how many rows the lane's next message may carry.
func (l *lane) rowCap(maxRows int) int {
	if l.rows <= 0 || l.rows > maxRows {
		return maxRows
	}
	return l.rows
}

// laneProblem is why a lane cannot send, and since when.
type laneProblem struct {
	reason string
	since  time.Time
}

// setProblem records why the lane cannot send ("" once it can), keeping
// the time the trouble began.
func (l *lane) setProblem(reason string, now time.Time) {
	if reason == "" {
		l.problem.Store(nil)
		return
	}
	since := now
	if old := l.problem.Load(); old != nil {
		since = old.since
	}
	l.problem.Store(&laneProblem{reason: reason, since: since})
}

// sent records that the uplink took a message.
func (r *Replica) sent(ctx context.Context, l *lane, out *outgoing) (bool, error) {
	now := r.clock.Now().UnixMicro()
	q := markAppliedReported
	args := []any{out.applied}
	if out.digests {
		q += alsoDigestsAt
		args = append(args, now)
	}
	if out.tries == 1 && !out.givenUp {
		if err := r.writeEngine(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		}); err != nil {
			return false, err
		}
	} else if err := r.sentLate(ctx, l, out, now, q, args); err != nil {
		return false, err
	}
	r.log.Debug("magicsync/replica: sent", "lane", l.name, "seq", out.seq, "rows", out.rows, "rejected", out.rejected)
	return out.rows > 0, nil
}

// sentLate records that the uplink took a message at a later try, or late:
// what it carried counts as sent from now, so that ResendAfter does not
// send again rows whose confirmation could not come before.
func (r *Replica) sentLate(ctx context.Context, l *lane, out *outgoing, now int64, q string, args []any) error {
	return r.writeEngine(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		if out.rows > 0 {
			if _, err := tx.ExecContext(ctx, markSentAt, now, l.name, out.seq); err != nil {
				return err
			}
		}
		if l.name == "main" && out.rejected > 0 {
			if _, err := tx.ExecContext(ctx, markReportedAt, now, out.seq); err != nil {
				return err
			}
		}
		if l.name == "main" && out.answers > 0 {
			if _, err := tx.ExecContext(ctx, markAnswersSentAt, now, out.seq); err != nil {
				return err
			}
		}
		if l.name == "main" && out.commandAnswers > 0 {
			if _, err := tx.ExecContext(ctx, markCommandAnswersSentAt, now, out.seq); err != nil {
				return err
			}
		}
		return nil
	})
}

// unsent undoes the record of a message the uplink did not take: what it
// carried is due again, or, when it was refused for good, set aside until a
// different build starts — its rows in the backlog, its reports of rows
// the replica could not take alike; its digests count as sent, and are
// due again after DigestsEvery.
func (r *Replica) unsent(ctx context.Context, l *lane, out *outgoing, sendErr error) error {
	return r.writeEngine(ctx, func(tx *sql.Tx) error {
		// Reports go in the main lane only, numbered by its sequence.
		main := l.name == "main"
		if !isRetryable(sendErr) {
			reason := "the server refused the message: " + sendErr.Error()
			if _, err := tx.ExecContext(ctx, holdRefusedMessage,
				r.build, reason, l.name, out.seq); err != nil {
				return err
			}
			if main && out.rejected > 0 {
				if _, err := tx.ExecContext(ctx, holdRefusedReports, r.build, out.seq); err != nil {
					return err
				}
			}
			if main && out.answers > 0 {
				if _, err := tx.ExecContext(ctx, holdRefusedAnswers, r.build, out.seq); err != nil {
					return err
				}
			}
			if main && out.commandAnswers > 0 {
				if _, err := tx.ExecContext(ctx, holdRefusedCommandAnswers, r.build, out.seq); err != nil {
					return err
				}
			}
			if main && out.digests {
				if _, err := tx.ExecContext(ctx, markDigestsAt, r.clock.Now().UnixMicro()); err != nil {
					return err
				}
			}
		}
		if _, err := tx.ExecContext(ctx, unmarkSent,
			l.name, out.seq); err != nil {
			return err
		}
		if main {
			if _, err := tx.ExecContext(ctx, unmarkReported, out.seq); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, unmarkAnswers, out.seq); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, unmarkCommandAnswers, out.seq); err != nil {
				return err
			}
		}
		return nil
	})
}
