package natssync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/natssync/internal/natswire"
)

// pollSlack is how long past the poll's wait a next may take before the
// client gives up on it: a head office that died while it held the
// request costs the replica at most this much more.
const pollSlack = 5 * time.Second

// headerRoom is what the client keeps of the connection's maximum payload
// for a request's headers.
const headerRoom = 4 << 10

// StatusError is a head office's reply other than a success: its status
// (an HTTP status code, judged as over HTTP), the reason it gave, and the
// delay its Retry-After header asked for, if any.
type StatusError struct {
	// Code is the reply's Sync-Status, an HTTP status code.
	Code int
	// Reason is the reason the head office gave, shortened.
	Reason string
	// RetryAfter is the delay its Retry-After asked for, at most
	// BackoffMax; zero when it asked none.
	RetryAfter time.Duration
}

// Error describes the reply.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("magicsync/natssync: the head office answered %d %s", e.Code, http.StatusText(e.Code))
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Retryable reports whether the same request may succeed later: true for
// 5xx, 408 and 429, false for any other 4xx.
func (e *StatusError) Retryable() bool { return natswire.Retryable(e.Code) }

// ErrNoStatus is wrapped by the error of a reply without a valid
// Sync-Status header: not the head office's (retryable).
var ErrNoStatus = errors.New("magicsync/natssync: a reply without a valid " + HeaderStatus + " header")

// ErrOffline is wrapped by the error Send returns while the client's
// Online hook answers false: retryable, no request was made.
var ErrOffline = errors.New("magicsync/natssync: offline")

// onlineEvery is how often ReceiveLoop asks an Online hook again while it
// answers false.
const onlineEvery = 100 * time.Millisecond

// Receiver applies the messages the client receives; a replica's
// Endpoint (replica.Replica.Endpoint) is one.
type Receiver interface {
	Receive(ctx context.Context, msg []byte) (replica.Received, error)
}

// LastAppliedReporter is implemented by a Receiver that can say which
// message it applied last; a replica's Endpoint is one. ReceiveLoop asks it
// once, as it starts, so that its very first next tells the head office
// where the replica stands.
type LastAppliedReporter interface {
	LastApplied(ctx context.Context) (uint64, error)
}

// UndecodableReporter is implemented by a Receiver that can report a
// message it cannot decode; a replica's Endpoint is one. ReceiveLoop reports
// a message Receive failed to decode (replica.ErrMalformed) twice in a
// row, under the same id.
type UndecodableReporter interface {
	ReportUndecodable(ctx context.Context, id uint64, reason string) error
}

var (
	_ replica.Uplink      = (*Client)(nil)
	_ Receiver            = replica.Endpoint{}
	_ LastAppliedReporter = replica.Endpoint{}
	_ UndecodableReporter = replica.Endpoint{}
)

// ClientOptions tune a Client. The zero value is sensible throughout.
type ClientOptions struct {
	// Prefix is the first token of the protocol's subjects; it must be the
	// head office's. Empty means "magicsync".
	Prefix string
	// PollWait is how long one next asks the head office to wait for a
	// message (it may wait less); the request itself is given up on 5
	// seconds after. Zero means 20 seconds.
	PollWait time.Duration
	// RequestTimeout bounds an upload, an acknowledgement and a request
	// for the schema (an upload by its context too: the replica's
	// SendTimeout). A head office that dies holding a request leaves it
	// unanswered: the replica learns it only when this passes, and then
	// sends again, to another. Zero means 15 seconds.
	RequestTimeout time.Duration
	// BackoffMin and BackoffMax bound the receive loop's jittered
	// exponential backoff after a failure. Zero means 100 milliseconds and
	// 30 seconds.
	BackoffMin, BackoffMax time.Duration
	// Logger receives the client's logs. Nil means slog.Default().
	Logger *slog.Logger
	// Online, when set, says whether the network may be used: while it
	// answers false no request is made — Send fails with ErrOffline
	// (retryable) and the receive loop waits, asking again every 100 ms.
	// Nil means always online.
	Online func() bool
}

// Client is the replica side of the protocol over NATS, for one replica:
// a replica.Uplink (Send) and the loop that takes the head office's
// messages (ReceiveLoop). It is safe for concurrent use. It does not own
// its connection: close the *nats.Conn once the client's calls returned.
type Client struct {
	nc      *nats.Conn
	id      uuid.UUID
	token   string
	prefix  string
	wait    time.Duration
	timeout time.Duration
	bmin    time.Duration
	bmax    time.Duration
	log     *slog.Logger
	online  func() bool
}

// NewClient returns the client of replica replicaID over nc,
// authenticating with token (JoinToken's form: the same token as over
// HTTP). Connect makes a connection whose replies come under the
// replica's own inbox prefix, which per-replica NATS permissions need.
func NewClient(nc *nats.Conn, replicaID uuid.UUID, token string, opts ClientOptions) *Client {
	c := &Client{nc: nc, id: replicaID, token: token, prefix: opts.Prefix, wait: opts.PollWait,
		timeout: opts.RequestTimeout, bmin: opts.BackoffMin, bmax: opts.BackoffMax, log: opts.Logger, online: opts.Online}
	if c.prefix == "" {
		c.prefix = natswire.DefaultPrefix
	}
	if c.wait <= 0 {
		c.wait = 20 * time.Second
	}
	if c.timeout <= 0 {
		c.timeout = 15 * time.Second
	}
	if c.bmin <= 0 {
		c.bmin = 100 * time.Millisecond
	}
	if c.bmax <= 0 {
		c.bmax = 30 * time.Second
	}
	c.bmax = max(c.bmax, c.bmin)
	if c.log == nil {
		c.log = slog.Default()
	}
	return c
}

// request makes one exchange with the head office and returns its reply;
// a reply other than a success is a *StatusError.
func (c *Client) request(ctx context.Context, verb string, hdr nats.Header, body []byte) (*nats.Msg, error) {
	m := nats.NewMsg(natswire.Subject(c.prefix, c.id, verb))
	if hdr != nil {
		m.Header = hdr
	}
	m.Header.Set(HeaderAuthorization, "Bearer "+c.token)
	m.Data = body
	resp, err := c.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("magicsync/natssync: %s: %w", verb, err)
	}
	code, err := strconv.Atoi(resp.Header.Get(HeaderStatus))
	if err != nil || code < 100 || code > 599 {
		return nil, fmt.Errorf("%w (%s)", ErrNoStatus, verb)
	}
	if code/100 == 2 {
		return resp, nil
	}
	se := &StatusError{Code: code, Reason: natswire.Shorten(resp.Header.Get(HeaderReason))}
	if secs, err := strconv.Atoi(resp.Header.Get(HeaderRetryAfter)); err == nil && secs > 0 {
		se.RetryAfter = min(time.Duration(secs)*time.Second, c.bmax)
	}
	return resp, se
}

// Send files one upward message with the head office in lane and returns
// nil once it is filed. Failures are marked as httpsync's are, and none
// sets the rows aside: replica.Unreachable for no head office answering
// (no responders, a timeout), a 5xx, 408 or 429; replica.TooLarge for a
// message larger than the connection's maximum payload or a 413;
// replica.OlderServer for a refusal naming an older protocol;
// replica.Misconfigured for any other 4xx (401, 403, 404, a message the
// head office cannot read), with its reason (a *StatusError, for
// errors.As). A replica other than the client's is refused, retryably,
// without a request.
func (c *Client) Send(ctx context.Context, replicaID uuid.UUID, lane string, msg []byte) error {
	if replicaID != c.id {
		return replica.TransportError(true, fmt.Errorf("magicsync/natssync: this client is replica %s's, not %s's", c.id, replicaID))
	}
	if c.online != nil && !c.online() {
		return replica.TransportError(true, ErrOffline)
	}
	if limit := c.nc.MaxPayload(); limit > 0 && int64(len(msg))+headerRoom > limit {
		return replica.Refuse(replica.TooLarge, fmt.Errorf("magicsync/natssync: the message has %d bytes; the NATS server takes %d with the headers", len(msg), limit))
	}
	hdr := nats.Header{}
	if lane != "" {
		hdr.Set(HeaderLane, lane)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.request(ctx, natswire.Up, hdr, msg)
	if err == nil {
		return nil
	}
	se, ok := errors.AsType[*StatusError](err)
	switch {
	case ok:
		return replica.Refuse(refusal(se, resp.Header), se)
	case errors.Is(err, nats.ErrMaxPayload):
		return replica.Refuse(replica.TooLarge, err)
	}
	return replica.TransportError(true, err)
}

// refusal says why the head office did not take an upward message, as
// httpsync's client does.
func refusal(se *StatusError, h nats.Header) replica.Refusal {
	switch {
	case se.Retryable():
		return replica.Unreachable
	case se.Code == http.StatusRequestEntityTooLarge:
		return replica.TooLarge
	}
	if v := h.Get(HeaderProtocol); v != "" {
		if p, err := strconv.ParseUint(v, 10, 32); err == nil && uint32(p) < wire.Protocol {
			return replica.OlderServer
		}
	}
	return replica.Misconfigured
}

// Schema asks the head office for its declarations, as the protocol's
// encoded Schema message. A refusal is a *StatusError (404 when the head
// office gives no schema).
func (c *Client) Schema(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.request(ctx, natswire.Schema, nil, nil)
	if err != nil {
		return nil, err
	}
	return resp.Data, nil
}

// next asks the head office for the next message, waiting at most the
// poll's wait, and tells it what the replica applied last; ok is false
// when none came.
func (c *Client) next(ctx context.Context, applied pollSays) (id uint64, body []byte, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.wait+pollSlack)
	defer cancel()
	hdr := nats.Header{}
	hdr.Set(HeaderWait, natswire.FormatWait(c.wait))
	if applied.id > 0 {
		hdr.Set(HeaderApplied, strconv.FormatUint(applied.id, 10))
		if len(applied.sum) > 0 {
			hdr.Set(HeaderSHA256, hex.EncodeToString(applied.sum))
		}
	}
	resp, err := c.request(ctx, natswire.Next, hdr, nil)
	if err != nil {
		return 0, nil, false, err
	}
	if resp.Header.Get(HeaderStatus) == "204" {
		return 0, nil, false, nil
	}
	id, err = strconv.ParseUint(resp.Header.Get(HeaderMessageID), 10, 64)
	if err != nil {
		return 0, nil, false, fmt.Errorf("magicsync/natssync: a message without a valid %s header", HeaderMessageID)
	}
	return id, resp.Data, true, nil
}

// ack acknowledges message id.
func (c *Client) ack(ctx context.Context, id uint64) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	hdr := nats.Header{}
	hdr.Set(HeaderMessageID, strconv.FormatUint(id, 10))
	_, err := c.request(ctx, natswire.Ack, hdr, nil)
	return err
}

// ReceiveLoop takes the head office's messages one at a time until ctx
// ends, then returns nil, as httpsync's does: each is handed to r.Receive
// and acknowledged only after Receive returned nil — applied and
// committed — so that a message comes again until acknowledged. Every
// next tells the head office the last message the replica applied and,
// when the loop applied it itself, the SHA-256 of its bytes. A message
// Receive fails on is not acknowledged and comes again after a backoff;
// one that fails to decode twice in a row is reported when r is an
// UndecodableReporter. Failures to reach the head office and its
// refusals back off (jittered exponential, between BackoffMin and
// BackoffMax, longer if the head office asks with Retry-After).
// ReceiveLoop leaves no goroutine behind when it returns.
func (c *Client) ReceiveLoop(ctx context.Context, r Receiver) error {
	if r == nil {
		return errors.New("magicsync/natssync: ReceiveLoop needs a Receiver")
	}
	failures := 0
	backOff := func(retryAfter time.Duration) bool {
		failures++
		return sleep(ctx, min(max(c.backoff(failures), retryAfter), c.bmax))
	}
	pos := position{id: c.lastApplied(ctx, r)}
	var bad undecodable
	for {
		if !c.waitOnline(ctx) {
			return nil
		}
		asked := time.Now()
		id, body, ok, err := c.next(ctx, pos.applied())
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !backOff(c.logFailure(ctx, "magicsync/natssync: no message from the head office", err)) {
				return nil
			}
			continue
		}
		if !ok {
			failures = 0
			if time.Since(asked) < c.bmin && !sleep(ctx, c.bmin) {
				return nil
			}
			continue
		}
		got, err := r.Receive(ctx, body)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.notApplied(ctx, r, &bad, id, err)
			if !backOff(0) {
				return nil
			}
			continue
		}
		if pos.took(id, body, got) {
			c.log.WarnContext(ctx, "magicsync/natssync: the head office sent another message under the id of one the replica applied: was it restored from an older backup? Not acknowledged; the next request tells it where the replica stands",
				"replica", c.id, "message", id)
			if !backOff(0) {
				return nil
			}
			continue
		}
		c.log.DebugContext(ctx, "magicsync/natssync: message received", "replica", c.id, "message", id,
			"tables", len(got.Applied), "rejected", got.Rejected, "redelivered", got.Redelivered)
		if !c.waitOnline(ctx) {
			return nil
		}
		if err := c.ack(ctx, id); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !backOff(c.logFailure(ctx, "magicsync/natssync: not acknowledged, and comes again", err, "message", id)) {
				return nil
			}
			continue
		}
		failures = 0
	}
}

// waitOnline returns once the Online hook answers true, or false when ctx
// ends first.
func (c *Client) waitOnline(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	if c.online == nil || c.online() {
		return true
	}
	c.log.InfoContext(ctx, "magicsync/natssync: offline; waiting", "replica", c.id)
	t := time.NewTicker(onlineEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			if c.online() {
				c.log.InfoContext(ctx, "magicsync/natssync: online again", "replica", c.id)
				return true
			}
		}
	}
}

// lastApplied asks r, if it can say, which message it applied last.
func (c *Client) lastApplied(ctx context.Context, r Receiver) uint64 {
	la, ok := r.(LastAppliedReporter)
	if !ok {
		return 0
	}
	last, err := la.LastApplied(ctx)
	if err != nil && ctx.Err() == nil {
		c.log.WarnContext(ctx, "magicsync/natssync: the replica cannot say which message it applied last", "replica", c.id, "err", err)
	}
	return last
}

// notApplied says why message id was not applied, and reports it to r
// when it does not decode, twice in a row.
func (c *Client) notApplied(ctx context.Context, r Receiver, bad *undecodable, id uint64, err error) {
	_, newer := errors.AsType[*magicsync.ProtocolError](err)
	switch {
	case newer:
		c.log.ErrorContext(ctx, "magicsync/natssync: a message speaks a newer protocol: update the replica; not acknowledged", "replica", c.id, "message", id, "err", err)
	case errors.Is(err, replica.ErrMalformed):
		c.log.ErrorContext(ctx, "magicsync/natssync: a message does not decode; not acknowledged, it comes again", "replica", c.id, "message", id, "err", err)
		ur, ok := r.(UndecodableReporter)
		if !ok || !bad.failed(id) {
			return
		}
		if rerr := ur.ReportUndecodable(ctx, id, err.Error()); rerr != nil {
			c.log.WarnContext(ctx, "magicsync/natssync: a message that does not decode could not be reported; trying again when it comes again", "replica", c.id, "message", id, "err", rerr)
			return
		}
		bad.reported = true
	default:
		c.log.WarnContext(ctx, "magicsync/natssync: a message was not applied; not acknowledged, it comes again", "replica", c.id, "message", id, "err", err)
	}
}

// logFailure logs a failed request of the receive loop — as an error when
// the head office refused it for good, else as a warning — and returns
// the delay the head office asked for, if any.
func (c *Client) logFailure(ctx context.Context, msg string, err error, args ...any) time.Duration {
	args = append([]any{"replica", c.id}, append(args, "err", err)...)
	if se, ok := errors.AsType[*StatusError](err); ok {
		if !se.Retryable() {
			c.log.ErrorContext(ctx, "magicsync/natssync: the head office refuses the replica's request", args...)
		} else {
			c.log.WarnContext(ctx, msg, args...)
		}
		return se.RetryAfter
	}
	c.log.WarnContext(ctx, msg, args...)
	return 0
}

// backoff is the jittered wait after the n-th failure in a row: between
// half and all of BackoffMin·2ⁿ⁻¹, capped at BackoffMax.
func (c *Client) backoff(n int) time.Duration {
	d := c.bmax
	if n-1 < 32 {
		if e := c.bmin << max(n-1, 0); e > 0 && e < c.bmax {
			d = e
		}
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits d, or returns false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// undecodableAfter is how many times in a row a message must fail to
// decode before ReceiveLoop reports it.
const undecodableAfter = 2

// undecodable is what the receive loop knows of the messages that failed
// to decode.
type undecodable struct {
	id       uint64
	n        int
	reported bool
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

// position is what the receive loop knows of the last message the replica
// applied: its id, and the SHA-256 of the bytes of message sumOf, which
// the loop applied itself (0 when none in this process).
type position struct {
	id    uint64
	sum   [sha256.Size]byte
	sumOf uint64
}

// pollSays is what a next says of the last message the replica applied.
type pollSays struct {
	id  uint64
	sum []byte
}

// applied is what the next request says.
func (p *position) applied() pollSays {
	a := pollSays{id: p.id}
	if p.sumOf != 0 && p.sumOf == p.id {
		a.sum = p.sum[:]
	}
	return a
}

// took records what Receive said of message id, of those bytes, and
// reports whether the message is another than the one the replica applied
// under that id.
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
