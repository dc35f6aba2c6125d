package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// proxy.go holds the link between a register and the head offices: an
// HTTP proxy that loses, doubles, delays, holds back and cuts what passes
// through it, and cuts the register off altogether for a while.

// netOdds are the chances that one request meets each fault of the link.
type netOdds struct {
	lostBefore, lostAfter, doubled, delayed, heldBack, cut float64
}

// defaultNetOdds are the link's faults when the network's are on: about
// one request in four meets one.
var defaultNetOdds = netOdds{lostBefore: 0.04, lostAfter: 0.03, doubled: 0.03, delayed: 0.08, heldBack: 0.03, cut: 0.03}

// link is one register's way to the head offices.
type link struct {
	name     string
	upstream func(after string) string // a live head office's base URL, another than after when it can
	client   *http.Client
	tally    *tally
	odds     atomic.Pointer[netOdds] // nil: a clean link
	rnd      *lockedRand
	cutOff   atomic.Bool // partitioned: every request fails before the server
	srv      *http.Server
	addr     string

	flightMu sync.Mutex
	flights  int        // requests on their way through the link
	landed   *sync.Cond // signalled as flights drops to 0
}

// newLink starts a link on a free loopback port.
func newLink(name string, upstream func(string) string, t *tally, rnd *lockedRand) (*link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &link{name: name, upstream: upstream, tally: t, rnd: rnd, addr: ln.Addr().String(),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	l.landed = sync.NewCond(&l.flightMu)
	l.srv = &http.Server{Handler: l, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = l.srv.Serve(ln) }() // ends when close shuts the server down
	return l, nil
}

// url is where the register finds the head office.
func (l *link) url() string { return "http://" + l.addr }

// close stops the link, waiting for the requests in flight.
func (l *link) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.srv.Shutdown(ctx)
	l.client.CloseIdleConnections()
}

// settle waits until no request of the register is on its way through
// the link: what it sent before it died has reached the head office, or
// never will.
func (l *link) settle() {
	l.flightMu.Lock()
	defer l.flightMu.Unlock()
	for l.flights > 0 {
		l.landed.Wait()
	}
}

// takeOff and land count a request on its way through the link.
func (l *link) takeOff() {
	l.flightMu.Lock()
	l.flights++
	l.flightMu.Unlock()
}

func (l *link) land() {
	l.flightMu.Lock()
	defer l.flightMu.Unlock()
	if l.flights--; l.flights == 0 {
		l.landed.Broadcast()
	}
}

// forwardTimeout bounds a request's way to a head office and back: a
// long-poll waits a second or so.
const forwardTimeout = 30 * time.Second

// ServeHTTP passes one request on, meeting the faults the odds draw.
func (l *link) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.takeOff()
	defer l.land()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		hangUp(w)
		return
	}
	if l.cutOff.Load() {
		l.tally.add(faultPartitioned)
		hangUp(w)
		return
	}
	odds := l.odds.Load()
	if odds == nil {
		odds = &netOdds{}
	}
	x := l.rnd.float()
	switch {
	case x < odds.lostBefore:
		l.tally.add(faultLostBefore)
		hangUp(w)
		return
	case x < odds.lostBefore+odds.delayed:
		l.tally.add(faultDelayed)
		sleep(r.Context(), time.Duration(50+l.rnd.intN(1500))*time.Millisecond)
	case x < odds.lostBefore+odds.delayed+odds.heldBack:
		// Held back while the register's other requests pass it: it
		// reaches the server after those sent later.
		l.tally.add(faultHeldBack)
		sleep(r.Context(), time.Duration(200+l.rnd.intN(2000))*time.Millisecond)
	}
	cutRequest := false
	x = l.rnd.float()
	doubled := x < odds.doubled
	lostAfter := !doubled && x < odds.doubled+odds.lostAfter
	cut := !doubled && !lostAfter && x < odds.doubled+odds.lostAfter+odds.cut
	if cut && len(body) > 1 && l.rnd.intN(2) == 0 {
		cutRequest, cut = true, false
	}
	if cutRequest {
		l.tally.add(faultCutRequest)
	}
	resp, status, err := l.forward(r, body, cutRequest)
	if err != nil {
		hangUp(w)
		return
	}
	if doubled {
		l.tally.add(faultDoubled)
		if again, againStatus, err := l.forward(r, body, false); err == nil {
			resp, status = again, againStatus
		}
	}
	switch {
	case lostAfter:
		l.tally.add(faultLostAfter)
		hangUp(w)
	case cut && len(resp.body) > 1:
		l.tally.add(faultCutAnswer)
		cutAnswer(w, status, resp.header, resp.body)
	default:
		for k, v := range resp.header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = w.Write(resp.body)
	}
}

// answer is a head office's answer, read whole.
type answer struct {
	header http.Header
	body   []byte
}

// forward sends the request to a head office and reads its answer; when
// the one it tried is down, it tries another once, as a load balancer
// would. A cut request announces its whole body and breaks off halfway.
// The register hanging up does not stop it: a request that reached the
// head office runs its course there, and the link's settle waits for it.
func (l *link) forward(r *http.Request, body []byte, cut bool) (answer, int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), forwardTimeout)
	defer cancel()
	base := l.upstream("")
	for attempt := 0; ; attempt++ {
		var rd io.Reader = bytes.NewReader(body)
		if cut {
			rd = io.MultiReader(bytes.NewReader(body[:len(body)/2]), errReader{errCut})
		}
		req, err := http.NewRequestWithContext(ctx, r.Method, base+r.URL.RequestURI(), rd)
		if err != nil {
			return answer{}, 0, err
		}
		req.Header = r.Header.Clone()
		req.ContentLength = int64(len(body))
		resp, err := l.client.Do(req)
		if err != nil {
			if attempt == 0 && !cut {
				base = l.upstream(base)
				continue
			}
			return answer{}, 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return answer{}, 0, err
		}
		return answer{header: resp.Header, body: b}, resp.StatusCode, nil
	}
}

// errCut is how a cut request's body ends.
var errCut = errors.New("the link cut the request's body")

// errReader is a reader that fails.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// hangUp closes the register's connection without a word: to it, the
// request was lost.
func hangUp(w http.ResponseWriter) {
	h, ok := w.(http.Hijacker)
	if !ok {
		// Not over HTTP/1 (never, from the shop's register): an answer
		// that is no answer is the nearest.
		http.Error(w, "lost", http.StatusBadGateway)
		return
	}
	c, _, err := h.Hijack()
	if err == nil {
		c.Close()
	}
}

// cutAnswer writes the head office's answer announcing its whole length
// but sends only half of it, then closes the connection.
func cutAnswer(w http.ResponseWriter, status int, header http.Header, body []byte) {
	h, ok := w.(http.Hijacker)
	if !ok {
		hangUp(w)
		return
	}
	c, buf, err := h.Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	writeHead(buf, status, header, len(body))
	_, _ = buf.Write(body[:len(body)/2])
	_ = buf.Flush()
}

// writeHead writes an HTTP/1.1 status line and header.
func writeHead(buf *bufio.ReadWriter, status int, header http.Header, length int) {
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	for k, vs := range header {
		if k == "Content-Length" || k == "Transfer-Encoding" || k == "Connection" {
			continue
		}
		for _, v := range vs {
			fmt.Fprintf(buf, "%s: %s\r\n", k, v)
		}
	}
	fmt.Fprintf(buf, "Content-Length: %s\r\nConnection: close\r\n\r\n", strconv.Itoa(length))
}

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// lockedRand is a seeded source shared by goroutines.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

// newLockedRand returns a source drawing the stream of seed.
func newLockedRand(seed uint64, stream uint64) *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(seed, stream))}
}

// float draws a number in [0, 1).
func (r *lockedRand) float() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.Float64()
}

// intN draws a number in [0, n).
func (r *lockedRand) intN(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.IntN(n)
}
