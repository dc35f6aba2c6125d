package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// procs.go holds the programs the soak runs: the shop's head office and
// registers, each a process of its own, killed and started again.

// program is one of the shop's programs, run as a process; it can be
// killed (SIGKILL), stopped (SIGTERM) and started again. Its output goes
// to a log file of its own, appended to at each start.
type program struct {
	name string
	bin  string
	env  []string
	log  string

	// strike is held by whatever kills the program, starts it again or,
	// for a register, reads or replaces its file whole (a kill, a copy put
	// back, a copy taken, a death found), so that none of these overlaps
	// another.
	strike sync.Mutex

	mu     sync.Mutex
	args   []string // the next start's
	cmd    *exec.Cmd
	exited chan struct{}    // closed once the process of cmd ended
	state  *os.ProcessState // how the process of cmd ended, once exited is closed
	starts int
}

// setArgs sets the arguments of the program's next start.
func (p *program) setArgs(args []string) {
	p.mu.Lock()
	p.args = slices.Clone(args)
	p.mu.Unlock()
}

// start starts the program unless it runs. A process that ended by
// itself is left for restartDied to find: start does not hide it.
func (p *program) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	return p.startLocked()
}

func (p *program) startLocked() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening %s's log: %w", p.name, err)
	}
	p.starts++
	fmt.Fprintf(f, "\n=== soak: start %d of %s at %s\n", p.starts, p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() { // owned by the process: it ends when the process does
		_ = cmd.Wait()
		f.Close()
		p.mu.Lock()
		if p.cmd == cmd {
			p.state = cmd.ProcessState
		}
		p.mu.Unlock()
		close(exited)
	}()
	p.cmd, p.exited, p.state = cmd, exited, nil
	return nil
}

// running reports whether the program's process is alive.
func (p *program) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill kills the process with SIGKILL and waits for it to be gone.
func (p *program) kill() { p.signal(syscall.SIGKILL, 0) }

// stop asks the process to stop (SIGTERM), and kills it when it has not
// within grace.
func (p *program) stop(grace time.Duration) { p.signal(syscall.SIGTERM, grace) }

// signal sends the process sig and waits for it to end, killing it once
// grace passed (grace 0: waiting as long as it takes).
func (p *program) signal(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	if grace > 0 {
		select {
		case <-exited:
			return
		case <-time.After(grace):
			_ = cmd.Process.Kill()
		}
	}
	<-exited
}

// ended returns how the program's process ended, if it ended by itself
// (not stopped by the soak), and forgets it, so that start runs it
// again; nil while it runs.
func (p *program) ended() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	select {
	case <-p.exited:
	default:
		return nil
	}
	p.cmd = nil
	return p.state
}

// killedBySignal reports whether a process ended by SIGKILL.
func killedBySignal(st *os.ProcessState) bool {
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// crashed reports whether a process ended as no program of the shop
// should: by a signal, or with Go's exit code of a panic (2). Exit code 1
// is the shop's for an error it names, such as a database it cannot
// reach as it starts, after which a supervisor starts it again.
func crashed(st *os.ProcessState) bool {
	return st.ExitCode() != 1
}

// buildShop builds the shop's program into dir, from the workspace at root.
func buildShop(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "shop")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/shop")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the shop's program: %w\n%s", err, out)
	}
	return bin, nil
}

// workspaceRoot finds the folder holding go.work, from the working
// directory up: the soak runs from anywhere in the repository.
func workspaceRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory: run the soak from the magicsync repository")
		}
		dir = parent
	}
}
