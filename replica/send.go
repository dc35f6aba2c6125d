// Sending one message: handed to the uplink under SendTimeout (send),
// waiting a little more for an uplink that ignores its context, and no
// longer. What the call came to is outcome.go's.

package replica

import (
	"context"
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
