package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func testRunCtx() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// A caller that ran a batch returns with its answer: the batches pending
// after its own are run by the callers waiting for them, not by it.
func TestBatcherLeaderReturnsAfterItsOwnBatch(t *testing.T) {
	t.Parallel()
	firstRunning := make(chan struct{})
	releaseFirst := make(chan struct{})
	releaseRest := make(chan struct{})
	var batches atomic.Int32
	b := &batcher[int, int]{maxBatch: 1, maxRunning: 1,
		run: func(_ context.Context, ins []int) ([]int, error) {
			if batches.Add(1) == 1 {
				close(firstRunning)
				<-releaseFirst
			} else {
				<-releaseRest
			}
			return []int{ins[0] * 10}, nil
		}}
	first := make(chan int, 1)
	go func() {
		out, _ := b.do(context.Background(), testRunCtx, 1)
		first <- out
	}()
	<-firstRunning
	var wg sync.WaitGroup
	queued := make(chan struct{}, 3)
	b.queued = func(int) { queued <- struct{}{} }
	outs := make([]int, 3)
	for i := range 3 {
		wg.Go(func() { outs[i], _ = b.do(context.Background(), testRunCtx, i+2) })
	}
	for range 3 {
		<-queued
	}
	close(releaseFirst)
	select {
	case got := <-first:
		if got != 10 {
			t.Errorf("the first call's answer: %d; want 10", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first caller ran the others' batches before it returned its own answer")
	}
	close(releaseRest)
	wg.Wait()
	for i, got := range outs {
		if want := (i + 2) * 10; got != want {
			t.Errorf("call %d: %d; want %d", i+2, got, want)
		}
	}
}

// However callers come and leave, every call that stays gets its answer,
// a call that leaves before its batch is not run, and the leads all come
// back.
func TestBatcherLosesNoCallAndNoLead(t *testing.T) {
	t.Parallel()
	var ran sync.Map
	b := &batcher[int, int]{maxBatch: 4, maxRunning: 2,
		run: func(_ context.Context, ins []int) ([]int, error) {
			outs := make([]int, len(ins))
			for i, in := range ins {
				ran.Store(in, true)
				outs[i] = in + 1
			}
			time.Sleep(time.Millisecond) // a transaction's worth
			return outs, nil
		}}
	var wg sync.WaitGroup
	var left atomic.Int32
	for i := range 400 {
		wg.Go(func() {
			ctx := context.Background()
			if i%5 == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Duration(i%7)*100*time.Microsecond)
				defer cancel()
			}
			out, err := b.do(ctx, testRunCtx, i)
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				left.Add(1)
				if _, ok := ran.Load(i); ok {
					t.Errorf("call %d left before its batch, yet it ran", i)
				}
			case err != nil:
				t.Errorf("call %d: %v", i, err)
			case out != i+1:
				t.Errorf("call %d: %d; want %d", i, out, i+1)
			}
		})
	}
	wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running != 0 || len(b.pending) != 0 {
		t.Errorf("after every call returned: %d leads out, %d calls pending; want none", b.running, len(b.pending))
	}
	// One more call still runs: no lead was lost.
	b.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if out, err := b.do(context.Background(), testRunCtx, 1000); err != nil || out != 1001 {
			t.Errorf("a call after the others: %d, %v", out, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("a call after the others never ran: a lead was lost")
	}
	b.mu.Lock()
	t.Logf("%d of 400 calls left before their batch", left.Load())
}

// Two leads coming back while the oldest call pending has yet to take the
// first it was handed: the second goes to the next call pending, or back.
// Before, it was sent to the same call, whose lead holds one, under the
// batcher's lock: the sender blocked, and the call, to run its batch,
// waited for the lock — every later caller stuck behind them (a fleet's
// polls stopped being answered by a process).
func TestBatcherHandsNoSecondLeadToACallHoldingOne(t *testing.T) {
	t.Parallel()
	b := &batcher[int, int]{maxBatch: 1, maxRunning: 2,
		run: func(_ context.Context, ins []int) ([]int, error) { return ins, nil }}
	first := &batchCall[int, int]{in: 1, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	second := &batchCall[int, int]{in: 2, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	b.pending = []*batchCall[int, int]{first, second}
	b.running = 2 // two batches ran; both hand their lead on
	handed := make(chan struct{})
	go func() {
		defer close(handed)
		b.mu.Lock()
		defer b.mu.Unlock()
		b.handOn()
		b.handOn()
	}()
	select {
	case <-handed:
	case <-time.After(10 * time.Second):
		t.Fatal("the second lead handed on blocked, under the batcher's lock")
	}
	if len(first.lead) != 1 || len(second.lead) != 1 {
		t.Errorf("leads held: first %d, second %d; want one each", len(first.lead), len(second.lead))
	}
	// A third lead coming back finds every call pending holding one: it
	// is given back.
	b.mu.Lock()
	b.handOn()
	running := b.running
	b.mu.Unlock()
	if running != 1 {
		t.Errorf("%d leads out after one was given back; want 1", running)
	}
}
