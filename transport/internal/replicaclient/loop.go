package replicaclient

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/replica"
)

// OnlineEvery is how often a client asks its Online hook again: the loop
// while it answers false, httpsync's long-poll while it answers true.
const OnlineEvery = 100 * time.Millisecond

// undecodableAfter is how many times in a row a message must fail to
// decode before the loop reports it: once may be bytes damaged on the
// way, which the next delivery mends; twice, the message itself.
const undecodableAfter = 2

// ErrUnplugged is wrapped by the error of a Next that the Online hook cut
// short: the loop asks again, without backing off, once back online.
var ErrUnplugged = errors.New("magicsync: went offline while waiting")

// Receiver applies the messages the loop receives; a replica's Endpoint
// is one. Each transport names its own, of the same method.
type Receiver interface {
	Receive(ctx context.Context, msg []byte) (replica.Received, error)
}

// Applied is what a request for the next message says of the last
// message the replica applied, so that a head office restored from an
// older backup learns, before it hands out anything, that the replica
// applied messages it no longer knows of.
type Applied struct {
	// ID is the message's id; 0 says nothing.
	ID uint64
	// Sum is the SHA-256 of the message's bytes as the replica received
	// them, when the loop knows them; nil says nothing.
	Sum []byte
}

// Loop is the receive loop of one replica's client: it takes the head
// office's messages one at a time, hands each to a Receiver and
// acknowledges it only once applied, backing off after every failure.
// The transport fills in its requests (Next, Ack, Status) and how it
// names itself in the logs; the loop decides the rest.
type Loop struct {
	// Next asks the head office for the next message, saying what the
	// replica applied last; ok is false when none came before the poll's
	// wait passed. A poll the Online hook cut short fails wrapping
	// ErrUnplugged.
	Next func(ctx context.Context, applied Applied) (id uint64, body []byte, ok bool, err error)
	// Ack acknowledges message id.
	Ack func(ctx context.Context, id uint64) error
	// Status reads the error of a failed Next or Ack: when it is the head
	// office's answer (ok), its status code and the delay its Retry-After
	// asked for, zero when none. StatusAs makes one.
	Status func(err error) (code int, retryAfter time.Duration, ok bool)
	// HeldOff, when set, is how long the client still holds off as the
	// head office asked: the loop waits that out before each poll.
	HeldOff func() time.Duration
	// Pause waits d, or returns false when ctx ends first. Nil means
	// Sleep; a test may put a clock of its own.
	Pause func(ctx context.Context, d time.Duration) bool
	// Online, when set, says whether the network may be used: while it
	// answers false the loop waits, asking again every 100 ms.
	Online func() bool
	// BackoffMin and BackoffMax bound the jittered exponential backoff
	// after a failure (Backoff); a Retry-After lengthens it, up to
	// BackoffMax.
	BackoffMin, BackoffMax time.Duration
	// Replica is the replica the client is, named by every log.
	Replica uuid.UUID
	// Logger receives the loop's logs.
	Logger *slog.Logger
	// Prefix starts every log message ("magicsync/httpsync"); Peer names
	// the other end in them ("the server", "the head office").
	Prefix, Peer string
}

// StatusAs returns a Loop's Status for a transport whose answers other
// than a success are errors of type E, read by read.
func StatusAs[E error](read func(E) (code int, retryAfter time.Duration)) func(error) (int, time.Duration, bool) {
	return func(err error) (int, time.Duration, bool) {
		e, ok := errors.AsType[E](err)
		if !ok {
			return 0, 0, false
		}
		code, retryAfter := read(e)
		return code, retryAfter, true
	}
}

// Run takes the head office's messages until ctx ends, then returns nil;
// without a Receiver it returns an error at once. Each is handed to
// r.Receive and acknowledged only after Receive returned nil — applied
// and committed. A lost acknowledgement is harmless: the message comes
// again, and changes nothing the second time.
//
// Every poll says the last message the replica applied (Applied: as
// Receive said, and before the first message, r's LastApplied when r
// can say) and, when the loop applied that message itself, the SHA-256 of
// its bytes. A message Receive takes for a redelivery that has other
// bytes than the one the loop applied under the same id was issued again
// by a head office restored from an older backup: it is not acknowledged,
// and the next poll tells the head office where the replica stands. An
// acknowledgement refused with 409, of a message the head office says it
// never issued, is such a head office's too, and is logged as a warning.
//
// A message Receive fails on is not acknowledged: the loop logs it, backs
// off and takes it again. That includes a message of a newer protocol
// (*magicsync.ProtocolError) and one that does not decode at all
// (replica.ErrMalformed), both logged as errors; once the same message
// failed to decode twice in a row, the loop reports it, when r can
// (ReportUndecodable), so that the head office drops it and provisions
// the replica again.
//
// Failures to reach the head office and its refusals back off, a refusal
// for good (not Retryable) logged as an error and retried at the same
// pace, since the head office's records may be mended while the replica
// runs. The backoff grows with every failure in a row, and starts again
// from BackoffMin once a message was acknowledged or a poll ended with
// nothing to take. Run leaves no goroutine behind.
func (l *Loop) Run(ctx context.Context, r Receiver) error {
	if r == nil {
		return errors.New(l.Prefix + ": ReceiveLoop needs a Receiver")
	}
	pause := l.Pause
	if pause == nil {
		pause = Sleep
	}
	failures := 0
	backOff := func(retryAfter time.Duration) bool {
		failures++
		return pause(ctx, min(max(Backoff(failures, l.BackoffMin, l.BackoffMax), retryAfter), l.BackoffMax))
	}
	pos := position{id: l.lastApplied(ctx, r)}
	var bad undecodable
	for {
		if !l.waitOnline(ctx) {
			return nil
		}
		if l.HeldOff != nil {
			if d := l.HeldOff(); d > 0 && !pause(ctx, d) {
				return nil
			}
		}
		asked := time.Now()
		id, body, ok, err := l.Next(ctx, pos.applied())
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if errors.Is(err, ErrUnplugged) {
				continue
			}
			if !backOff(l.logFailure(ctx, "no message from "+l.Peer, l.Peer+" refuses to hand out messages", err)) {
				return nil
			}
			continue
		}
		if !ok {
			failures = 0
			// A head office that answers at once, again and again, is
			// not long-polling: do not hammer it.
			if time.Since(asked) < l.BackoffMin && !pause(ctx, l.BackoffMin) {
				return nil
			}
			continue
		}
		got, err := r.Receive(ctx, body)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			l.notApplied(ctx, r, &bad, id, err)
			if !backOff(0) {
				return nil
			}
			continue
		}
		if pos.took(id, body, got) {
			l.warn(ctx, l.Peer+" sent another message under the id of one the replica applied: was it restored from an older backup? Not acknowledged; the next poll tells "+l.Peer+" where the replica stands",
				"message", id)
			if !backOff(0) {
				return nil
			}
			continue
		}
		l.Logger.DebugContext(ctx, l.Prefix+": message received", "replica", l.Replica, "message", id,
			"tables", len(got.Applied), "rejected", got.Rejected, "redelivered", got.Redelivered)
		if !l.waitOnline(ctx) {
			return nil
		}
		if err := l.Ack(ctx, id); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// The message comes again and changes nothing; not at once.
			if !backOff(l.notAcknowledged(ctx, id, err)) {
				return nil
			}
			continue
		}
		failures = 0
	}
}

// warn logs a warning of the loop, naming the replica.
func (l *Loop) warn(ctx context.Context, msg string, args ...any) {
	l.Logger.WarnContext(ctx, l.Prefix+": "+msg, append([]any{"replica", l.Replica}, args...)...)
}

// lastApplied asks r, if it can say, which message it applied last: 0
// when it cannot, the first message applied saying it instead.
func (l *Loop) lastApplied(ctx context.Context, r Receiver) uint64 {
	// As each transport's LastAppliedReporter.
	la, ok := r.(interface {
		LastApplied(ctx context.Context) (uint64, error)
	})
	if !ok {
		return 0
	}
	last, err := la.LastApplied(ctx)
	if err != nil && ctx.Err() == nil {
		l.warn(ctx, "the replica cannot say which message it applied last", "err", err)
	}
	return last
}

// notApplied says why message id was not applied, and reports it to r
// when it does not decode, twice in a row (reportUndecodable).
func (l *Loop) notApplied(ctx context.Context, r Receiver, bad *undecodable, id uint64, err error) {
	_, newer := errors.AsType[*magicsync.ProtocolError](err)
	switch {
	case newer:
		l.Logger.ErrorContext(ctx, l.Prefix+": a message speaks a newer protocol: update the replica; not acknowledged", "replica", l.Replica, "message", id, "err", err)
	case errors.Is(err, replica.ErrMalformed):
		l.Logger.ErrorContext(ctx, l.Prefix+": a message does not decode; not acknowledged, it comes again", "replica", l.Replica, "message", id, "err", err)
		l.reportUndecodable(ctx, r, bad, id, err)
	default:
		l.warn(ctx, "a message was not applied; not acknowledged, it comes again", "message", id, "err", err)
	}
}

// reportUndecodable reports message id, which failed to decode with err,
// when it failed often enough in a row and r can report it.
func (l *Loop) reportUndecodable(ctx context.Context, r Receiver, bad *undecodable, id uint64, err error) {
	// As each transport's UndecodableReporter.
	ur, ok := r.(interface {
		ReportUndecodable(ctx context.Context, id uint64, reason string) error
	})
	if !ok || !bad.failed(id) {
		return
	}
	if rerr := ur.ReportUndecodable(ctx, id, err.Error()); rerr != nil {
		l.warn(ctx, "a message that does not decode could not be reported; trying again when it comes again", "message", id, "err", rerr)
		return
	}
	bad.reported = true
}

// notAcknowledged says why the acknowledgement of message id failed and
// returns how long the head office asked the client to hold off
// (logFailure). A head office that never issued the id (409) was restored
// from an older backup: the next poll tells it where the replica stands.
func (l *Loop) notAcknowledged(ctx context.Context, id uint64, err error) time.Duration {
	if code, _, ok := l.Status(err); ok && code == http.StatusConflict {
		l.warn(ctx, l.Peer+" says it never issued a message the replica applied: was it restored from an older backup? The next poll tells it where the replica stands",
			"message", id, "err", err)
		return 0
	}
	return l.logFailure(ctx, "not acknowledged, and comes again", l.Peer+" refuses the acknowledgement", err, "message", id)
}

// logFailure logs a failed request — as an error, refusedMsg, when the
// head office refused it for good, else as a warning, msg — and returns
// the delay the head office's Retry-After asked for, if any.
func (l *Loop) logFailure(ctx context.Context, msg, refusedMsg string, err error, args ...any) time.Duration {
	args = append([]any{"replica", l.Replica}, append(args, "err", err)...)
	code, retryAfter, isStatus := l.Status(err)
	if isStatus && !Retryable(code) {
		l.Logger.ErrorContext(ctx, l.Prefix+": "+refusedMsg, args...)
		return retryAfter
	}
	l.Logger.WarnContext(ctx, l.Prefix+": "+msg, args...)
	if !isStatus {
		return 0
	}
	return retryAfter
}

// waitOnline returns once the Online hook answers true, or false when ctx
// ends first.
func (l *Loop) waitOnline(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	if l.Online == nil || l.Online() {
		return true
	}
	l.Logger.InfoContext(ctx, l.Prefix+": offline; waiting", "replica", l.Replica)
	t := time.NewTicker(OnlineEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			if l.Online() {
				l.Logger.InfoContext(ctx, l.Prefix+": online again", "replica", l.Replica)
				return true
			}
		}
	}
}

// undecodable is what the loop knows of the messages that failed to
// decode.
type undecodable struct {
	id       uint64 // the last message that failed to decode
	n        int    // how many times in a row it failed
	reported bool   // it was reported
}

// failed notes that message id failed to decode, and reports whether it
// is due to be reported.
func (u *undecodable) failed(id uint64) bool {
	if u.id != id {
		*u = undecodable{id: id}
	}
	u.n++
	return u.n >= undecodableAfter && !u.reported
}

// position is what the loop knows of the last message the replica
// applied.
type position struct {
	id uint64
	// sum is the SHA-256 of the bytes of message sumOf, which the loop
	// handed to Receive and Receive applied; sumOf is 0 when the loop
	// applied none in this process.
	sum   [sha256.Size]byte
	sumOf uint64
}

// applied is what the next poll says of it.
func (p *position) applied() Applied {
	a := Applied{ID: p.id}
	if p.sumOf != 0 && p.sumOf == p.id {
		a.Sum = p.sum[:]
	}
	return a
}

// took records what Receive said of message id, of those bytes, and
// reports whether the message is another than the one the replica applied
// under that id: the head office, restored from an older backup, issued
// the id again.
func (p *position) took(id uint64, body []byte, got replica.Received) (reissued bool) {
	sum := sha256.Sum256(body)
	if !got.Redelivered {
		p.id = max(id, got.LastApplied)
		p.sum, p.sumOf = sum, id
		return false
	}
	reissued = id == p.sumOf && sum != p.sum
	if got.LastApplied > 0 {
		p.id = got.LastApplied
	}
	return reissued
}
