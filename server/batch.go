package server

import (
	"context"
	"sync"
)

// batch.go holds the group commit that many replicas' calls share: the
// acknowledgements and the builds of deltas that arrive while one
// transaction runs are done together in the next, so that a fleet's
// deliveries cost the database a few statements and a commit per batch,
// not per replica.

// batcher runs calls in batches. A call that finds fewer than maxRunning
// batches running leads: it takes what is pending (up to maxBatch calls,
// its own among them or not) and runs it, then the next, until nothing is
// pending; the other calls wait for a leader to run theirs. No goroutine
// outlives the calls: the leaders are the callers themselves.
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
	running int
}

// batchCall is one call waiting for its batch.
type batchCall[In, Out any] struct {
	in   In
	out  Out
	err  error
	done chan struct{}
}

// do runs in in a batch and returns its outcome. The batch runs under
// runCtx, not under the caller's ctx: a caller that leaves does not fail
// the others' batch. do waits for the outcome until ctx ends.
func (b *batcher[In, Out]) do(ctx context.Context, runCtx func() (context.Context, context.CancelFunc), in In) (Out, error) {
	c := &batchCall[In, Out]{in: in, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	pending := len(b.pending)
	lead := b.running < b.maxRunning
	if lead {
		b.running++
	}
	b.mu.Unlock()
	if b.queued != nil {
		b.queued(pending)
	}
	if lead {
		b.lead(runCtx)
	}
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		var zero Out
		// The batch may still run it: what it does stands, as a
		// call that ran to its end would have.
		return zero, ctx.Err()
	}
}

// lead runs batches until none is pending.
func (b *batcher[In, Out]) lead(runCtx func() (context.Context, context.CancelFunc)) {
	for {
		b.mu.Lock()
		n := min(len(b.pending), b.maxBatch)
		if n == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		calls := b.pending[:n:n]
		b.pending = append([]*batchCall[In, Out](nil), b.pending[n:]...)
		b.mu.Unlock()

		ins := make([]In, len(calls))
		for i, c := range calls {
			ins[i] = c.in
		}
		if b.started != nil {
			b.started(len(calls))
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
}
