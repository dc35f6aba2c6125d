package httpsync

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// reportingReceiver is an idReceiver that records the messages it is told
// to report as undecodable.
type reportingReceiver struct {
	idReceiver
	mu       sync.Mutex
	reported []uint64
}

func (r *reportingReceiver) ReportUndecodable(_ context.Context, id uint64, reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reason == "" {
		return nil
	}
	r.reported = append(r.reported, id)
	return nil
}

func (r *reportingReceiver) reports() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.reported...)
}

// damageOnce hands out message id damaged the first time, as bytes
// damaged on the way would be.
type damageOnce struct {
	*fakeEngine
	id   uint64
	once sync.Once
}

func (e *damageOnce) Next(ctx context.Context, replica uuid.UUID, applied Applied) (uint64, []byte, bool, error) {
	id, body, ok, err := e.fakeEngine.Next(ctx, replica, applied)
	if ok && id == e.id {
		e.once.Do(func() { body = []byte("damaged") })
	}
	return id, body, ok, err
}

// A message that fails to decode once is only taken again (the next
// delivery may be whole); one that fails twice in a row is reported, once,
// with its id, and never acknowledged. (Before, it was taken again and
// again, and nobody heard of it.)
func TestReceiveLoopReportsAMessageThatFailsToDecodeTwice(t *testing.T) {
	t.Parallel()
	e := newFakeEngine()
	srv, _ := serve(t, &damageOnce{fakeEngine: e, id: 6}, HandlerOptions{PollWait: 50 * time.Millisecond})
	c := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{PollWait: 50 * time.Millisecond})
	r := &reportingReceiver{}
	// Damaged once on the way, then whole: applied, nothing reported.
	e.push(replicaA, 6, []byte("6:six"))
	stop := runLoop(t, c, r)
	eventually(t, "message 6 acknowledged", func() bool { return len(e.ackedIDs()) == 1 })
	if got := r.received(); len(got) != 2 || got[0] != "damaged" {
		t.Fatalf("the replica was handed %q; want message 6 damaged, then whole", got)
	}
	// Damaged every time: reported once, never acknowledged.
	for range 5 {
		e.push(replicaA, 7, []byte("seven, damaged"))
	}
	eventually(t, "message 7 taken five times", func() bool {
		n := 0
		for _, m := range r.received() {
			if m == "seven, damaged" {
				n++
			}
		}
		return n == 5
	})
	stop()
	if got := r.reports(); len(got) != 1 || got[0] != 7 {
		t.Fatalf("reported %v; want message 7, once", got)
	}
	if got := e.ackedIDs(); len(got) != 1 || got[0] != 6 {
		t.Fatalf("acknowledged %v; want message 6 alone", got)
	}
}
