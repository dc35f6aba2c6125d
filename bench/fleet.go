package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/httpsync"
)

// fleetMember is one replica of a fleet, and its token.
type fleetMember struct {
	ID    uuid.UUID `json:"id"`
	Token string    `json:"token"`
}

// fleetSpec is the spec of the fleet process: many replicas, each over a
// SQLite file of its own, long-polling one server.
type fleetSpec struct {
	URL         string        `json:"url"`
	DatabaseURL string        `json:"database_url"`
	Dir         string        `json:"dir"`
	Replicas    []fleetMember `json:"replicas"`
	Item        uuid.UUID     `json:"item"`
	// Idle is the replicas' upward loop's idle wait.
	Idle time.Duration `json:"idle"`
}

// runFleetChild starts the replicas and waits for them to be provisioned
// ("provisioned"); on the command "go" it updates one item on the server
// and waits until every replica applied it ("applied": Seconds from before
// the UPDATE until the last replica's Receive returned, Count).
func runFleetChild(ctx context.Context, spec fleetSpec, cio *childIO, log *slog.Logger) error {
	p, err := newFleetProcess(spec, log)
	if err != nil {
		return err
	}
	defer p.stopReplicas()
	if err := p.startReplicas(ctx); err != nil {
		return err
	}
	n := len(spec.Replicas)
	cio.emit(event{Event: "started", Count: n})
	if err := p.waitProvisioned(ctx); err != nil {
		return err
	}
	cio.emit(event{Event: "provisioned", Count: n})
	conn, err := pgx.Connect(ctx, spec.DatabaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if cmd, ok := cio.command(ctx); !ok || cmd != "go" {
		return errors.New("stopped before the change")
	}
	applied, err := p.change(ctx, conn)
	if err != nil {
		return err
	}
	cio.emit(applied)
	waitStop(ctx, cio)
	return nil
}

// fleetProcess is the fleet process's replicas, and its count of those
// provisioned and of those that applied the change: each replica counts
// once, however many times it is provisioned or sent the change.
type fleetProcess struct {
	spec   fleetSpec
	n      int
	codecs *magicsync.Codecs
	log    *slog.Logger
	hc     *http.Client
	reps   []*httpReplica // by index; nil until started
	key    magicsync.Key  // the item's, which the change updates

	provisioned, applied       atomic.Int64
	allProvisioned, allApplied chan struct{}
	// armed is set just before the change: what a replica applied before
	// is not the change.
	armed     atomic.Bool
	appliedMu sync.Mutex
	appliedAt []time.Time // when each replica applied the change
}

// newFleetProcess is the fleet of spec, its replicas not started.
func newFleetProcess(spec fleetSpec, log *slog.Logger) (*fleetProcess, error) {
	codecs, err := benchCodecs()
	if err != nil {
		return nil, err
	}
	tc, err := codec.TableOf[Item](codecs)
	if err != nil {
		return nil, err
	}
	key, err := tc.KeyOf(&Item{ID: spec.Item})
	if err != nil {
		return nil, err
	}
	n := len(spec.Replicas)
	return &fleetProcess{spec: spec, n: n, codecs: codecs, log: log, hc: httpClient(2*n + 16), reps: make([]*httpReplica, n), key: magicsync.Key(key),
		allProvisioned: make(chan struct{}), allApplied: make(chan struct{})}, nil
}

// receiver wraps a replica's Receive to count the replica provisioned, and
// when it applied the change.
func (p *fleetProcess) receiver(r *replica.Replica) httpsync.Receiver {
	var wasProvisioned, hasApplied atomic.Bool
	return receiveFunc(func(ctx context.Context, msg []byte) (replica.Received, error) {
		got, err := r.Endpoint().Receive(ctx, msg)
		switch {
		case err != nil:
		case got.Provisioned:
			if wasProvisioned.CompareAndSwap(false, true) && p.provisioned.Add(1) == int64(p.n) {
				close(p.allProvisioned)
			}
		case p.armed.Load() && slices.Contains(got.Applied["items"], p.key) && hasApplied.CompareAndSwap(false, true):
			p.appliedMu.Lock()
			p.appliedAt = append(p.appliedAt, time.Now())
			p.appliedMu.Unlock()
			if p.applied.Add(1) == int64(p.n) {
				close(p.allApplied)
			}
		}
		return got, err
	})
}

// startReplicas starts the replicas a few at a time: each is a new SQLite
// file, installed. It returns the first error.
func (p *fleetProcess) startReplicas(ctx context.Context) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= p.n || ctx.Err() != nil {
					return
				}
				m := p.spec.Replicas[i]
				r, err := startReplica(ctx, replicaSpec{path: filepath.Join(p.spec.Dir, fmt.Sprintf("fleet-%04d.db", i)), id: m.ID, token: m.Token,
					url: p.spec.URL, hc: p.hc, log: p.log, idle: p.spec.Idle, codecs: p.codecs, wrap: p.receiver})
				if err != nil {
					errs <- err
					return
				}
				p.reps[i] = r
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// stopReplicas stops the replicas started, all at once, and closes the
// idle connections of their client.
func (p *fleetProcess) stopReplicas() {
	var wg sync.WaitGroup
	for _, r := range p.reps {
		if r != nil {
			wg.Go(func() { _ = r.stop() })
		}
	}
	wg.Wait()
	p.hc.CloseIdleConnections()
}

// waitProvisioned waits until every replica was provisioned.
func (p *fleetProcess) waitProvisioned(ctx context.Context) error {
	select {
	case <-p.allProvisioned:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Minute):
		return fmt.Errorf("%d of %d replicas provisioned: %w", p.provisioned.Load(), p.n, errTimeout)
	}
}

// change updates the item on the server and waits until every replica
// applied it. Its "applied" event says when the replicas did, from before
// the UPDATE: the last, the first and the median.
func (p *fleetProcess) change(ctx context.Context, conn *pgx.Conn) (event, error) {
	p.armed.Store(true)
	start := time.Now()
	if _, err := conn.Exec(ctx, `UPDATE bench.items SET price = price + 1, updated_at = clock_timestamp() WHERE id = $1`, p.spec.Item); err != nil {
		return event{}, err
	}
	select {
	case <-p.allApplied:
	case <-ctx.Done():
		return event{}, ctx.Err()
	case <-time.After(time.Minute):
		return event{}, fmt.Errorf("%d of %d replicas applied the change within a minute: %w", p.applied.Load(), p.n, errTimeout)
	}
	p.appliedMu.Lock()
	at := slices.Clone(p.appliedAt)
	p.appliedMu.Unlock()
	return event{Event: "applied", Seconds: at[len(at)-1].Sub(start).Seconds(), Count: len(at),
		First: at[0].Sub(start).Seconds(), Median: at[len(at)/2].Sub(start).Seconds()}, nil
}

// benchFleet: 1,000 replicas, each a replica engine over a SQLite file of
// its own, long-poll one server process over httpsync; then one broadcast
// row changes. Measured from before the UPDATE until the last replica's
// Receive returned, and the server process's peak resident memory over the
// whole run (provisioning the fleet included). The replicas share one
// process, apart from the server's.
func benchFleet(ctx context.Context, c config) (_ []result, err error) {
	n := c.scale(1_000, 50)
	rows := items(10, 7)
	e, members, err := newIssuedEnv(ctx, c, 8, n, rows)
	if err != nil {
		return nil, err
	}
	defer e.close()
	srv, url, err := startServerChild(ctx, serverChildSpec{DatabaseURL: e.db.url, MaxConns: 16, SQLStats: c.sqlStats})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			srv.kill()
		}
	}()
	start := time.Now()
	fleet, err := startChild("fleet", fleetSpec{URL: url, DatabaseURL: e.db.url, Dir: c.dir, Replicas: members, Item: rows[0].ID, Idle: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			fleet.kill()
		}
	}()
	if _, err := fleet.next(ctx, "started", 10*time.Minute); err != nil {
		return nil, err
	}
	c.note("%d replicas started in %v", n, time.Since(start).Round(time.Millisecond))
	if _, err := fleet.next(ctx, "provisioned", 10*time.Minute); err != nil {
		return nil, err
	}
	c.note("%d replicas provisioned after %v", n, time.Since(start).Round(time.Millisecond))
	if err := waitQuiet(ctx, e, time.Minute); err != nil {
		return nil, err
	}
	if os.Getenv(profileDirEnv) != "" || c.sqlStats {
		for _, ch := range []*child{srv, fleet} {
			if err := ch.send("profile"); err != nil {
				return nil, err
			}
		}
	}
	if err := fleet.send("go"); err != nil {
		return nil, err
	}
	got, err := fleet.next(ctx, "applied", 2*time.Minute)
	if err != nil {
		return nil, err
	}
	exits, err := finishAll(ctx, fleet, srv)
	if err != nil {
		return nil, err
	}
	srvExit := exits[1]
	return []result{
		{name: "7 change reaches every long-polling replica", unit: "s", figure: got.Seconds, bounds: []bound{ceiling(2)},
			note: fmt.Sprintf("%d replicas, each its own SQLite file, in one process; one broadcast row updated; first after %.0f ms, half after %.0f ms",
				got.Count, got.First*1000, got.Median*1000)},
		{name: "7 server peak RSS", unit: "MB", figure: float64(srvExit.PeakKB) / 1024, bounds: []bound{ceiling(1024)},
			note: fmt.Sprintf("VmHWM of the server process serving %d long-polls", n)},
	}, nil
}

// waitQuiet waits until every replica acknowledged everything: nothing in
// an outbox, no provisioning, every cursor at its group's head. Then every
// replica is waiting in a long-poll.
func waitQuiet(ctx context.Context, e *serverEnv, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		busy, err := e.stillOwed(ctx)
		if err != nil {
			return err
		}
		if !busy {
			// Let the last acknowledgements' long-polls begin.
			time.Sleep(500 * time.Millisecond)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the fleet did not settle: %w", errTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
