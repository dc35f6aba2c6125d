package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/magicsync/magicsync/internal/testenv"
)

// Cluster is a private PostgreSQL cluster of one test's own, which the test
// may stop and start again under the code it tests — to see that code live
// through a database outage. Unlike the test binary's shared server it is
// always a cluster started here from the local PostgreSQL binaries, whatever
// $DATABASE_URL says, listening on a Unix socket only; its connection string
// stays the same across restarts.
type Cluster struct {
	dir string
	url string

	mu   sync.Mutex
	stop func() error // nil while stopped
}

// NewCluster creates and starts a private cluster for t, with fsync off,
// and stops and removes it when t ends. A machine without the PostgreSQL
// server programs skips the test, or fails it under CI.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	if _, err := findBinaries(context.Background(), 0); err != nil {
		testenv.Missing(t, "no local PostgreSQL server programs (initdb and postgres): "+err.Error(), "the tests of a database outage")
	}
	sweepThrowaways(func(string, ...any) {})
	// Under the system's temporary folder, as a throwaway cluster: the OS
	// user postgres must reach it when the test runs as root, and an
	// owner.pid lets a later run sweep it if this process dies.
	dir, err := os.MkdirTemp("", throwawayPrefix)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{dir: dir}
	t.Cleanup(func() {
		if err := errors.Join(c.Stop(), os.RemoveAll(dir)); err != nil {
			t.Errorf("pgtest: removing the cluster: %v", err)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatalf("pgtest: starting a private cluster: %v", err)
	}
	return c
}

// OpenCluster starts a private cluster in dir for a program that stops
// and starts it under the code it runs, as the soak does: dir is created
// when missing and kept when the cluster stops, and a cluster left
// running there by an earlier run is used as it is. Its commits do not
// wait for the disk (fsync off): a restart shuts it down cleanly, which
// keeps every commit; the program calls Stop before it exits.
func OpenCluster(ctx context.Context, dir string) (*Cluster, error) {
	if _, err := findBinaries(ctx, 0); err != nil {
		return nil, fmt.Errorf("pgtest: no local PostgreSQL server programs (initdb and postgres): %w", err)
	}
	c := &Cluster{dir: dir}
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("pgtest: starting a private cluster in %s: %w", dir, err)
	}
	return c, nil
}

// Program returns the path of one of PostgreSQL's programs (pg_dump,
// pg_restore) of the same installation as the cluster's server.
func Program(ctx context.Context, name string) (string, error) {
	b, err := findBinaries(ctx, 0)
	if err != nil {
		return "", err
	}
	p := filepath.Join(b.dir, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("pgtest: PostgreSQL's %s is not beside its server programs: %w", name, err)
	}
	return p, nil
}

// URL is the cluster's server-level connection string (user and database
// postgres), the same while it runs and after it restarts.
func (c *Cluster) URL() string { return c.url }

// Start starts the cluster again after Stop, and waits until it accepts
// connections; it does nothing while it runs.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop != nil {
		return nil
	}
	u, stop, err := startCluster(ctx, clusterOptions{dir: c.dir, fast: true, logf: func(string, ...any) {}})
	if err != nil {
		return err
	}
	if c.url != "" && u != c.url {
		return errors.Join(errors.New("pgtest: the cluster came back under another address: "+u), stop())
	}
	c.url, c.stop = u, stop
	return nil
}

// Stop shuts the cluster down (a fast shutdown: the connections open are
// cut) and waits until it is down; it does nothing while it is stopped.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop == nil {
		return nil
	}
	err := c.stop()
	c.stop = nil
	return err
}
