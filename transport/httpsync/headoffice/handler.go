package headoffice

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync/internal/httpwire"

	"github.com/magicsync/magicsync"
)

// Header names of the protocol.
const (
	// HeaderMessageID carries the id of the message a GET next answers
	// with, as a decimal uint64.
	HeaderMessageID = httpwire.HeaderMessageID
	// HeaderLane names the lane of an upward message.
	HeaderLane = httpwire.HeaderLane
	// HeaderProtocol names, on every answer of the handler, the protocol
	// the server speaks (a decimal number): a replica learns it from its
	// first call, before it sends anything. On a refusal of a message
	// speaking a newer protocol than the server's, the replica keeps the
	// message's rows until the server is upgraded. A replica sends it on
	// an upload to say which protocol the message speaks.
	HeaderProtocol = httpwire.HeaderProtocol
)

// DefaultLane is the lane of an upward message without a Sync-Lane header.
const DefaultLane = httpwire.DefaultLane

// maxLaneLen bounds a lane's name.
const maxLaneLen = 128

// Engine is what the handler needs of the server-side engine. ForServer
// adapts a *server.Server to it; tests and other engines implement it
// directly. Every method is called only after Authenticate accepted the
// request's token for the replica.
type Engine interface {
	// Next waits until ctx ends for the next message to replica. ok is
	// false when none came; a nil error with ok false is the usual answer
	// of a long-poll that ended. applied is what the replica says of the
	// last message it applied (its zero value says nothing): the engine
	// takes its word before it hands out anything — an acknowledgement of
	// every message up to it, or, when the engine never issued it (or
	// issued another message under that id), the sign that the engine was
	// restored from an older backup (see server.Endpoint.Next).
	Next(ctx context.Context, replica uuid.UUID, applied Applied) (id uint64, body []byte, ok bool, err error)
	// Ack acknowledges the message id of replica, and every one before it.
	// An id the engine never issued is refused for good (ForServer answers
	// 409) and changes nothing.
	Ack(ctx context.Context, replica uuid.UUID, id uint64) error
	// Receive files one upward message of replica, in lane, and returns nil
	// only once it is filed.
	Receive(ctx context.Context, replica uuid.UUID, lane string, body []byte) error
	// Authenticate reports whether secret (the whole bearer token) is
	// replica's. ok is false when it is not, including when the replica is
	// unknown; an error means it could not tell (its database out of
	// reach, say), answered as the classifier says.
	Authenticate(ctx context.Context, replica uuid.UUID, secret string) (ok bool, err error)
}

// Applied is what a replica says, as it polls, of the last message it
// applied: the applied and sha256 parameters of GET next. It is the
// server's word, server.Applied.
type Applied = server.Applied

// Classifier is implemented by an Engine that knows which of its errors
// mean what. The handler uses it when HandlerOptions.Classify is nil.
type Classifier interface {
	// Classify returns the HTTP status to answer an error of the engine
	// with: a 4xx other than 408 and 429 for an error that will happen
	// again (the client gives up on the request), a 5xx for one that may
	// not.
	Classify(err error) int
}

// HandlerOptions tune the handler. The zero value is sensible throughout.
type HandlerOptions struct {
	// PollWait bounds how long a GET next waits for a message before it
	// answers 204. Zero means 25 seconds. The http.Server's WriteTimeout,
	// if any, must exceed it.
	PollWait time.Duration
	// MaxBodyBytes bounds the body of an upward message; a larger one is
	// answered 413. Zero means 16 MiB.
	MaxBodyBytes int64
	// RetryAfter is the delay a 503's Retry-After header asks for, rounded
	// up to whole seconds. Zero means 1 second.
	RetryAfter time.Duration
	// Classify maps an engine's error to the HTTP status answered. Nil
	// means the engine's own Classify method when it implements
	// Classifier, else DefaultClassify. A status outside 400-599 counts
	// as 500.
	Classify func(err error) int
	// Logger receives the handler's logs. Nil means slog.Default().
	Logger *slog.Logger
	// MaxUploads bounds the uploads (POST up) of one replica in flight at
	// once, from reading the body to the engine's answer; one more is
	// answered 429 with a Retry-After header, which the client treats as
	// retryable. The engine files one replica's uploads one at a time
	// (the others wait in the handler, holding none of the engine's
	// database connections), so that one replica's filing holds at most
	// one connection of the pool however many it sends. Zero means 2.
	MaxUploads int
	// BodyGrace and MinBodyRate bound the time an upload's body takes to
	// arrive: it must have arrived at an average of MinBodyRate bytes a
	// second after the first BodyGrace, or the request is answered 408
	// (retryable) and its connection closed, so that a body trickled
	// slowly does not hold the replica's upload forever. Zero BodyGrace
	// means 10 seconds; zero MinBodyRate means 8 KiB a second (a 16 MiB
	// body then has at most 2,058 s). The deadline is the connection's
	// (http.ResponseController.SetReadDeadline); a ResponseWriter that
	// cannot set one reads without it. The headers are the http.Server's
	// to bound: set its ReadHeaderTimeout.
	BodyGrace time.Duration
	// MinBodyRate is the least average rate, in bytes a second, at which
	// an upload's body must arrive after BodyGrace; see BodyGrace.
	MinBodyRate int64
	// Observer, when set, is told of every request answered and of the
	// long-polls open, for metrics (package metrics has one for
	// Prometheus); one that is also an AuthObserver is told of failed
	// authentications. Nil costs the handler nothing.
	Observer Observer
	// MaxAuthFailures bounds the failed authentications (a missing, wrong
	// or unknown token, or another replica's) of one source address: once
	// it had that many, its requests are answered 429 with Retry-After,
	// before their token is checked, until it earns one back (one every
	// AuthFailureEvery). So tokens cannot be guessed at the rate requests
	// come, and guessing costs the engine nothing. Only that address
	// waits: requests from others are served as ever, and an address
	// whose tokens are right spends nothing. A register whose token went
	// stale retries at the client's backoff, far below the rate earned
	// back, and so does not hold up the registers sharing its address.
	// The handler keeps about 100 bytes for each of at most 16,384
	// addresses with failures (beyond them it forgets the least suspect).
	// Zero means 20; negative turns the bound off.
	MaxAuthFailures int
	// AuthFailureEvery is how often an address earns back one failed
	// authentication; see MaxAuthFailures. Zero means 1 second.
	AuthFailureEvery time.Duration
	// ClientAddress names the source address of a request, for
	// MaxAuthFailures. Nil means the host of the request's RemoteAddr, an
	// IPv6 address by its /64 prefix. Behind a reverse proxy every request
	// comes from the proxy's address: name the client's from the header
	// the proxy sets (and only a header it sets).
	ClientAddress func(*http.Request) string
}

// Observer receives the handler's figures, for metrics. Its methods are
// called from the requests' goroutines, concurrently, and must not block.
type Observer interface {
	// Served is told of a request once it is answered: its endpoint
	// ("next", "ack", "up", "schema", or "other" for a path the handler
	// does not serve), the status answered and how long it took (a
	// long-poll's wait included).
	Served(endpoint string, status int, took time.Duration)
	// LongPoll is told +1 as a long-poll (GET next, authenticated) begins
	// and -1 as it ends: their sum is the long-polls open.
	LongPoll(delta int)
}

// DefaultClassify answers 503 for a context's cancellation or deadline and
// 500 for any other error: both retryable.
func DefaultClassify(err error) int {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// NewHandler returns the server side of the protocol over e, serving
// GET /sync/{id}/next, POST /sync/{id}/ack/{msg} and POST /sync/{id}/up
// (see the package documentation). Mount it at the root, or strip any
// prefix with http.StripPrefix.
func NewHandler(e Engine, opts HandlerOptions) http.Handler {
	h := &handler{e: e, opts: opts, log: opts.Logger}
	if h.opts.PollWait <= 0 {
		h.opts.PollWait = 25 * time.Second
	}
	if h.opts.MaxBodyBytes <= 0 {
		h.opts.MaxBodyBytes = 16 << 20
	}
	if h.opts.RetryAfter <= 0 {
		h.opts.RetryAfter = time.Second
	}
	if h.opts.MaxUploads <= 0 {
		h.opts.MaxUploads = 2
	}
	if h.opts.BodyGrace <= 0 {
		h.opts.BodyGrace = 10 * time.Second
	}
	if h.opts.MinBodyRate <= 0 {
		h.opts.MinBodyRate = 8 << 10
	}
	h.replicas = map[uuid.UUID]*replicaCalls{}
	h.throttle = newThrottle(opts.MaxAuthFailures, opts.AuthFailureEvery)
	h.clientAddress = opts.ClientAddress
	if h.clientAddress == nil {
		h.clientAddress = sourceAddress
	}
	switch {
	case opts.Classify != nil:
		h.classify = opts.Classify
	default:
		if c, ok := e.(Classifier); ok {
			h.classify = c.Classify
		} else {
			h.classify = DefaultClassify
		}
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	mux := http.NewServeMux()
	h.endpoints = map[string]string{}
	for _, rt := range h.routes() {
		mux.HandleFunc(rt.method+" "+rt.path, rt.serve)
		h.endpoints[rt.method+" "+rt.path] = endpointOf(rt.path)
	}
	h.mux = mux
	return h
}

type handler struct {
	e        Engine
	opts     HandlerOptions
	classify func(error) int
	log      *slog.Logger
	mux      *http.ServeMux
	// endpoints names the endpoint of each of mux's patterns, for the
	// Observer.
	endpoints map[string]string
	// throttle bounds the failed authentications per source address
	// (throttle.go); nil without a bound. clientAddress names a
	// request's.
	throttle      *throttle
	clientAddress func(*http.Request) string

	// unavailableSince is when the engine began to fail for now (503), in
	// Unix nanoseconds; 0 while it answers. An outage is logged once as a
	// warning, not per request, and its end once.
	unavailableSince atomic.Int64

	// mu guards replicas and what their entries hold.
	mu sync.Mutex
	// replicas holds the calls in flight of each replica that has any.
	replicas map[uuid.UUID]*replicaCalls
}

// replicaCalls is what one replica has in flight.
type replicaCalls struct {
	refs    int       // requests holding the entry
	poll    *pollSlot // the long-poll that may call Next, if any
	uploads int       // uploads admitted
	// filing holds a token while one of the replica's uploads is with the
	// engine.
	filing chan struct{}
}

// pollSlot is one long-poll's place in its replica's line.
type pollSlot struct {
	cancel context.CancelCauseFunc
	done   chan struct{} // closed once the long-poll no longer calls Next
}

// errReplaced ends a long-poll a newer one of its replica replaced.
var errReplaced = errors.New("magicsync/httpsync: a newer long-poll of the replica replaced this one")

// calls returns replica's entry, held until release.
func (h *handler) calls(replica uuid.UUID) *replicaCalls {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.replicas[replica]
	if c == nil {
		c = &replicaCalls{filing: make(chan struct{}, 1)}
		h.replicas[replica] = c
	}
	c.refs++
	return c
}

// release lets go of an entry calls returned.
func (h *handler) release(replica uuid.UUID, c *replicaCalls) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c.refs--
	if c.refs == 0 {
		delete(h.replicas, replica)
	}
}

// takePoll makes the request the replica's long-poll, ending the older one
// (answered 204) and waiting until it no longer calls Next, so that the
// engine has at most one Next of a replica at a time. It returns the
// context the long-poll waits under — ended, with errReplaced as its
// cause, when a newer one replaces it — and leave, which the long-poll
// calls once it no longer calls Next (more calls do nothing).
func (h *handler) takePoll(r *http.Request, c *replicaCalls) (ctx context.Context, leave func()) {
	ctx, cancel := context.WithCancelCause(r.Context())
	slot := &pollSlot{cancel: cancel, done: make(chan struct{})}
	h.mu.Lock()
	prev := c.poll
	c.poll = slot
	h.mu.Unlock()
	if prev != nil {
		prev.cancel(errReplaced)
		// Bounded: prev's Next returns once its context ended, and prev
		// waited for its own predecessor likewise.
		<-prev.done
	}
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			h.mu.Lock()
			if c.poll == slot {
				c.poll = nil
			}
			h.mu.Unlock()
			close(slot.done)
		})
	}
}

// route is one endpoint of the handler.
type route struct {
	method, path string
	serve        http.HandlerFunc
}

// routes lists the handler's endpoints. proto/PROTOCOL.md, section 11,
// lists the same, which a test checks.
func (h *handler) routes() []route {
	return []route{
		{"GET", "/sync/{id}/next", h.next},
		{"POST", "/sync/{id}/ack/{msg}", h.ack},
		{"POST", "/sync/{id}/up", h.up},
		{"GET", "/sync/{id}/schema", h.schema},
	}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderProtocol, protocolText)
	o := h.opts.Observer
	if o == nil {
		h.mux.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	h.mux.ServeHTTP(sw, r)
	// The mux set r.Pattern to the pattern it matched; none for a path
	// it does not serve.
	endpoint, ok := h.endpoints[r.Pattern]
	if !ok {
		endpoint = "other"
	}
	status := sw.status
	if status == 0 {
		status = http.StatusOK
	}
	o.Served(endpoint, status, time.Since(start))
}

// endpointOf names an endpoint by its path's last segment that is not a
// wildcard: "/sync/{id}/ack/{msg}" is "ack".
func endpointOf(path string) string {
	segs := strings.Split(path, "/")
	for _, seg := range slices.Backward(segs) {
		if seg != "" && !strings.HasPrefix(seg, "{") {
			return seg
		}
	}
	return path
}

// statusWriter remembers the status a request was answered, for the
// Observer. Unwrap lets http.ResponseController reach the connection
// (readBody's deadlines).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the ResponseWriter wrapped, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// protocolText is the protocol this build speaks, as HeaderProtocol says it.
var protocolText = strconv.FormatUint(uint64(wire.Protocol), 10)

// SchemaEngine is an Engine that also describes the replicas' tables; the
// handler serves its schema at GET /sync/{id}/schema. ForServer's does.
type SchemaEngine interface {
	Engine
	// Schema returns the encoded Schema message (proto/sync.proto), or nil
	// when there is none to give.
	Schema() []byte
}

// schema answers GET /sync/{id}/schema: the engine's description of the
// replica's tables, for a replica that creates and checks its tables from
// it (one written in another language, say).
func (h *handler) schema(w http.ResponseWriter, r *http.Request) {
	replica, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	var body []byte
	if se, ok := h.e.(SchemaEngine); ok {
		body = se.Schema()
	}
	if body == nil {
		h.refuse(w, r, http.StatusNotFound, "this server gives no schema: the replica's tables are its build's")
		return
	}
	h.answered(r.Context())
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(body); err != nil {
		h.log.DebugContext(r.Context(), "magicsync/httpsync: the schema did not reach the replica", "replica", replica, "err", err)
	}
}

// authenticate checks the request's token for the replica of its URL and
// returns the replica; on false, the refusal is answered.
func (h *handler) authenticate(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	if h.throttled(w, r) {
		return uuid.UUID{}, false
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, "the replica id is not a UUID")
		return uuid.UUID{}, false
	}
	token, ok := bearer(r)
	if !ok {
		h.authFailed(r)
		w.Header().Set("WWW-Authenticate", `Bearer realm="magicsync"`)
		h.refuse(w, r, http.StatusUnauthorized, "a bearer token is required")
		return uuid.UUID{}, false
	}
	ctx := r.Context()
	ok, err = h.e.Authenticate(ctx, id, token)
	if err != nil {
		h.fail(w, r, id, err)
		return uuid.UUID{}, false
	}
	if ok {
		return id, true
	}
	h.authFailed(r)
	if claimed, claims := httpwire.TokenReplica(token); claims && claimed != id {
		theirs, err := h.e.Authenticate(ctx, claimed, token)
		if err == nil && theirs {
			h.refuse(w, r, http.StatusForbidden, "the token is another replica's")
			return uuid.UUID{}, false
		}
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="magicsync", error="invalid_token"`)
	h.refuse(w, r, http.StatusUnauthorized, "the token is not the replica's")
	return uuid.UUID{}, false
}

// bearer returns the request's bearer token.
func bearer(r *http.Request) (string, bool) {
	auth := r.Header.Get("Authorization")
	scheme, token, found := strings.Cut(auth, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func (h *handler) next(w http.ResponseWriter, r *http.Request) {
	replica, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	wait := h.opts.PollWait
	if q := r.URL.Query().Get("wait"); q != "" {
		secs, ok := parseWait(q)
		if !ok {
			h.refuse(w, r, http.StatusBadRequest, `wait is not a number of seconds in decimal ("25", "0.5")`)
			return
		}
		if secs < wait.Seconds() {
			wait = time.Duration(secs * float64(time.Second))
		}
	}
	var applied Applied
	if q := r.URL.Query().Get("applied"); q != "" {
		n, err := strconv.ParseUint(q, 10, 64)
		if err != nil {
			h.refuse(w, r, http.StatusBadRequest, "applied is not a decimal uint64")
			return
		}
		applied.ID = n
	}
	if q := r.URL.Query().Get("sha256"); q != "" {
		sum, err := hex.DecodeString(q)
		if err != nil || len(sum) != sha256.Size || applied.ID == 0 {
			h.refuse(w, r, http.StatusBadRequest, "sha256 is not the hex SHA-256 of the message named by applied")
			return
		}
		applied.Sum = sum
	}
	if o := h.opts.Observer; o != nil {
		o.LongPoll(1)
		defer o.LongPoll(-1)
	}
	calls := h.calls(replica)
	defer h.release(replica, calls)
	polling, leave := h.takePoll(r, calls)
	defer leave()
	if context.Cause(polling) == errReplaced {
		// Replaced while it waited for its turn: it ends as one that
		// waited in vain.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	ctx, cancel := context.WithTimeout(polling, wait)
	defer cancel()
	id, body, ok, err := h.e.Next(ctx, replica, applied)
	leave()
	if !ok && r.Context().Err() != nil {
		// The replica left, or the http.Server is stopping (its
		// BaseContext ended): say so, to whoever still listens.
		h.log.DebugContext(ctx, "magicsync/httpsync: a long-poll ended before a message came", "replica", replica, "err", err)
		h.unavailable(w, "the server is stopping; try again later")
		return
	}
	if err != nil {
		switch {
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			// The long-poll's own deadline: nothing came. Any other error
			// is the engine's, even once the deadline passed (a poll
			// that waits for nothing, say, while the database is away).
			ok = false
		default:
			h.fail(w, r, replica, err)
			return
		}
	}
	h.answered(ctx)
	if !ok {
		if context.Cause(polling) == errReplaced {
			h.log.DebugContext(ctx, "magicsync/httpsync: a long-poll was replaced by a newer one of its replica", "replica", replica)
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	hd := w.Header()
	hd.Set(HeaderMessageID, strconv.FormatUint(id, 10))
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(body); err != nil {
		h.log.DebugContext(ctx, "magicsync/httpsync: a message did not reach the replica; it comes again", "replica", replica, "message", id, "err", err)
		return
	}
	h.log.DebugContext(ctx, "magicsync/httpsync: message handed out", "replica", replica, "message", id, "bytes", len(body))
}

// answered records that the engine answered a call, ending an outage the
// handler logged.
func (h *handler) answered(ctx context.Context) {
	if since := h.unavailableSince.Swap(0); since != 0 {
		h.log.InfoContext(ctx, "magicsync/httpsync: the engine answers again", "after", time.Since(time.Unix(0, since)).Round(time.Millisecond))
	}
}

func (h *handler) ack(w http.ResponseWriter, r *http.Request) {
	replica, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	id, err := strconv.ParseUint(r.PathValue("msg"), 10, 64)
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, "the message id is not a decimal uint64")
		return
	}
	if err := h.e.Ack(r.Context(), replica, id); err != nil {
		h.fail(w, r, replica, err)
		return
	}
	h.answered(r.Context())
	h.log.DebugContext(r.Context(), "magicsync/httpsync: message acknowledged", "replica", replica, "message", id)
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) up(w http.ResponseWriter, r *http.Request) {
	replica, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	lane := r.Header.Get(HeaderLane)
	if lane == "" {
		lane = DefaultLane
	}
	if !validLane(lane) {
		h.refuse(w, r, http.StatusBadRequest, "the lane's name is not printable ASCII of at most 128 characters")
		return
	}
	limit := h.opts.MaxBodyBytes
	if r.ContentLength > limit {
		h.refuse(w, r, http.StatusRequestEntityTooLarge, "the body is larger than "+strconv.FormatInt(limit, 10)+" bytes")
		return
	}
	calls := h.calls(replica)
	defer h.release(replica, calls)
	h.mu.Lock()
	admitted := calls.uploads < h.opts.MaxUploads
	if admitted {
		calls.uploads++
	}
	h.mu.Unlock()
	if !admitted {
		h.busy(w, r, "the replica has "+strconv.Itoa(h.opts.MaxUploads)+" uploads in flight already; try again later")
		return
	}
	defer func() {
		h.mu.Lock()
		calls.uploads--
		h.mu.Unlock()
	}()
	body, err := h.readBody(w, r, limit)
	if err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			h.refuse(w, r, http.StatusRequestEntityTooLarge, "the body is larger than "+strconv.FormatInt(limit, 10)+" bytes")
			return
		}
		if errors.Is(err, errTooSlow) {
			w.Header().Set("Connection", "close")
			h.refuse(w, r, http.StatusRequestTimeout, err.Error())
			return
		}
		h.refuse(w, r, http.StatusBadRequest, "the body could not be read: "+err.Error())
		return
	}
	if len(body) == 0 {
		h.refuse(w, r, http.StatusBadRequest, "the body is empty")
		return
	}
	select {
	case calls.filing <- struct{}{}:
	case <-r.Context().Done():
		h.unavailable(w, "the server is stopping; try again later")
		return
	}
	err = h.e.Receive(r.Context(), replica, lane, body)
	<-calls.filing
	if err != nil {
		if newer, ok := errors.AsType[*magicsync.ProtocolError](err); ok {
			w.Header().Set(HeaderProtocol, strconv.FormatUint(uint64(newer.Speak), 10))
		}
		h.fail(w, r, replica, err)
		return
	}
	h.answered(r.Context())
	h.log.DebugContext(r.Context(), "magicsync/httpsync: message filed", "replica", replica, "lane", lane, "bytes", len(body))
	w.WriteHeader(http.StatusNoContent)
}

// errTooSlow is readBody's error for a body that did not arrive at the
// least rate the handler asks for.
var errTooSlow = errors.New("the body came too slowly")

// readBody reads an upload's body, at most limit bytes, under a read
// deadline that moves with what arrived: BodyGrace after the start plus a
// second per MinBodyRate bytes read. A body that misses it fails with
// errTooSlow.
func (h *handler) readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	d := &deadlineReader{r: http.MaxBytesReader(w, r.Body, limit), rc: http.NewResponseController(w),
		start: time.Now(), grace: h.opts.BodyGrace, rate: h.opts.MinBodyRate}
	body, err := io.ReadAll(d)
	if d.set {
		// The connection's deadline ends with the body: the server reads
		// on (to see the client leave) while the engine files.
		if err := d.rc.SetReadDeadline(time.Time{}); err != nil {
			h.log.DebugContext(r.Context(), "magicsync/httpsync: the read deadline could not be cleared", "err", err)
		}
	}
	if err != nil && d.set && isTimeout(err) {
		return nil, fmt.Errorf("%w: %d bytes in %v, less than %d bytes a second after %v",
			errTooSlow, d.n, time.Since(d.start).Round(time.Millisecond), h.opts.MinBodyRate, h.opts.BodyGrace)
	}
	return body, err
}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

// deadlineReader reads a body, moving the connection's read deadline
// before each read to grace plus a second per rate bytes read so far.
type deadlineReader struct {
	r      io.Reader
	rc     *http.ResponseController
	start  time.Time
	grace  time.Duration
	rate   int64
	n      int64
	set    bool // a deadline was set
	cannot bool // the ResponseWriter sets no deadline
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	if !d.cannot {
		allowed := d.grace + time.Duration(float64(d.n)/float64(d.rate)*float64(time.Second))
		if err := d.rc.SetReadDeadline(d.start.Add(allowed)); err != nil {
			d.cannot = true
		} else {
			d.set = true
		}
	}
	n, err := d.r.Read(p)
	d.n += int64(n)
	return n, err
}

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

// fail answers an engine's error as the classifier says: a 4xx with the
// error's first line as the reason, a 5xx with a generic one (the details
// go to the log only).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, replica uuid.UUID, err error) {
	status := h.classify(err)
	if status < 400 || status > 599 {
		status = http.StatusInternalServerError
	}
	if status >= 500 {
		level := slog.LevelError
		msg := "magicsync/httpsync: the engine failed"
		switch {
		case r.Context().Err() != nil:
			// The client went away; the engine only saw it go.
			level = slog.LevelDebug
		case status == http.StatusServiceUnavailable:
			// Unavailable for now (its database away, say): said once per
			// outage, each request after it is detail.
			level = slog.LevelDebug
			if h.unavailableSince.CompareAndSwap(0, time.Now().UnixNano()) {
				level, msg = slog.LevelWarn, "magicsync/httpsync: the engine is unavailable for now; answering 503 with Retry-After until it is back"
			}
		}
		h.log.Log(r.Context(), level, msg, "method", r.Method, "path", r.URL.Path, "replica", replica, "status", status, "err", err)
		if status == http.StatusServiceUnavailable {
			h.unavailable(w, "the server is unavailable for now; try again later")
			return
		}
		writeReason(w, status, "the server failed; try again later")
		return
	}
	h.refuse(w, r, status, err.Error())
}

// busy answers 429 with a Retry-After header: the replica has as many
// calls in flight as it may.
func (h *handler) busy(w http.ResponseWriter, r *http.Request, reason string) {
	h.log.InfoContext(r.Context(), "magicsync/httpsync: too many calls of a replica", "method", r.Method, "path", r.URL.Path, "reason", reason)
	w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(h.opts.RetryAfter.Seconds())), 10))
	writeReason(w, http.StatusTooManyRequests, reason)
}

// unavailable answers 503 with a Retry-After header.
func (h *handler) unavailable(w http.ResponseWriter, reason string) {
	w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(h.opts.RetryAfter.Seconds())), 10))
	writeReason(w, http.StatusServiceUnavailable, reason)
}

// refuse answers a permanent refusal with a short reason, and logs it.
func (h *handler) refuse(w http.ResponseWriter, r *http.Request, status int, reason string) {
	reason = shorten(reason)
	h.log.WarnContext(r.Context(), "magicsync/httpsync: request refused", "method", r.Method, "path", r.URL.Path, "status", status, "reason", reason)
	writeReason(w, status, reason)
}

func writeReason(w http.ResponseWriter, status int, reason string) {
	hd := w.Header()
	hd.Set("Content-Type", "text/plain; charset=utf-8")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, reason+"\n")
}

// shorten keeps the first line of a reason, at most 300 bytes of valid
// UTF-8.
func shorten(reason string) string { return httpwire.Shorten(reason) }
