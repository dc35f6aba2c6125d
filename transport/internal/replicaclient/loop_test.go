package replicaclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/replica"
)

// A message is reported once it failed to decode twice in a row, and
// only once; another message starts the count again.
func TestUndecodableIsDueOnTheSecondFailureInARow(t *testing.T) {
	var u undecodable
	if u.failed(7) {
		t.Fatal("due after one failure; want two: once may be bytes damaged on the way")
	}
	if !u.failed(7) {
		t.Fatal("not due after two failures in a row")
	}
	// The report failed: due again the next time.
	if !u.failed(7) {
		t.Fatal("not due again after a report that failed")
	}
	u.reported = true
	if u.failed(7) {
		t.Fatal("due again once reported")
	}
	// Another message: the count starts again, and so does the report.
	if u.failed(8) {
		t.Fatal("message 8 due after its first failure")
	}
	if !u.failed(8) {
		t.Fatal("message 8 not due after its second failure")
	}
	// A failure of another message in between breaks the run.
	u = undecodable{}
	u.failed(7)
	u.failed(8)
	if u.failed(7) {
		t.Fatal("message 7 due after failures not in a row")
	}
}

func sum(b string) []byte {
	s := sha256.Sum256([]byte(b))
	return s[:]
}

// What a poll says follows what Receive said; the sum only of the message
// the loop applied itself, and a redelivery under that id with other bytes
// is a message issued again.
func TestPositionTookTellsAReissuedMessageFromARedelivery(t *testing.T) {
	p := position{id: 5}
	if a := p.applied(); a.ID != 5 || a.Sum != nil {
		t.Fatalf("before any message: %+v; want 5 without a sum, as the replica said", a)
	}
	if p.took(6, []byte("six"), replica.Received{LastApplied: 6}) {
		t.Fatal("message 6, applied, taken for one issued again")
	}
	if a := p.applied(); a.ID != 6 || !bytes.Equal(a.Sum, sum("six")) {
		t.Fatalf("after message 6: %+v; want 6 and its sum", a)
	}
	// A true redelivery: the same bytes.
	if p.took(6, []byte("six"), replica.Received{Redelivered: true, LastApplied: 6}) {
		t.Fatal("a redelivery of message 6, the same bytes, taken for one issued again")
	}
	// Other bytes under id 6: issued again; the position stays.
	if !p.took(6, []byte("another six"), replica.Received{Redelivered: true, LastApplied: 6}) {
		t.Fatal("other bytes under id 6 not taken for a message issued again")
	}
	if a := p.applied(); a.ID != 6 || !bytes.Equal(a.Sum, sum("six")) {
		t.Fatalf("after the message issued again: %+v; want 6 and the sum of what was applied", a)
	}
	// A redelivery of an older message, whose bytes the loop does not
	// know: not judged.
	if p.took(4, []byte("four?"), replica.Received{Redelivered: true, LastApplied: 6}) {
		t.Fatal("a redelivery of an older message taken for one issued again")
	}
	// The replica says it applied further than the message (provisioned):
	// the poll says so, without a sum it does not know.
	if p.took(7, []byte("seven"), replica.Received{LastApplied: 9}) {
		t.Fatal("message 7 taken for one issued again")
	}
	if a := p.applied(); a.ID != 9 || a.Sum != nil {
		t.Fatalf("after message 7 with last applied 9: %+v; want 9 without a sum", a)
	}
}

// statusErr is a head office's refusal, as a transport's StatusError.
type statusErr struct {
	code       int
	retryAfter time.Duration
}

func (e *statusErr) Error() string { return fmt.Sprintf("answered %d", e.code) }

// records keeps the log records of a test.
type records struct {
	mu   sync.Mutex
	logs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, rec)
	return nil
}

// find returns the level of the first record whose message holds s.
func (r *records) find(s string) (slog.Level, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.logs {
		if strings.Contains(rec.Message, s) {
			return rec.Level, true
		}
	}
	return 0, false
}

// applier applies every message, as "<id>" bytes, and says it applied it.
type applier struct{ n uint64 }

func (a *applier) Receive(context.Context, []byte) (replica.Received, error) {
	a.n++
	return replica.Received{LastApplied: a.n}, nil
}

// The loop backs off after each failed request, as long as the head
// office's Retry-After asks (up to BackoffMax), and says how bad it is: a
// refusal for good an error, a retryable one or the head office out of
// reach a warning, and an acknowledgement of a message the head office
// never issued (409) a warning naming a restore, whatever the transport.
func TestLoopJudgesFailedRequestsAlikeForEveryTransport(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nextErrs := []error{errors.New("no responders"), &statusErr{code: 503, retryAfter: 300 * time.Millisecond}, &statusErr{code: 403}}
	ackErrs := []error{&statusErr{code: 409}}
	var pauses []time.Duration
	log := &records{}
	l := Loop{
		Next: func(_ context.Context, a Applied) (uint64, []byte, bool, error) {
			if len(nextErrs) > 0 {
				err := nextErrs[0]
				nextErrs = nextErrs[1:]
				return 0, nil, false, err
			}
			return a.ID + 1, []byte("message"), true, nil
		},
		Ack: func(context.Context, uint64) error {
			if len(ackErrs) > 0 {
				err := ackErrs[0]
				ackErrs = ackErrs[1:]
				return err
			}
			cancel()
			return nil
		},
		Status: StatusAs(func(se *statusErr) (int, time.Duration) { return se.code, se.retryAfter }),
		Pause: func(ctx context.Context, d time.Duration) bool {
			pauses = append(pauses, d)
			return ctx.Err() == nil
		},
		BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Replica: uuid.New(), Logger: slog.New(log), Prefix: "magicsync/test", Peer: "the head office",
	}
	if err := l.Run(ctx, &applier{}); err != nil {
		t.Fatalf("Run = %v; want nil once its context ended", err)
	}
	if err := l.Run(ctx, nil); err == nil || !strings.HasPrefix(err.Error(), "magicsync/test: ") {
		t.Fatalf("Run without a Receiver = %v; want an error, at once", err)
	}
	for _, c := range []struct {
		msg  string
		want slog.Level
	}{
		{"magicsync/test: no message from the head office", slog.LevelWarn},
		{"magicsync/test: the head office refuses to hand out messages", slog.LevelError},
		{"magicsync/test: the head office says it never issued a message the replica applied", slog.LevelWarn},
	} {
		if got, ok := log.find(c.msg); !ok || got != c.want {
			t.Errorf("%q logged at %v (found %v); want %v", c.msg, got, ok, c.want)
		}
	}
	if len(pauses) != 4 {
		t.Fatalf("backed off %v; want once after each of the four failures", pauses)
	}
	// Jittered within [5, 10], [10, 20], [20, 40], [40, 80] ms, the second
	// lengthened to the 300 ms asked, capped at 200.
	if pauses[1] != 200*time.Millisecond {
		t.Errorf("backoff after a 503 asking 300 ms = %v; want BackoffMax, 200 ms", pauses[1])
	}
	for i, ceil := range []time.Duration{10, 0, 40, 80} {
		ceil *= time.Millisecond
		if i != 1 && (pauses[i] < ceil/2 || pauses[i] > ceil) {
			t.Errorf("backoff %d = %v; want within [%v, %v]", i+1, pauses[i], ceil/2, ceil)
		}
	}
}
