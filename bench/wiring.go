package main

import (
	"context"
	"database/sql"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

// running is a server engine's Run loop, stopped by stop.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// runEngine runs s.Run until stop.
func runEngine(ctx context.Context, s *server.Server) *running {
	rctx, cancel := context.WithCancel(ctx)
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = s.Run(rctx)
	}()
	return r
}

func (r *running) stop() {
	r.cancel()
	<-r.done
}

// loopback serves a handler on 127.0.0.1, on a port of its own.
type loopback struct {
	url  string
	srv  *http.Server
	done chan struct{}
}

// serveLoopback serves h until stop.
func serveLoopback(h http.Handler, log *slog.Logger) (*loopback, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &loopback{url: "http://" + ln.Addr().String(), done: make(chan struct{}),
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}}
	go func() {
		defer close(l.done)
		_ = l.srv.Serve(ln)
	}()
	return l, nil
}

// stop closes the listener and every connection: long-polls in flight end.
func (l *loopback) stop() {
	_ = l.srv.Close()
	<-l.done
}

// hookedEngine is the server's httpsync engine with a hook on every
// acknowledgement it took.
type hookedEngine struct {
	headoffice.Engine
	onAck func(replica uuid.UUID, id uint64)
}

func (h hookedEngine) Ack(ctx context.Context, replica uuid.UUID, id uint64) error {
	err := h.Engine.Ack(ctx, replica, id)
	if err == nil && h.onAck != nil {
		h.onAck(replica, id)
	}
	return err
}

// newHandler is the httpsync handler over s, with an acknowledgement hook
// (nil for none).
func newHandler(s *server.Server, log *slog.Logger, onAck func(replica uuid.UUID, id uint64)) http.Handler {
	return newHandlerWait(s, log, onAck, 25*time.Second)
}

// newHandlerWait is newHandler with wait as its longest long-poll.
func newHandlerWait(s *server.Server, log *slog.Logger, onAck func(replica uuid.UUID, id uint64), wait time.Duration) http.Handler {
	eng := headoffice.ForServer(s)
	opts := headoffice.HandlerOptions{PollWait: wait, Logger: log}
	if cl, ok := eng.(headoffice.Classifier); ok {
		opts.Classify = cl.Classify
	}
	if onAck != nil {
		eng = hookedEngine{Engine: eng, onAck: onAck}
	}
	return headoffice.NewHandler(eng, opts)
}

// httpClient is an HTTP client for many long-polls to one server.
func httpClient(conns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = conns
	tr.MaxIdleConnsPerHost = conns
	tr.MaxConnsPerHost = 0
	return &http.Client{Transport: tr}
}

// openReplicaDB opens a new SQLite file with the settings the engine
// requires, and the host's tables of the server benchmarks.
func openReplicaDB(path string) (*sql.DB, error) {
	d := sqlitetest.Modernc()
	db, err := sql.Open(d.Name, d.DSN(path, sqlitetest.Safe()))
	if err != nil {
		return nil, err
	}
	for _, ddl := range []string{itemsDDL, receiptsDDL} {
		if _, err := db.Exec(ddl); err != nil {
			db.Close()
			return nil, err
		}
	}
	return db, nil
}

// receiveFunc adapts a function to an httpsync.Receiver.
type receiveFunc func(ctx context.Context, msg []byte) (replica.Received, error)

func (f receiveFunc) Receive(ctx context.Context, msg []byte) (replica.Received, error) {
	return f(ctx, msg)
}

// httpReplica is a replica engine over its own SQLite file, talking to the
// server over httpsync: its upward loop (Run) and its receive loop.
type httpReplica struct {
	id     uuid.UUID
	db     *sql.DB
	r      *replica.Replica
	client *httpsync.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// replicaSpec is what starting an httpReplica needs.
type replicaSpec struct {
	path   string
	id     uuid.UUID
	token  string
	url    string
	hc     *http.Client
	log    *slog.Logger
	idle   time.Duration // the upward loop's idle wait; zero means the default
	codecs *magicsync.Codecs
	// wrap, when set, wraps what the receive loop hands messages to.
	wrap func(r *replica.Replica) httpsync.Receiver
}

// startReplica opens, installs and starts a replica.
func startReplica(ctx context.Context, sp replicaSpec) (*httpReplica, error) {
	db, err := openReplicaDB(sp.path)
	if err != nil {
		return nil, err
	}
	if err := replica.Install(ctx, db, sp.codecs); err != nil {
		db.Close()
		return nil, err
	}
	client := httpsync.NewClient(sp.url, sp.id, sp.token, httpsync.ClientOptions{HTTPClient: sp.hc, PollWait: 25 * time.Second, Logger: sp.log})
	r, err := replica.New(ctx, db, sp.codecs, replica.Me(sp.id), client, replica.Settings{DigestsEvery: -1, Idle: sp.idle, Logger: sp.log})
	if err != nil {
		db.Close()
		return nil, err
	}
	var recv httpsync.Receiver = r.Endpoint()
	if sp.wrap != nil {
		recv = sp.wrap(r)
	}
	rctx, cancel := context.WithCancel(ctx)
	h := &httpReplica{id: sp.id, db: db, r: r, client: client, cancel: cancel}
	h.wg.Go(func() { _ = r.Run(rctx) })
	h.wg.Go(func() { _ = client.ReceiveLoop(rctx, recv) })
	return h, nil
}

// stop ends both loops and closes the database.
func (h *httpReplica) stop() error {
	h.cancel()
	h.wg.Wait()
	return h.db.Close()
}

// credentials issues every replica its token, and returns each replica
// with its token.
func credentials(ctx context.Context, s *server.Server, ids []uuid.UUID) ([]fleetMember, error) {
	members := make([]fleetMember, len(ids))
	for i, id := range ids {
		secret, err := s.Credentials(ctx, id)
		if err != nil {
			return nil, err
		}
		members[i] = fleetMember{ID: id, Token: httpsync.JoinToken(id, secret)}
	}
	return members, nil
}

// waitFor waits for a value on ch, or fails after d.
func waitFor[T any](ctx context.Context, ch <-chan T, d time.Duration) (T, error) {
	var zero T
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, nil
	case <-t.C:
		return zero, errTimeout
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}
