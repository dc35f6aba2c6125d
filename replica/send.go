// Sending one message: handed to the uplink under SendTimeout (send), and
// what a message taken (sent) or not taken (unsent) leaves in the engine's
// tables.

package replica

import (
	"context"
	"database/sql"
	"time"
)

// send hands one message to the uplink, under a context that ends after
// SendTimeout (but not with ctx: Run finishes the send in flight). It
// waits for the uplink that long, and a little more for one that returns
// once its context ended; then it gives up on an uplink that ignores its
// context: a retryable failure, and the call is kept as the lane's
// abandoned one, which the lane waits for before its next call.
func (r *Replica) send(ctx context.Context, l *lane, out *outgoing) error {
	out.tries++
	sendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.settings.SendTimeout)
	done := make(chan error, 1)
	go func() {
		defer cancel()
		done <- r.uplink.Send(sendCtx, out.replica, l.name, out.body)
	}()
	select {
	case err := <-done:
		return err
	case <-sendCtx.Done():
	}
	grace := time.NewTimer(min(r.settings.SendTimeout/10, time.Second))
	defer grace.Stop()
	select {
	case err := <-done:
		return err
	case <-grace.C:
	}
	out.givenUp = true
	l.send.abandoned = done
	r.log.Warn("magicsync/replica: the uplink ignored its context and had not returned after SendTimeout; the lane sends nothing until it returns, then the same message again unless it was taken (an Uplink must return once its context ends)",
		"lane", l.name, "seq", out.seq, "timeout", r.settings.SendTimeout)
	return TransportError(true, sendCtx.Err())
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
		}
		return nil
	})
}
