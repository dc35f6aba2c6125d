// Package headoffice is the head office's end of magicsync's NATS
// transport: Serve answers the replicas' requests (package natssync's
// Client makes them) on the protocol's subjects, as one member of a queue
// group, so that several head-office processes serve the same fleet and
// any one answers each request.
//
// It serves the same Engine as httpsync's handler — ForServer adapts a
// *server.Server — and judges its errors alike: a reply's Sync-Status is
// the HTTP status the handler would answer. The token every request
// carries is checked with the engine's Authenticate before anything else.
//
// A head office that dies holds no state of its own: the engine keeps in
// PostgreSQL what each replica has not acknowledged, and the requests the
// dead process held go unanswered, which the replicas retry and another
// member answers.
package headoffice

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/server"
	httphead "github.com/magicsync/magicsync/transport/httpsync/headoffice"
	"github.com/magicsync/magicsync/transport/natssync/internal/natswire"
)

// Engine is what Serve needs of the server-side engine: httpsync's, the
// same calls under the same contract. ForServer adapts a *server.Server.
type Engine = httphead.Engine

// SchemaEngine is an Engine that also describes the replicas' tables,
// served on the schema subject.
type SchemaEngine = httphead.SchemaEngine

// Classifier is implemented by an Engine that knows which of its errors
// mean what, as HTTP statuses.
type Classifier = httphead.Classifier

// Applied is what a replica says, as it asks for the next message, of the
// last message it applied.
type Applied = server.Applied

// ForServer adapts a *server.Server to an Engine, as httpsync's does: its
// Authenticate takes natssync.JoinToken's tokens, and it classifies the
// server's errors (ErrUnauthorized 401, ErrUnknownReplica 404,
// ErrTooLarge 413, ErrNotIssued 409, any other ErrPermanent 400,
// everything else 503).
func ForServer(s *server.Server) Engine { return httphead.ForServer(s) }

// DefaultQueue is the queue group Serve joins unless Options.Queue says
// otherwise.
const DefaultQueue = "magicsync"

// ErrStopped is the reason of a 503 answered to a request in flight as
// Serve stops.
var ErrStopped = errors.New("magicsync/natssync: the head office is stopping; try again later")

// Options tune Serve. The zero value is sensible throughout.
type Options struct {
	// Prefix is the first token of the protocol's subjects; it must be the
	// replicas'. Empty means "magicsync".
	Prefix string
	// Queue is the queue group the head-office processes of one fleet
	// share. Empty means DefaultQueue.
	Queue string
	// PollWait bounds how long a next waits for a message before it is
	// answered 204. Zero means 20 seconds.
	PollWait time.Duration
	// MaxInFlight bounds the requests the process answers at once,
	// long-polls included; one more is answered 503 with Retry-After,
	// retryable. Zero means 100,000.
	MaxInFlight int
	// MaxUploads bounds the uploads of one replica in flight at once in
	// this process; one more is answered 429 with Retry-After. The engine
	// is given one upload of a replica at a time. Zero means 2.
	MaxUploads int
	// RetryAfter is the delay a 429's or 503's Retry-After asks for,
	// rounded up to whole seconds. Zero means 1 second.
	RetryAfter time.Duration
	// Classify maps an engine's error to the status answered. Nil means
	// the engine's own Classify when it is a Classifier, else
	// httpsync's DefaultClassify.
	Classify func(err error) int
	// Logger receives the responder's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// Serve answers the replicas' requests on nc until ctx ends, as a member
// of the queue group, then stops taking requests, ends the long-polls it
// holds (answered 503 without Retry-After, so that their replicas ask
// again, of another member, after their shortest backoff), waits for
// every request in flight to be answered, and returns nil. It fails at once when it cannot subscribe. It does not
// close nc.
//
// Each request is answered in a goroutine of its own, which ends before
// Serve returns.
func Serve(ctx context.Context, nc *nats.Conn, e Engine, opts Options) error {
	r := newResponder(e, opts)
	subject := natswire.Wildcard(r.prefix)
	calls, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	var wg sync.WaitGroup
	sub, err := nc.QueueSubscribe(subject, r.queue, func(m *nats.Msg) {
		if !r.admit(&wg) {
			r.respond(ctx, m, r.busy(http.StatusServiceUnavailable, "the head office has as many requests in flight as it takes, or is stopping; try again later"))
			return
		}
		go func() {
			defer wg.Done()
			defer r.leave()
			r.serve(calls, m)
		}()
	})
	if err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	r.log.InfoContext(ctx, "magicsync/natssync: serving replicas", "subject", subject, "queue", r.queue)
	<-ctx.Done()
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		r.log.WarnContext(ctx, "magicsync/natssync: unsubscribing", "err", err)
	}
	r.stopping()
	wg.Wait()
	stop()
	return nil
}

// responder answers requests.
type responder struct {
	e        Engine
	prefix   string
	queue    string
	wait     time.Duration
	maxIn    int
	maxUp    int
	retry    time.Duration
	classify func(error) int
	log      *slog.Logger

	mu       sync.Mutex
	inFlight int
	replicas map[uuid.UUID]*replicaCalls
	closing  bool
}

// replicaCalls is what one replica has in flight here.
type replicaCalls struct {
	refs    int
	poll    *pollSlot
	uploads int
	filing  chan struct{}
}

// pollSlot is one long-poll's place in its replica's line.
type pollSlot struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// errReplaced ends a long-poll a newer one of its replica replaced.
var errReplaced = errors.New("magicsync/natssync: a newer next of the replica replaced this one")

func newResponder(e Engine, opts Options) *responder {
	r := &responder{e: e, prefix: opts.Prefix, queue: opts.Queue, wait: opts.PollWait, maxIn: opts.MaxInFlight,
		maxUp: opts.MaxUploads, retry: opts.RetryAfter, classify: opts.Classify, log: opts.Logger,
		replicas: map[uuid.UUID]*replicaCalls{}}
	if r.prefix == "" {
		r.prefix = natswire.DefaultPrefix
	}
	if r.queue == "" {
		r.queue = DefaultQueue
	}
	if r.wait <= 0 {
		r.wait = 20 * time.Second
	}
	if r.maxIn <= 0 {
		r.maxIn = 100_000
	}
	if r.maxUp <= 0 {
		r.maxUp = 2
	}
	if r.retry <= 0 {
		r.retry = time.Second
	}
	if r.classify == nil {
		if c, ok := e.(Classifier); ok {
			r.classify = c.Classify
		} else {
			r.classify = httphead.DefaultClassify
		}
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r
}

// admit takes a place for one more request, counted in wg, unless the
// responder is full or stopping.
func (r *responder) admit(wg *sync.WaitGroup) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing || r.inFlight >= r.maxIn {
		return false
	}
	r.inFlight++
	wg.Add(1)
	return true
}

func (r *responder) leave() {
	r.mu.Lock()
	r.inFlight--
	r.mu.Unlock()
}

// stopping ends the long-polls in flight.
func (r *responder) stopping() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closing = true
	for _, c := range r.replicas {
		if c.poll != nil {
			c.poll.cancel(ErrStopped)
		}
	}
}

// calls returns replica's entry, held until release.
func (r *responder) calls(replica uuid.UUID) *replicaCalls {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.replicas[replica]
	if c == nil {
		c = &replicaCalls{filing: make(chan struct{}, 1)}
		r.replicas[replica] = c
	}
	c.refs++
	return c
}

func (r *responder) release(replica uuid.UUID, c *replicaCalls) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.refs--
	if c.refs == 0 {
		delete(r.replicas, replica)
	}
}

// takePoll makes the request the replica's long-poll here, ending the
// older one (answered 204) and waiting until it no longer calls Next.
func (r *responder) takePoll(ctx context.Context, c *replicaCalls) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	slot := &pollSlot{cancel: cancel, done: make(chan struct{})}
	r.mu.Lock()
	prev := c.poll
	c.poll = slot
	if r.closing {
		cancel(ErrStopped)
	}
	r.mu.Unlock()
	if prev != nil {
		prev.cancel(errReplaced)
		<-prev.done
	}
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			r.mu.Lock()
			if c.poll == slot {
				c.poll = nil
			}
			r.mu.Unlock()
			close(slot.done)
			cancel(nil)
		})
	}
}

// reply is an answer to one request.
type reply struct {
	status int
	reason string
	header map[string]string
	body   []byte
}

func status(code int) reply { return reply{status: code} }

// stoppedReply answers a long-poll the head office ends as it stops: 503
// without Retry-After, so that the replica asks again after its shortest
// backoff, and another member of the queue group answers.
var stoppedReply = reply{status: http.StatusServiceUnavailable, reason: ErrStopped.Error()}

func (r *responder) refuse(ctx context.Context, replica uuid.UUID, verb string, code int, reason string) reply {
	reason = natswire.Shorten(reason)
	r.log.WarnContext(ctx, "magicsync/natssync: request refused", "replica", replica, "exchange", verb, "status", code, "reason", reason)
	return reply{status: code, reason: reason}
}

func (r *responder) busy(code int, reason string) reply {
	return reply{status: code, reason: reason, header: map[string]string{
		natswire.HeaderRetryAfter: strconv.FormatInt(int64(math.Ceil(r.retry.Seconds())), 10)}}
}

// fail answers an engine's error as the classifier says: a 4xx with the
// error's first line as the reason, a 5xx with a generic one.
func (r *responder) fail(ctx context.Context, replica uuid.UUID, verb string, err error) reply {
	code := r.classify(err)
	if code < 400 || code > 599 {
		code = http.StatusInternalServerError
	}
	if code < 500 {
		return r.refuse(ctx, replica, verb, code, err.Error())
	}
	level := slog.LevelError
	if code == http.StatusServiceUnavailable || ctx.Err() != nil {
		level = slog.LevelWarn
	}
	r.log.Log(ctx, level, "magicsync/natssync: the engine failed", "replica", replica, "exchange", verb, "status", code, "err", err)
	if code == http.StatusServiceUnavailable {
		return r.busy(code, "the head office is unavailable for now; try again later")
	}
	return reply{status: code, reason: "the head office failed; try again later"}
}

// protocolText is the protocol this build speaks.
var protocolText = strconv.FormatUint(uint64(wire.Protocol), 10)

// respond sends a reply to request m.
func (r *responder) respond(ctx context.Context, m *nats.Msg, a reply) {
	if m.Reply == "" {
		return
	}
	out := nats.NewMsg(m.Reply)
	out.Header.Set(natswire.HeaderStatus, strconv.Itoa(a.status))
	out.Header.Set(natswire.HeaderProtocol, protocolText)
	if a.reason != "" {
		out.Header.Set(natswire.HeaderReason, a.reason)
	}
	for k, v := range a.header {
		out.Header.Set(k, v)
	}
	out.Data = a.body
	err := m.RespondMsg(out)
	if errors.Is(err, nats.ErrMaxPayload) {
		// Said to the replica too, which would otherwise wait for a reply
		// that never comes, and try again, for ever.
		r.log.ErrorContext(ctx, "magicsync/natssync: a reply is larger than the NATS server's max_payload: raise it above server.Options.MaxMessageBytes, or lower that",
			"subject", m.Subject, "bytes", len(a.body))
		tooLarge := nats.NewMsg(m.Reply)
		tooLarge.Header.Set(natswire.HeaderStatus, strconv.Itoa(http.StatusInternalServerError))
		tooLarge.Header.Set(natswire.HeaderProtocol, protocolText)
		tooLarge.Header.Set(natswire.HeaderReason, "the reply is larger than the NATS server's max_payload; the head office's operator must raise it")
		err = m.RespondMsg(tooLarge)
	}
	if err != nil {
		r.log.DebugContext(ctx, "magicsync/natssync: a reply did not go out; the replica asks again", "subject", m.Subject, "bytes", len(a.body), "err", err)
	}
}

// serve answers one request.
func (r *responder) serve(ctx context.Context, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	replica, verb, err := natswire.ParseSubject(r.prefix, m.Subject)
	if err != nil {
		r.respond(ctx, m, r.refuse(ctx, replica, verb, http.StatusBadRequest, "the subject is not <prefix>.<replica uuid>.<exchange>"))
		return
	}
	serve, known := r.exchanges()[verb]
	if !known {
		r.respond(ctx, m, r.refuse(ctx, replica, verb, http.StatusNotFound, "no such exchange: "+verb))
		return
	}
	a, ok := r.authenticate(ctx, replica, verb, m.Header)
	if ok {
		a = serve(ctx, replica, m)
	}
	r.respond(ctx, m, a)
}

// exchanges are the exchanges the responder serves, by the last token of
// their subject. proto/PROTOCOL.md, section 11a, lists the same, which a
// test checks.
func (r *responder) exchanges() map[string]func(context.Context, uuid.UUID, *nats.Msg) reply {
	return map[string]func(context.Context, uuid.UUID, *nats.Msg) reply{
		natswire.Next:   func(ctx context.Context, id uuid.UUID, m *nats.Msg) reply { return r.next(ctx, id, m.Header) },
		natswire.Ack:    func(ctx context.Context, id uuid.UUID, m *nats.Msg) reply { return r.ack(ctx, id, m.Header) },
		natswire.Up:     func(ctx context.Context, id uuid.UUID, m *nats.Msg) reply { return r.up(ctx, id, m.Header, m.Data) },
		natswire.Schema: func(ctx context.Context, id uuid.UUID, _ *nats.Msg) reply { return r.schema(ctx, id) },
	}
}

// authenticate checks the request's token for the replica of its subject.
func (r *responder) authenticate(ctx context.Context, replica uuid.UUID, verb string, h nats.Header) (reply, bool) {
	token, ok := natswire.Bearer(h.Get(natswire.HeaderAuthorization))
	if !ok {
		return r.refuse(ctx, replica, verb, http.StatusUnauthorized, "a bearer token is required"), false
	}
	ok, err := r.e.Authenticate(ctx, replica, token)
	if err != nil {
		return r.fail(ctx, replica, verb, err), false
	}
	if ok {
		return reply{}, true
	}
	if claimed, claims := natswire.TokenReplica(token); claims && claimed != replica {
		if theirs, err := r.e.Authenticate(ctx, claimed, token); err == nil && theirs {
			return r.refuse(ctx, replica, verb, http.StatusForbidden, "the token is another replica's"), false
		}
	}
	return r.refuse(ctx, replica, verb, http.StatusUnauthorized, "the token is not the replica's"), false
}

func (r *responder) next(ctx context.Context, replica uuid.UUID, h nats.Header) reply {
	wait := r.wait
	if v := h.Get(natswire.HeaderWait); v != "" {
		d, ok := natswire.ParseWait(v)
		if !ok {
			return r.refuse(ctx, replica, natswire.Next, http.StatusBadRequest, `Sync-Wait is not a number of seconds in decimal ("20", "0.5")`)
		}
		wait = min(wait, d)
	}
	var applied Applied
	if v := h.Get(natswire.HeaderApplied); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return r.refuse(ctx, replica, natswire.Next, http.StatusBadRequest, "Sync-Applied is not a decimal uint64")
		}
		applied.ID = n
	}
	if v := h.Get(natswire.HeaderSHA256); v != "" {
		sum, err := hex.DecodeString(v)
		if err != nil || len(sum) != sha256.Size || applied.ID == 0 {
			return r.refuse(ctx, replica, natswire.Next, http.StatusBadRequest, "Sync-Sha256 is not the hex SHA-256 of the message named by Sync-Applied")
		}
		applied.Sum = sum
	}
	calls := r.calls(replica)
	defer r.release(replica, calls)
	polling, leave := r.takePoll(ctx, calls)
	defer leave()
	if cause := context.Cause(polling); cause != nil {
		if cause == ErrStopped {
			return stoppedReply
		}
		return status(http.StatusNoContent)
	}
	pctx, cancel := context.WithTimeout(polling, wait)
	defer cancel()
	id, body, ok, err := r.e.Next(pctx, replica, applied)
	leave()
	if !ok && context.Cause(polling) == ErrStopped {
		return stoppedReply
	}
	if err != nil && !(pctx.Err() != nil && errors.Is(err, pctx.Err())) {
		return r.fail(ctx, replica, natswire.Next, err)
	}
	if !ok {
		return status(http.StatusNoContent)
	}
	r.log.DebugContext(ctx, "magicsync/natssync: message handed out", "replica", replica, "message", id, "bytes", len(body))
	return reply{status: http.StatusOK, body: body, header: map[string]string{natswire.HeaderMessageID: strconv.FormatUint(id, 10)}}
}

func (r *responder) ack(ctx context.Context, replica uuid.UUID, h nats.Header) reply {
	id, err := strconv.ParseUint(h.Get(natswire.HeaderMessageID), 10, 64)
	if err != nil {
		return r.refuse(ctx, replica, natswire.Ack, http.StatusBadRequest, "Message-Id is not a decimal uint64")
	}
	if err := r.e.Ack(ctx, replica, id); err != nil {
		return r.fail(ctx, replica, natswire.Ack, err)
	}
	r.log.DebugContext(ctx, "magicsync/natssync: message acknowledged", "replica", replica, "message", id)
	return status(http.StatusNoContent)
}

// maxLaneLen bounds a lane's name.
const maxLaneLen = 128

func validLane(lane string) bool {
	if len(lane) > maxLaneLen {
		return false
	}
	for i := 0; i < len(lane); i++ {
		if c := lane[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

func (r *responder) up(ctx context.Context, replica uuid.UUID, h nats.Header, body []byte) reply {
	lane := h.Get(natswire.HeaderLane)
	if lane == "" {
		lane = natswire.DefaultLane
	}
	if !validLane(lane) {
		return r.refuse(ctx, replica, natswire.Up, http.StatusBadRequest, "the lane's name is not printable ASCII of at most 128 characters")
	}
	if len(body) == 0 {
		return r.refuse(ctx, replica, natswire.Up, http.StatusBadRequest, "the message is empty")
	}
	calls := r.calls(replica)
	defer r.release(replica, calls)
	r.mu.Lock()
	admitted := calls.uploads < r.maxUp
	if admitted {
		calls.uploads++
	}
	r.mu.Unlock()
	if !admitted {
		return r.busy(http.StatusTooManyRequests, "the replica has "+strconv.Itoa(r.maxUp)+" uploads in flight already; try again later")
	}
	defer func() {
		r.mu.Lock()
		calls.uploads--
		r.mu.Unlock()
	}()
	select {
	case calls.filing <- struct{}{}:
	case <-ctx.Done():
		return r.busy(http.StatusServiceUnavailable, ErrStopped.Error())
	}
	err := r.e.Receive(ctx, replica, lane, body)
	<-calls.filing
	if err != nil {
		a := r.fail(ctx, replica, natswire.Up, err)
		if newer, ok := errors.AsType[*magicsync.ProtocolError](err); ok {
			if a.header == nil {
				a.header = map[string]string{}
			}
			a.header[natswire.HeaderProtocol] = strconv.FormatUint(uint64(newer.Speak), 10)
		}
		return a
	}
	r.log.DebugContext(ctx, "magicsync/natssync: message filed", "replica", replica, "lane", lane, "bytes", len(body))
	return status(http.StatusNoContent)
}

func (r *responder) schema(ctx context.Context, replica uuid.UUID) reply {
	var body []byte
	if se, ok := r.e.(SchemaEngine); ok {
		body = se.Schema()
	}
	if body == nil {
		return r.refuse(ctx, replica, natswire.Schema, http.StatusNotFound, "this head office gives no schema: the replica's tables are its build's")
	}
	return reply{status: http.StatusOK, body: body}
}
