package natssync

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/internal/replicaclient"
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
// 5xx, 408 and 429, false for any other 4xx, as over HTTP.
func (e *StatusError) Retryable() bool { return replicaclient.Retryable(e.Code) }

// ErrNoStatus is wrapped by the error of a reply without a valid
// Sync-Status header: not the head office's (retryable).
var ErrNoStatus = errors.New("magicsync/natssync: a reply without a valid " + HeaderStatus + " header")

// ErrOffline is wrapped by the error Send returns while the client's
// Online hook answers false: retryable, no request was made.
var ErrOffline = errors.New("magicsync/natssync: offline")

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
		return replica.Refuse(replicaclient.Refusal(se.Code, resp.Header.Get(HeaderProtocol)), se)
	case errors.Is(err, nats.ErrMaxPayload):
		return replica.Refuse(replica.TooLarge, err)
	}
	return replica.TransportError(true, err)
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
func (c *Client) next(ctx context.Context, applied replicaclient.Applied) (id uint64, body []byte, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.wait+pollSlack)
	defer cancel()
	hdr := nats.Header{}
	hdr.Set(HeaderWait, natswire.FormatWait(c.wait))
	if applied.ID > 0 {
		hdr.Set(HeaderApplied, strconv.FormatUint(applied.ID, 10))
		if len(applied.Sum) > 0 {
			hdr.Set(HeaderSHA256, hex.EncodeToString(applied.Sum))
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
// UndecodableReporter. A message issued again under an id the replica
// applied, with other bytes, is not acknowledged, and an acknowledgement
// refused with 409 is logged as a warning: both are a head office
// restored from an older backup, which the next request tells where the
// replica stands. Failures to reach the head office and its refusals
// back off (jittered exponential, between BackoffMin and BackoffMax,
// longer if the head office asks with Retry-After). The loop's rules are
// httpsync's, kept in one place for both. ReceiveLoop leaves no goroutine
// behind when it returns.
func (c *Client) ReceiveLoop(ctx context.Context, r Receiver) error {
	l := replicaclient.Loop{
		Next: c.next, Ack: c.ack,
		Status: replicaclient.StatusAs(func(se *StatusError) (int, time.Duration) { return se.Code, se.RetryAfter }),
		Online: c.online, BackoffMin: c.bmin, BackoffMax: c.bmax,
		Replica: c.id, Logger: c.log, Prefix: "magicsync/natssync", Peer: "the head office",
	}
	return l.Run(ctx, r)
}
