package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Benchmarks 6, 7 and 9 run the server (and 6 and 7 the replicas) in
// processes of their own — this binary again, with -role — so that each
// one's peak resident memory, and CPU time, is its own. A child reads its spec, one JSON line, from stdin, and
// then commands, one a line; stdin's end tells it to stop. It writes events,
// one JSON line each, on stdout, the last of them "exit" with its peak
// resident memory; its logs go to stderr.

// event is one line a child writes on its stdout.
type event struct {
	Event   string  `json:"event"`
	URL     string  `json:"url,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	Count   int     `json:"count,omitempty"`
	First   float64 `json:"first,omitempty"`
	Median  float64 `json:"median,omitempty"`
	PeakKB  int64   `json:"peak_kb,omitempty"`
	Error   string  `json:"error,omitempty"`
	// The server's "stats": its pool's statements and commits so far, its
	// CPU time (user + system, seconds) and resident memory now.
	Statements int64   `json:"statements,omitempty"`
	Commits    int64   `json:"commits,omitempty"`
	CPU        float64 `json:"cpu,omitempty"`
	RSSKB      int64   `json:"rss_kb,omitempty"`
	// A simulated fleet's "reached": when each replica read the round's
	// row (Unix nanoseconds), and the messages delivered meanwhile.
	Times    []int64 `json:"times,omitempty"`
	Messages int64   `json:"messages,omitempty"`
	Failed   int64   `json:"failed,omitempty"`
}

// child is a running child process, from the parent's side.
type child struct {
	role   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan event // closed when stdout ends
}

// startChild starts this binary as role and hands it spec.
func startChild(role string, spec any) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	line, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-role="+role)
	cmd.Stderr = os.Stderr
	setDeathSignal(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := &child{role: role, cmd: cmd, stdin: stdin, events: make(chan event, 16)}
	// The reader ends when the child's stdout does: at its exit at the
	// latest.
	go func() {
		defer close(ch.events)
		sc := bufio.NewScanner(stdout)
		// A fleet's "reached" holds a time for each of its replicas.
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var e event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				e = event{Event: "error", Error: "unreadable event: " + sc.Text()}
			}
			ch.events <- e
		}
	}()
	if _, err := stdin.Write(append(line, '\n')); err != nil {
		ch.kill()
		return nil, err
	}
	return ch, nil
}

// next waits for the event named want; an "error" event, or the child's
// end, fails.
func (ch *child) next(ctx context.Context, want string, timeout time.Duration) (event, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case e, ok := <-ch.events:
			switch {
			case !ok:
				return event{}, fmt.Errorf("the %s process ended before %q", ch.role, want)
			case e.Event == "error":
				return event{}, fmt.Errorf("the %s process: %s", ch.role, e.Error)
			case e.Event == want:
				return e, nil
			}
		case <-t.C:
			return event{}, fmt.Errorf("the %s process: no %q within %v: %w", ch.role, want, timeout, errTimeout)
		case <-ctx.Done():
			return event{}, ctx.Err()
		}
	}
}

// send writes one command line.
func (ch *child) send(cmd string) error {
	_, err := io.WriteString(ch.stdin, cmd+"\n")
	return err
}

// finish tells the child to stop, and returns its exit event.
func (ch *child) finish(ctx context.Context) (event, error) {
	_ = ch.stdin.Close()
	e, err := ch.next(ctx, "exit", time.Minute)
	if err != nil {
		ch.kill()
		return event{}, err
	}
	for range ch.events {
	}
	if err := ch.cmd.Wait(); err != nil {
		return e, fmt.Errorf("the %s process: %w", ch.role, err)
	}
	return e, nil
}

// finishAll finishes the children one after the other, in the order
// given, and returns their exit events in that order; it stops at the
// first error.
func finishAll(ctx context.Context, chs ...*child) ([]event, error) {
	exits := make([]event, len(chs))
	for i, ch := range chs {
		e, err := ch.finish(ctx)
		if err != nil {
			return nil, err
		}
		exits[i] = e
	}
	return exits, nil
}

// kill ends the child at once (after a failure).
func (ch *child) kill() {
	_ = ch.stdin.Close()
	_ = ch.cmd.Process.Kill()
	for range ch.events {
	}
	_ = ch.cmd.Wait()
}

// childIO is a child's side of the pipes.
type childIO struct {
	mu   sync.Mutex
	out  *json.Encoder
	cmds chan string // closed at stdin's end
	// profile, when set, restarts the CPU profile (the command
	// "profile": only what follows it is profiled).
	profile func() error
}

// command waits for the next command other than "profile", which it
// carries out itself; ok is false at stdin's end.
func (c *childIO) command(ctx context.Context) (cmd string, ok bool) {
	for {
		select {
		case <-ctx.Done():
			return "", false
		case cmd, ok := <-c.cmds:
			if !ok {
				return "", false
			}
			if cmd != "profile" {
				return cmd, true
			}
			if c.profile != nil {
				if err := c.profile(); err != nil {
					c.emit(event{Event: "error", Error: err.Error()})
				}
			}
		}
	}
}

func (c *childIO) emit(e event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.out.Encode(e)
}

// runChild is main for a child process: it runs role until stdin ends and
// returns the exit code.
func runChild(role string) int {
	raiseFileLimit()
	in := bufio.NewReader(os.Stdin)
	cio := &childIO{out: json.NewEncoder(os.Stdout), cmds: make(chan string)}
	spec, err := in.ReadBytes('\n')
	if err != nil {
		cio.emit(event{Event: "error", Error: "reading the spec: " + err.Error()})
		return 2
	}
	if dir := os.Getenv(profileDirEnv); dir != "" {
		path := filepath.Join(dir, role+".cpu")
		stop, err := startProfile(path)
		if err != nil {
			cio.emit(event{Event: "error", Error: err.Error()})
			return 2
		}
		defer func() { stop() }()
		cio.profile = func() error {
			stop()
			stop, err = startProfile(path)
			if err != nil {
				stop = func() {}
			}
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The command reader ends at stdin's end, which also stops the role.
	go func() {
		defer close(cio.cmds)
		defer cancel()
		for {
			line, err := in.ReadString('\n')
			if line = strings.TrimSpace(line); line != "" {
				select {
				case cio.cmds <- line:
				case <-ctx.Done():
				}
			}
			if err != nil {
				return
			}
		}
	}()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})).With("process", role)
	if run, ok := roles[role]; ok {
		err = run(ctx, spec, cio, log)
	} else {
		err = fmt.Errorf("unknown role %q", role)
	}
	code := 0
	if err != nil && !errors.Is(err, context.Canceled) {
		cio.emit(event{Event: "error", Error: err.Error()})
		code = 1
	}
	cio.emit(event{Event: "exit", PeakKB: peakRSS()})
	return code
}

// roleFunc runs a child process's role: its spec is the first line of
// its stdin, still to decode.
type roleFunc func(ctx context.Context, specLine []byte, cio *childIO, log *slog.Logger) error

// roles are the child processes' roles, by the name -role gives.
var roles = map[string]roleFunc{
	"server":   withSpec(runServerChild),
	"replica":  withSpec(runReplicaChild),
	"fleet":    withSpec(runFleetChild),
	"simfleet": withSpec(runSimFleetChild),
	// natsserver is benchmark 17's NATS server.
	"natsserver": withSpec(runNATSServerChild),
}

// withSpec is run as a roleFunc: it decodes the spec line, JSON, into the
// spec run takes.
func withSpec[S any](run func(ctx context.Context, spec S, cio *childIO, log *slog.Logger) error) roleFunc {
	return func(ctx context.Context, specLine []byte, cio *childIO, log *slog.Logger) error {
		var spec S
		if err := json.Unmarshal(specLine, &spec); err != nil {
			return err
		}
		return run(ctx, spec, cio, log)
	}
}

// profileDirEnv names the directory a child writes its CPU profile to,
// <role>.cpu: the parent's -childprofile.
const profileDirEnv = "MAGICSYNC_BENCH_CHILD_PROFILE"

// startProfile writes a CPU profile to path until stop.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// writeSnapshots writes, where -childprofile asks for profiles, what the
// process holds now: <role>.heap (the heap in use) and <role>.goroutines
// (every goroutine's stack, grouped) and <role>.memstats (the runtime's
// counts of stacks and heap), for the RSS of parked polls to be read
// apart. Later snapshots replace earlier ones.
func writeSnapshots(role string) error {
	dir := os.Getenv(profileDirEnv)
	if dir == "" {
		return nil
	}
	for _, p := range []struct {
		name, file string
		debug      int
	}{{"heap", role + ".heap", 0}, {"goroutine", role + ".goroutines", 1}} {
		f, err := os.Create(filepath.Join(dir, p.file))
		if err != nil {
			return err
		}
		err = pprof.Lookup(p.name).WriteTo(f, p.debug)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("writing the %s profile: %w", p.name, err)
		}
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	stats := fmt.Sprintf("goroutines %d\nstack in use %d KB\nheap in use %d KB\nheap idle, not released %d KB\nGC cycles %d\n",
		runtime.NumGoroutine(), m.StackInuse>>10, m.HeapInuse>>10, (m.HeapIdle-m.HeapReleased)>>10, m.NumGC)
	return os.WriteFile(filepath.Join(dir, role+".memstats"), []byte(stats), 0o644)
}

// peakRSS is this process's peak resident memory, in KiB: VmHWM of
// /proc/self/status, or 0 where there is none.
func peakRSS() int64 { return procStatusKB("VmHWM:") }

// residentKB is this process's resident memory now, in KiB: VmRSS of
// /proc/self/status, or 0 where there is none.
func residentKB() int64 { return procStatusKB("VmRSS:") }

// procStatusKB reads one field, in KiB, of /proc/self/status.
func procStatusKB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}

// waitStop waits for stdin's end (ctx ends with it).
func waitStop(ctx context.Context, cio *childIO) {
	for {
		if _, ok := cio.command(ctx); !ok {
			return
		}
	}
}
