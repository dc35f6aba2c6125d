package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// errBadServer is wrapped by the error of a -server that names no head
// office.
var errBadServer = errors.New("-server must be the head office's address, as http://host:port (or a NATS server's, as nats://host:port)")

// checkServer checks, before anything starts, that server is an address a
// head office can be at: http or https, a host, nothing else.
func checkServer(server string) error {
	u, err := url.Parse(server)
	switch {
	case err != nil:
		return fmt.Errorf("%w, not %q: %w", errBadServer, server, err)
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "nats":
		return fmt.Errorf("%w, not %q (it names no http://, https:// or nats://)", errBadServer, server)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%w, not %q (it names no host)", errBadServer, server)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Trim(u.Path, "/") != "":
		return fmt.Errorf("%w, not %q (only a scheme, a host and a port)", errBadServer, server)
	}
	return nil
}

// contactState is how the register's last request for messages went.
type contactState int

const (
	contactUnknown     contactState = iota // no answer yet
	contactOK                              // the head office answered
	contactRefused                         // it refused the register: 401, 403, 404
	contactUnavailable                     // it answered 5xx: try again later
	contactUnreachable                     // no answer at all
)

// contact follows how the head office answers the register's receive loop
// (its GET next requests), by watching the HTTP responses: a refusal of
// the register's token is not retried away, and the register must say it
// at once, in plain words, even without -v. The uplink's refusals are the
// lanes' (see sayRefusals).
type contact struct {
	base http.RoundTripper

	mu      sync.Mutex
	state   contactState
	words   string        // why, for the states other than OK
	changed chan struct{} // signalled when state changes
}

func newContact() *contact {
	return &contact{base: http.DefaultTransport, changed: make(chan struct{}, 1)}
}

// maxReason bounds how much of a refusal's body is read as its reason.
const maxReason = 512

// RoundTrip makes the request, and notes how the head office answered a
// GET next.
func (c *contact) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, "/next") {
		return resp, err
	}
	switch {
	case err != nil:
		if req.Context().Err() == nil {
			c.note(contactUnreachable, err.Error())
		}
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusNotFound:
		// The reason is the body's first line; the client reads it too.
		peek, _ := io.ReadAll(io.LimitReader(resp.Body, maxReason))
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(peek), resp.Body), resp.Body}
		reason, _, _ := strings.Cut(strings.TrimSpace(string(peek)), "\n")
		c.note(contactRefused, strings.TrimSpace(resp.Status+": "+reason))
	case resp.StatusCode >= 500:
		c.note(contactUnavailable, resp.Status)
	case resp.StatusCode < 300:
		c.note(contactOK, "")
	}
	return resp, err
}

func (c *contact) note(s contactState, words string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == c.state {
		return
	}
	c.state, c.words = s, words
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// now returns the state and why.
func (c *contact) now() (contactState, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, c.words
}

// say says, in plain words, how the head office answers the register now,
// given what was said last; it returns what it said.
func (c *contact) say(name, server string, said contactState, say func(string, ...any)) contactState {
	state, why := c.now()
	if state == said {
		return said
	}
	switch state {
	case contactRefused:
		say("%s: the head office at %s refuses it (%s): its token is wrong, or was replaced. It keeps selling, and its sales wait on it, nothing lost, until it is started with the token the head office holds for it (-token-file)", name, server, why)
	case contactUnavailable:
		say("%s: the head office at %s cannot serve it for now (%s); it keeps selling, and sends its sales once it can", name, server, why)
	case contactUnreachable:
		say("%s cannot reach the head office at %s (%s); it keeps selling, and sends its sales once it can", name, server, why)
	case contactOK:
		if said != contactUnknown {
			say("%s: the head office at %s answers it again", name, server)
		}
	default:
		return said
	}
	return state
}
