//go:build unix

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// runner runs PostgreSQL's programs as the OS user they must run as:
// this process's own user, or postgres when this process is root (the
// server refuses to run as root).
type runner struct {
	cred   *syscall.Credential // nil: run as this process
	user   string              // name of the OS user, for messages
	groups []uint32            // the user's groups, when cred is set
}

func newRunner() (runner, error) {
	if os.Geteuid() != 0 {
		name := strconv.Itoa(os.Geteuid())
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		return runner{user: name}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return runner{}, fmt.Errorf("this process runs as root and PostgreSQL refuses to, so the cluster must run as the OS user postgres, which is missing (%w); create it, or run as another user, or set DATABASE_URL", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return runner{}, fmt.Errorf("OS user postgres: %w", err)
	}
	groups := []uint32{uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil && !slices.Contains(groups, uint32(g)) {
				groups = append(groups, uint32(g))
			}
		}
	}
	return runner{
		cred:   &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups},
		user:   "postgres",
		groups: groups,
	}, nil
}

// command prepares a PostgreSQL program to run in dir. A server (daemon
// true) gets a process group of its own, so that a Ctrl-C meant for this
// program reaches the server only through stop, and is told to shut down when
// this process dies.
func (r runner) command(ctx context.Context, dir string, daemon bool, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = serverEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.cred}
	if daemon {
		cmd.SysProcAttr.Setpgid = true
		setDeathSignal(cmd.SysProcAttr)
	}
	return cmd
}

// chown gives path to the OS user the server runs as.
func (r runner) chown(path string) error {
	if r.cred == nil {
		return nil
	}
	return os.Chown(path, int(r.cred.Uid), int(r.cred.Gid))
}

// reachable reports an error when the server's OS user cannot enter dir or
// one of its parents.
func (r runner) reachable(dir string) error {
	if r.cred == nil {
		return nil
	}
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		perm := fi.Mode().Perm()
		switch {
		case st.Uid == r.cred.Uid && perm&0o100 != 0:
		case st.Uid != r.cred.Uid && slices.Contains(r.groups, st.Gid) && perm&0o010 != 0:
		case st.Uid != r.cred.Uid && !slices.Contains(r.groups, st.Gid) && perm&0o001 != 0:
		default:
			return fmt.Errorf("PostgreSQL runs as OS user %s, which cannot enter %s (mode %v): choose a directory it can reach, such as one under %s, or open its parents with chmod o+x",
				r.user, p, perm, os.TempDir())
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// interrupt asks a server for a fast shutdown: clients are disconnected and
// the data is checkpointed.
func interrupt(p *os.Process) error { return p.Signal(syscall.SIGINT) }

// alive reports whether a process with this id exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// serverEnv is this process's environment without the PG* variables, which
// would otherwise steer initdb and postgres away from their arguments.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}
