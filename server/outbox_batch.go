package server

import (
	"context"
	"slices"
	"sync"
)

// outbox_batch.go holds the group commit that many replicas' calls share:
// the acknowledgements, the polls' words and the builds of deltas that
// arrive while one transaction runs are done together in the next, so that
// a fleet's deliveries cost the database a few statements and a commit per
// batch, not per replica.

// batcher runs calls in batches, at most maxRunning at once. The callers
// run them themselves: a call given the lead runs one batch (what is
// pending, up to maxBatch calls, its own among them or not), then hands
// the lead to the oldest call still pending, so that no caller runs
// others' batches for long while its own answer waits. No goroutine
// outlives the calls.
type batcher[In, Out any] struct {
	// run does one batch; it returns one Out per In, in order, or an
	// error that fails every call of the batch.
	run        func(ctx context.Context, ins []In) ([]Out, error)
	maxBatch   int
	maxRunning int
	// queued and started, when set, are told of each call queued (with
	// how many are pending) and each batch started (with its size): the
	// tests hold batches there.
	queued  func(pending int)
	started func(size int)

	mu      sync.Mutex
	pending []*batchCall[In, Out]
	running int // leads given out
}

// batchCall is one call waiting for its batch.
type batchCall[In, Out any] struct {
	in   In
	out  Out
	err  error
	done chan struct{}
	lead chan struct{} // buffered 1: the call is to run a batch
}

// do runs in in a batch and returns its outcome. The batch runs under
// runCtx, not under the caller's ctx: a caller that leaves does not fail
// the others' batch. do waits for the outcome until ctx ends; a call that
// leaves before its batch began is left out of it.
func (b *batcher[In, Out]) do(ctx context.Context, runCtx func() (context.Context, context.CancelFunc), in In) (Out, error) {
	c := &batchCall[In, Out]{in: in, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	pending := len(b.pending)
	if b.running < b.maxRunning {
		b.running++
		c.lead <- struct{}{}
	}
	b.mu.Unlock()
	if b.queued != nil {
		b.queued(pending)
	}
	for {
		select {
		case <-c.done:
			b.passOn(c)
			return c.out, c.err
		case <-c.lead:
			b.runOne(runCtx)
		case <-ctx.Done():
			var zero Out
			if b.leave(c) {
				return zero, ctx.Err()
			}
			// Its batch runs: what it does stands, as a call that ran
			// to its end would have.
			<-c.done
			b.passOn(c)
			return c.out, c.err
		}
	}
}

// passOn hands on a lead a call was given while another's batch took it
// in, so that no lead is lost with a call that returns.
func (b *batcher[In, Out]) passOn(c *batchCall[In, Out]) {
	select {
	case <-c.lead:
		b.mu.Lock()
		b.handOn()
		b.mu.Unlock()
	default:
	}
}

// leave takes a call that no longer waits out of the pending, handing on
// the lead it was given if any; it reports false when the call's batch
// began already.
func (b *batcher[In, Out]) leave(c *batchCall[In, Out]) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.pending, c)
	if i < 0 {
		return false
	}
	b.pending = slices.Delete(b.pending, i, i+1)
	select {
	case <-c.lead:
		b.handOn()
	default:
	}
	return true
}

// handOn gives the lead to the oldest call pending that holds none, or
// gives it back. b.mu is held. With maxRunning above one, two leads may
// come back while the oldest call pending has yet to take the first it
// was handed: it is not handed a second (its lead's buffer is full, and a
// send would block under b.mu while that call waits for b.mu to run its
// batch — every caller stuck).
func (b *batcher[In, Out]) handOn() {
	for _, c := range b.pending {
		select {
		case c.lead <- struct{}{}:
			return
		default: // it holds a lead already
		}
	}
	b.running--
}

// runOne runs one batch of what is pending, then hands the lead on.
func (b *batcher[In, Out]) runOne(runCtx func() (context.Context, context.CancelFunc)) {
	b.mu.Lock()
	n := min(len(b.pending), b.maxBatch)
	calls := slices.Clone(b.pending[:n])
	b.pending = slices.Delete(b.pending, 0, n)
	// A call taken into this batch holds no lead: one is given only to
	// the oldest pending, and only by the holder of a lead.
	b.mu.Unlock()
	if n > 0 {
		if b.started != nil {
			b.started(len(calls))
		}
		ins := make([]In, len(calls))
		for i, c := range calls {
			ins[i] = c.in
		}
		ctx, cancel := runCtx()
		outs, err := b.run(ctx, ins)
		cancel()
		for i, c := range calls {
			if err != nil {
				c.err = err
			} else {
				c.out = outs[i]
			}
			close(c.done)
		}
	}
	b.mu.Lock()
	b.handOn()
	b.mu.Unlock()
}
