//go:build !unix

package pgtest

import (
	"context"
	"errors"
	"os"
	"os/exec"
)

// runner is a stub: a private cluster is started on Unix only.
type runner struct{ user string }

var errNoCluster = errors.New("starting a private PostgreSQL cluster is supported on Unix only: set DATABASE_URL, or run a server on 127.0.0.1:5432")

func newRunner() (runner, error) { return runner{}, errNoCluster }

func (runner) command(ctx context.Context, dir string, daemon bool, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	return cmd
}

func (runner) chown(string) error     { return errNoCluster }
func (runner) reachable(string) error { return errNoCluster }

func interrupt(p *os.Process) error { return p.Kill() }

func alive(int) bool { return true }
