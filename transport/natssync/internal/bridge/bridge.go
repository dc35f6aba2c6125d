// Package bridge answers the NATS transport's requests by making the HTTP
// transport's of a head office: a NATS front for an httpsync head office,
// each exchange mapped as proto/PROTOCOL.md, section 11a, says, the
// statuses passed through as they are. The conformance command of package
// natssync uses it to run the kit's cases — whose faults its HTTP proxy
// injects — over NATS.
package bridge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/transport/natssync/internal/natswire"
)

// maxBody bounds a body the bridge reads from the head office.
const maxBody = 64 << 20

// Serve answers the requests under prefix on nc by forwarding them to the
// HTTP head office at base, until ctx ends; then it waits for the requests
// in flight and returns nil.
func Serve(ctx context.Context, nc *nats.Conn, base, prefix string, log *slog.Logger) error {
	if prefix == "" {
		prefix = natswire.DefaultPrefix
	}
	base = strings.TrimRight(base, "/")
	hc := &http.Client{}
	var (
		mu      sync.Mutex
		closing bool
		wg      sync.WaitGroup
	)
	sub, err := nc.Subscribe(natswire.Wildcard(prefix), func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if closing {
			return
		}
		wg.Go(func() { forward(ctx, hc, base, prefix, m, log) })
	})
	if err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
	mu.Lock()
	closing = true
	mu.Unlock()
	wg.Wait()
	return nil
}

// forward makes request m's HTTP request and answers m with its response.
func forward(ctx context.Context, hc *http.Client, base, prefix string, m *nats.Msg, log *slog.Logger) {
	out := nats.NewMsg(m.Reply)
	status, err := exchange(ctx, hc, base, prefix, m, out)
	if err != nil {
		status = http.StatusServiceUnavailable
		out.Header.Set(natswire.HeaderReason, natswire.Shorten(err.Error()))
		out.Header.Set(natswire.HeaderRetryAfter, "1")
		out.Data = nil
	}
	out.Header.Set(natswire.HeaderStatus, strconv.Itoa(status))
	if err := m.RespondMsg(out); err != nil {
		log.DebugContext(ctx, "bridge: a reply did not go out", "subject", m.Subject, "err", err)
	}
}

// errSubject is the bridge's refusal of a subject outside the protocol.
var errSubject = errors.New("bridge: not a subject of the protocol")

// exchange forwards m to the head office, fills out with its answer and
// returns the answer's status.
func exchange(ctx context.Context, hc *http.Client, base, prefix string, m *nats.Msg, out *nats.Msg) (int, error) {
	replica, verb, err := natswire.ParseSubject(prefix, m.Subject)
	if err != nil {
		return 0, errSubject
	}
	path := base + "/sync/" + replica.String() + "/"
	method := http.MethodGet
	var body io.Reader
	switch verb {
	case natswire.Next:
		q := url.Values{}
		if v := m.Header.Get(natswire.HeaderWait); v != "" {
			q.Set("wait", v)
		}
		if v := m.Header.Get(natswire.HeaderApplied); v != "" {
			q.Set("applied", v)
		}
		if v := m.Header.Get(natswire.HeaderSHA256); v != "" {
			q.Set("sha256", v)
		}
		path += "next"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
	case natswire.Ack:
		method, path = http.MethodPost, path+"ack/"+url.PathEscape(m.Header.Get(natswire.HeaderMessageID))
	case natswire.Up:
		method, path, body = http.MethodPost, path+"up", bytes.NewReader(m.Data)
	case natswire.Schema:
		path += "schema"
	default:
		path += url.PathEscape(verb)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, body)
	if err != nil {
		return 0, err
	}
	if v := m.Header.Get(natswire.HeaderAuthorization); v != "" {
		req.Header.Set("Authorization", v)
	}
	if v := m.Header.Get(natswire.HeaderLane); v != "" {
		req.Header.Set(natswire.HeaderLane, v)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, err
	}
	for _, h := range []string{natswire.HeaderProtocol, natswire.HeaderMessageID, natswire.HeaderRetryAfter} {
		if v := resp.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	if resp.StatusCode/100 == 2 {
		out.Data = data
	} else {
		out.Header.Set(natswire.HeaderReason, natswire.Shorten(string(data)))
	}
	return resp.StatusCode, nil
}
