package httpsync

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/internal/replicaclient"
)

// pollSlack is how long past the poll's wait a GET next may take before
// the client gives up on it.
const pollSlack = 15 * time.Second

// ackTimeout bounds one acknowledgement.
const ackTimeout = 30 * time.Second

// ErrOffline is wrapped by the error Send returns while the client's
// Online hook answers false: retryable, no request was made.
var ErrOffline = errors.New("magicsync/httpsync: offline")

// ErrRetryLater is wrapped by the error Send returns while the client
// holds off because the server asked it to (a Retry-After header):
// retryable, no request was made.
var ErrRetryLater = errors.New("magicsync/httpsync: the server asked to wait before trying again")

// StatusError is a server's answer other than a success: its status code,
// the reason text of its body, and the delay its Retry-After header asked
// for, if any.
type StatusError struct {
	Code       int
	Reason     string
	RetryAfter time.Duration
}

// Error describes the answer.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("magicsync/httpsync: the server answered %d %s", e.Code, http.StatusText(e.Code))
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Retryable reports whether the same request may succeed later; see
// Retryable.
func (e *StatusError) Retryable() bool { return Retryable(e.Code) }

// Retryable reports whether a request answered with status code may
// succeed if made again: true for 5xx, 408 and 429, false for every other
// 4xx. An unexpected code outside 400-499 (a 3xx a client did not follow)
// counts as retryable, so that nothing is given up on for a proxy's
// misconfiguration. The NATS transport judges its statuses alike.
func Retryable(code int) bool { return replicaclient.Retryable(code) }

// Receiver applies the messages the client receives; a replica's
// Endpoint (replica.Replica.Endpoint) is one.
type Receiver interface {
	Receive(ctx context.Context, msg []byte) (replica.Received, error)
}

// ClientOptions tune a Client. The zero value is sensible throughout.
type ClientOptions struct {
	// HTTPClient makes the requests. Nil means a client of its own over
	// http.DefaultTransport. Its Timeout, if any, must exceed PollWait.
	HTTPClient *http.Client
	// PollWait is how long one GET next asks the server to wait for a
	// message (the server may wait less). Zero means 25 seconds.
	PollWait time.Duration
	// BackoffMin and BackoffMax bound the receive loop's jittered
	// exponential backoff after a failure. Zero means 100 milliseconds and
	// 30 seconds. BackoffMax also caps how long a server's Retry-After
	// holds the client off.
	BackoffMin, BackoffMax time.Duration
	// MaxMessageBytes bounds a message the client accepts from the server;
	// a larger one is a failure, retried. Zero means 64 MiB.
	MaxMessageBytes int64
	// Logger receives the client's logs. Nil means slog.Default().
	Logger *slog.Logger
	// Online, when set, says whether the network may be used: while it
	// answers false no request is made — Send fails with ErrOffline
	// (retryable) and the receive loop waits, asking again every 100 ms,
	// and cuts a long-poll in flight short. Nil means always online.
	Online func() bool
}

// Client is the replica side of the protocol, for one replica: an
// replica.Uplink (Send) and the loop that takes the server's messages
// (ReceiveLoop). It is safe for concurrent use.
type Client struct {
	base   string
	id     uuid.UUID
	token  string
	hc     *http.Client
	wait   time.Duration
	bmin   time.Duration
	bmax   time.Duration
	maxMsg int64
	log    *slog.Logger
	online func() bool

	// heldUntil is when the hold-off a server's Retry-After asked for
	// ends, in Unix nanoseconds of now; zero when none was asked.
	heldUntil atomic.Int64
	// now and pause are time.Now and sleep, replaced by tests.
	now   func() time.Time
	pause func(ctx context.Context, d time.Duration) bool
}

var _ replica.Uplink = (*Client)(nil)

// NewClient returns the client of replica replicaID for the server at base
// (e.g. "https://head.example/", under which /sync/... is served),
// authenticating with token.
func NewClient(base string, replicaID uuid.UUID, token string, opts ClientOptions) *Client {
	c := &Client{
		base:   strings.TrimRight(base, "/"),
		id:     replicaID,
		token:  token,
		hc:     opts.HTTPClient,
		wait:   opts.PollWait,
		bmin:   opts.BackoffMin,
		bmax:   opts.BackoffMax,
		maxMsg: opts.MaxMessageBytes,
		log:    opts.Logger,
		online: opts.Online,
		now:    time.Now,
		pause:  replicaclient.Sleep,
	}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	if c.wait <= 0 {
		c.wait = 25 * time.Second
	}
	if c.bmin <= 0 {
		c.bmin = 100 * time.Millisecond
	}
	if c.bmax <= 0 {
		c.bmax = 30 * time.Second
	}
	if c.bmax < c.bmin {
		c.bmax = c.bmin
	}
	if c.maxMsg <= 0 {
		c.maxMsg = wire.MaxMessageBytes
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c
}

func (c *Client) url(replica uuid.UUID, rest string) string {
	return c.base + "/sync/" + replica.String() + "/" + rest
}

func (c *Client) isOnline() bool { return c.online == nil || c.online() }

func (c *Client) newRequest(ctx context.Context, method, url string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	return req, nil
}

// Send posts one upward message to the server in lane and returns nil once
// the server filed it. Failures are marked with replica.Refuse, and none
// sets the rows aside (the server judges rows in Filed, not in its status
// codes): replica.Unreachable for the server out of reach, a 5xx, 408 or
// 429, or while offline; replica.TooLarge for 413, so that the replica
// sends smaller messages; replica.OlderServer for a refusal naming an older
// protocol; replica.Misconfigured for any other 4xx (401, 403, 404, a
// message the server cannot read), with the server's reason (a
// *StatusError, for errors.As). A replica other than the client's is
// refused, retryably, without a request: it is a misconfiguration, and the
// rows stay queued.
//
// A retryable answer with a Retry-After header (to any of the client's
// requests) holds the client off for that long, at most BackoffMax: until
// then Send makes no request and fails at once, retryably, wrapping
// ErrRetryLater, so that the replica backs off and tries again later. It
// does not wait itself, as the replica stops only once a send in flight
// returned.
func (c *Client) Send(ctx context.Context, replicaID uuid.UUID, lane string, msg []byte) error {
	if replicaID != c.id {
		return replica.TransportError(true, fmt.Errorf("magicsync/httpsync: this client is replica %s's, not %s's", c.id, replicaID))
	}
	if !c.isOnline() {
		return replica.TransportError(true, ErrOffline)
	}
	if d := c.heldOff(); d > 0 {
		return replica.TransportError(true, fmt.Errorf("%w: %v more", ErrRetryLater, d.Round(time.Millisecond)))
	}
	if msg == nil {
		msg = []byte{}
	}
	req, err := c.newRequest(ctx, http.MethodPost, c.url(replicaID, "up"), msg)
	if err != nil {
		return replica.Refuse(replica.Misconfigured, err)
	}
	if lane != "" {
		req.Header.Set(HeaderLane, lane)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return replica.TransportError(true, err)
	}
	defer drain(resp)
	if resp.StatusCode/100 == 2 {
		return nil
	}
	se := c.statusError(resp)
	return replica.Refuse(replicaclient.Refusal(se.Code, resp.Header.Get(HeaderProtocol)), se)
}

// statusError reads the refusal of resp, and holds the client off as a
// retryable one's Retry-After asks.
func (c *Client) statusError(resp *http.Response) *StatusError {
	se := readStatusError(resp)
	if se.Retryable() && se.RetryAfter > 0 {
		until := c.now().Add(min(se.RetryAfter, c.bmax)).UnixNano()
		for {
			held := c.heldUntil.Load()
			if held >= until || c.heldUntil.CompareAndSwap(held, until) {
				break
			}
		}
	}
	return se
}

// heldOff is how long the client still holds off as a server asked.
func (c *Client) heldOff() time.Duration {
	until := c.heldUntil.Load()
	if until == 0 {
		return 0
	}
	return max(time.Duration(until-c.now().UnixNano()), 0)
}

// readStatusError reads the refusal of resp.
func readStatusError(resp *http.Response) *StatusError {
	reason, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	se := &StatusError{Code: resp.StatusCode, Reason: shorten(string(reason))}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if secs, err := strconv.Atoi(ra); err == nil && secs > 0 {
			se.RetryAfter = time.Duration(secs) * time.Second
		} else if at, err := http.ParseTime(ra); err == nil {
			se.RetryAfter = max(time.Until(at), 0)
		}
	}
	return se
}

// drain reads a little of what is left of a response, so that its
// connection may be kept, and closes it.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
}

// LastAppliedReporter is implemented by a Receiver that can say which
// message it applied last; a replica's Endpoint is one. ReceiveLoop asks it
// once, as it starts, so that its very first poll tells the server where
// the replica stands.
type LastAppliedReporter interface {
	LastApplied(ctx context.Context) (uint64, error)
}

var _ LastAppliedReporter = replica.Endpoint{}

// UndecodableReporter is implemented by a Receiver that can report a
// message it cannot decode; a replica's Endpoint is one. ReceiveLoop reports
// a message Receive failed to decode (replica.ErrMalformed) twice in a
// row, under the same id: the replica sends the report up, and the
// server, hearing of it, drops the message and provisions the replica
// again, so that the replica does not wait on it for ever.
type UndecodableReporter interface {
	ReportUndecodable(ctx context.Context, id uint64, reason string) error
}

var _ UndecodableReporter = replica.Endpoint{}

// ReceiveLoop takes the server's messages one at a time until ctx ends,
// then returns nil. Each is handed to r.Receive and acknowledged only after
// Receive returned nil — applied and committed. A lost acknowledgement is
// harmless: the message comes again, and changes nothing the second time.
//
// Every poll tells the server the last message the replica applied (the
// applied parameter: replica.Received.LastApplied, and before the first
// message, r's LastApplied when r is a LastAppliedReporter) and, when the
// loop applied that message itself, the SHA-256 of its bytes. A server
// restored from an older backup so learns, before it hands out anything,
// that the replica applied messages it no longer knows of, and provisions
// the replica again: the rows the replica sent up and the restore lost
// come up again. A message Receive takes for a redelivery that has other
// bytes than the message the loop applied under the same id is such a
// server's too: it is not acknowledged, and the next poll tells the server.
//
// A message Receive fails on is not acknowledged: the loop logs it, backs
// off and takes it again. That includes a message of a newer protocol
// (*magicsync.ProtocolError: the replica needs updating) and one that does
// not decode at all (replica.ErrMalformed), both logged as errors:
// acknowledging a malformed message would move the queue on, but past
// changes the replica would never have. Instead, once the same message
// failed to decode twice in a row, the loop reports it, its id and why,
// when r is an UndecodableReporter: the server then drops it and
// provisions the replica again.
//
// Failures to reach the server, or its refusals, back off too (jittered
// exponential, between BackoffMin and BackoffMax, longer if the server
// asks with Retry-After); a refusal for good (401, 403, 404) is logged
// as an error and retried at the same pace, since the server's records
// may be mended while the replica runs. So does a failed
// acknowledgement: the message comes again, changes nothing, and is
// acknowledged again after the backoff (an acknowledgement refused with
// 409, of a message the server says it never issued, is logged as a
// warning: the next poll tells the server where the replica stands). The
// backoff grows with every failure in a row, and starts again from
// BackoffMin once a message was acknowledged or a long-poll ended with
// nothing to take.
//
// While the Online hook answers false no request is made: the loop waits,
// cutting a long-poll in flight short. ReceiveLoop leaves no goroutine
// behind when it returns.
func (c *Client) ReceiveLoop(ctx context.Context, r Receiver) error {
	l := replicaclient.Loop{
		Next: c.next, Ack: c.ack,
		Status:  replicaclient.StatusAs(func(se *StatusError) (int, time.Duration) { return se.Code, se.RetryAfter }),
		HeldOff: c.heldOff, Pause: c.pause,
		Online: c.online, BackoffMin: c.bmin, BackoffMax: c.bmax,
		Replica: c.id, Logger: c.log, Prefix: "magicsync/httpsync", Peer: "the server",
	}
	return l.Run(ctx, r)
}

// next asks the server for the next message, waiting at most the poll's
// wait, and tells it what the replica applied last; ok is false when none
// came. A long-poll the Online hook cuts short fails with
// replicaclient.ErrUnplugged.
func (c *Client) next(ctx context.Context, applied replicaclient.Applied) (id uint64, body []byte, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.wait+pollSlack)
	defer cancel()
	unplugged := c.watchOnline(ctx, cancel)
	defer func() {
		if unplugged() && err != nil {
			err = replicaclient.ErrUnplugged
		}
	}()
	query := "next?wait=" + strconv.FormatFloat(c.wait.Seconds(), 'f', -1, 64)
	if applied.ID > 0 {
		query += "&applied=" + strconv.FormatUint(applied.ID, 10)
		if len(applied.Sum) > 0 {
			query += "&sha256=" + hex.EncodeToString(applied.Sum)
		}
	}
	url := c.url(c.id, query)
	req, err := c.newRequest(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, false, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, false, err
	}
	defer drain(resp)
	switch resp.StatusCode {
	case http.StatusNoContent:
		return 0, nil, false, nil
	case http.StatusOK:
	default:
		return 0, nil, false, c.statusError(resp)
	}
	id, err = strconv.ParseUint(resp.Header.Get(HeaderMessageID), 10, 64)
	if err != nil {
		return 0, nil, false, fmt.Errorf("magicsync/httpsync: a message without a valid %s header", HeaderMessageID)
	}
	if resp.ContentLength > c.maxMsg {
		return 0, nil, false, fmt.Errorf("magicsync/httpsync: message %d has %d bytes, more than the %d accepted", id, resp.ContentLength, c.maxMsg)
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, c.maxMsg+1))
	if err != nil {
		return 0, nil, false, fmt.Errorf("magicsync/httpsync: reading message %d: %w", id, err)
	}
	if int64(len(body)) > c.maxMsg {
		return 0, nil, false, fmt.Errorf("magicsync/httpsync: message %d is larger than the %d bytes accepted", id, c.maxMsg)
	}
	return id, body, true, nil
}

// ack acknowledges message id.
func (c *Client) ack(ctx context.Context, id uint64) error {
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	req, err := c.newRequest(ctx, http.MethodPost, c.url(c.id, "ack/"+strconv.FormatUint(id, 10)), nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer drain(resp)
	if resp.StatusCode/100 != 2 {
		return c.statusError(resp)
	}
	return nil
}

// watchOnline asks the Online hook every replicaclient.OnlineEvery while ctx lasts, and
// cancels it when the hook answers false. The function it returns stops
// the watch, waits for it to end, and reports whether it cancelled.
func (c *Client) watchOnline(ctx context.Context, cancel context.CancelFunc) (stop func() bool) {
	if c.online == nil {
		return func() bool { return false }
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var unplugged atomic.Bool
	wg.Go(func() {
		t := time.NewTicker(replicaclient.OnlineEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if !c.online() {
					unplugged.Store(true)
					cancel()
					return
				}
			}
		}
	})
	var once sync.Once
	return func() bool {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
		return unplugged.Load()
	}
}

// Schema asks the head office for its declarations, as the protocol's
// encoded Schema message (GET /sync/{id}/schema): the tables, their
// columns and keys, and the foreign keys among them its database has.
// replica.CreateTables makes the replica's tables from it. A refusal is a
// *StatusError (404 when the head office gives no schema).
func (c *Client) Schema(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	req, err := c.newRequest(ctx, http.MethodGet, c.url(c.id, "schema"), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("magicsync/httpsync: asking for the schema: %w", err)
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return nil, c.statusError(resp)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.maxMsg+1))
	if err != nil {
		return nil, fmt.Errorf("magicsync/httpsync: reading the schema: %w", err)
	}
	if int64(len(body)) > c.maxMsg {
		return nil, fmt.Errorf("magicsync/httpsync: the schema is larger than the %d bytes accepted", c.maxMsg)
	}
	return body, nil
}
