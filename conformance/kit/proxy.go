package kit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// served is one message the proxy handed the replica.
type served struct {
	id       uint64
	body     []byte // as the replica received it
	original *syncpb.ToReplica
	injected bool // the proxy served it of itself, not the engine
}

// upload is one upward message the replica sent.
type upload struct {
	lane   string
	seq    uint64
	sum    [32]byte
	msg    *syncpb.ToServer
	status int // what the replica was answered; 0 when the engine answered
}

// verdict is what a case's hook makes of a message the engine hands out.
type verdict struct {
	// replace, when set, is served in place of the message, under its id.
	replace *syncpb.ToReplica
	// hide acknowledges the message to the engine and tells the replica
	// there is none: the message is lost on the way.
	hide bool
	// raw, when set, is served in place of the message's bytes, under its
	// id: bytes damaged on the way, which need not decode.
	raw []byte
}

// proxy stands between the replica and the engine's handler: it records
// what goes each way and injects the faults the current case asks for.
type proxy struct {
	o *office

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every event
	served  []served
	acks    []uint64
	ups     []upload
	// sums maps the SHA-256 of bytes the proxy served in place of a
	// message to that of the message's own, so that the engine hears of
	// the bytes it issued when the replica says where it stands.
	sums   map[string]string
	inject []served
	// pending counts, per id, the acknowledgements of injected messages
	// the proxy answers itself: the engine never issued those bytes.
	pending map[uint64]int

	onMessage func(m *syncpb.ToReplica) verdict
	onAck     func(id uint64) int
	onUp      func(u upload) int
}

func newProxy(o *office) *proxy {
	return &proxy{o: o, changed: make(chan struct{}), sums: map[string]string{}, pending: map[uint64]int{}}
}

// event wakes whoever waits for the proxy's records to change. The
// caller holds mu.
func (p *proxy) event() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// hooks sets the current case's hooks; nil clears one.
func (p *proxy) hooks(onMessage func(*syncpb.ToReplica) verdict, onAck func(uint64) int, onUp func(upload) int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onMessage, p.onAck, p.onUp = onMessage, onAck, onUp
}

// serveNext queues a message for the proxy to hand the replica at its
// next poll, ahead of anything of the engine's.
func (p *proxy) serveNext(id uint64, body []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inject = append(p.inject, served{id: id, body: body, injected: true})
	p.pending[id]++
}

// snapshot returns copies of the records.
func (p *proxy) snapshot() (srv []served, acks []uint64, ups []upload, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]served(nil), p.served...), append([]uint64(nil), p.acks...), append([]upload(nil), p.ups...), p.changed
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	inner := *p.o.handler.Load()
	rest, ok := strings.CutPrefix(r.URL.Path, "/sync/")
	parts := strings.Split(rest, "/")
	switch {
	case !ok || len(parts) < 2:
	case parts[1] == "next" && r.Method == http.MethodGet:
		p.next(w, r, inner)
		return
	case parts[1] == "ack" && len(parts) == 3 && r.Method == http.MethodPost:
		id, err := strconv.ParseUint(parts[2], 10, 64)
		if err != nil {
			break
		}
		p.mu.Lock()
		hook := p.onAck
		if p.pending[id] > 0 {
			p.pending[id]--
			p.acks = append(p.acks, id)
			p.event()
			p.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		p.mu.Unlock()
		if hook != nil {
			if code := hook(id); code != 0 {
				w.Header().Set("Retry-After", "0")
				http.Error(w, "the conformance kit refuses this acknowledgement", code)
				return
			}
		}
		rec := httptest.NewRecorder()
		inner.ServeHTTP(rec, r)
		if rec.Code == http.StatusNoContent {
			p.mu.Lock()
			p.acks = append(p.acks, id)
			p.event()
			p.mu.Unlock()
		}
		copyResponse(w, rec)
		return
	case parts[1] == "up" && r.Method == http.MethodPost:
		p.up(w, r, inner)
		return
	}
	inner.ServeHTTP(w, r)
}

// next hands the replica its next message: one the case injects, or the
// engine's, as the case's hook has it.
func (p *proxy) next(w http.ResponseWriter, r *http.Request, inner http.Handler) {
	q := r.URL.Query()
	p.mu.Lock()
	if own, ok := p.sums[q.Get("sha256")]; ok {
		q.Set("sha256", own)
		r.URL.RawQuery = q.Encode()
	}
	if len(p.inject) > 0 {
		m := p.inject[0]
		p.inject = p.inject[1:]
		p.served = append(p.served, m)
		p.event()
		p.mu.Unlock()
		w.Header().Set("Message-Id", strconv.FormatUint(m.id, 10))
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(m.body)
		return
	}
	p.mu.Unlock()
	rec := httptest.NewRecorder()
	inner.ServeHTTP(rec, r)
	// The hook is the one of the case under way when the message came,
	// not when the long-poll began.
	p.mu.Lock()
	hook := p.onMessage
	p.mu.Unlock()
	if rec.Code != http.StatusOK {
		copyResponse(w, rec)
		return
	}
	id, _ := strconv.ParseUint(rec.Header().Get("Message-Id"), 10, 64)
	body := rec.Body.Bytes()
	msg := &syncpb.ToReplica{}
	if err := proto.Unmarshal(body, msg); err != nil {
		copyResponse(w, rec)
		return
	}
	var v verdict
	if hook != nil {
		v = hook(msg)
	}
	if v.hide {
		engine, _ := p.o.current()
		if replicaID, err := parseReplica(r.URL.Path); err == nil {
			if err := engine.Endpoint().Ack(r.Context(), replicaID, id); err != nil {
				http.Error(w, "the conformance kit could not drop the message: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		p.mu.Lock()
		p.served = append(p.served, served{id: id, original: msg, body: nil})
		p.event()
		p.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if v.raw != nil {
		body = v.raw
	}
	if v.replace != nil {
		out, err := proto.Marshal(v.replace)
		if err == nil {
			p.mu.Lock()
			p.sums[hexSum(out)] = hexSum(body)
			p.mu.Unlock()
			body = out
		}
	}
	p.mu.Lock()
	p.served = append(p.served, served{id: id, body: bytes.Clone(body), original: msg})
	p.event()
	p.mu.Unlock()
	for k, vs := range rec.Header() {
		if k != "Content-Length" {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// up records an upward message and hands it to the engine, unless the
// case's hook answers it.
func (p *proxy) up(w http.ResponseWriter, r *http.Request, inner http.Handler) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, "reading the upload: "+err.Error(), http.StatusBadRequest)
		return
	}
	u := upload{lane: r.Header.Get("Sync-Lane"), sum: sha256.Sum256(body), msg: &syncpb.ToServer{}}
	if u.lane == "" {
		u.lane = "main"
	}
	if err := proto.Unmarshal(body, u.msg); err == nil {
		u.seq = u.msg.GetSequence()
	}
	p.mu.Lock()
	hook := p.onUp
	p.mu.Unlock()
	if hook != nil {
		u.status = hook(u)
	}
	if u.status != 0 {
		p.record(u)
		w.Header().Set("Retry-After", "0")
		http.Error(w, "the conformance kit refuses this upload for now", u.status)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	inner.ServeHTTP(rec, r)
	if rec.Code != http.StatusNoContent {
		u.status = rec.Code
	}
	p.record(u)
	copyResponse(w, rec)
}

func (p *proxy) record(u upload) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ups = append(p.ups, u)
	p.event()
}

// copyResponse writes what rec recorded to w.
func copyResponse(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
