package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// clusterPort names the Unix socket (.s.PGSQL.5432); the cluster
	// listens on no TCP port, so it cannot collide with another server.
	clusterPort = 5432
	// maxSocketPath keeps the socket's path within sun_path (108 bytes on
	// Linux, 104 on macOS).
	maxSocketPath = 100
	// startTimeout bounds initdb and the wait for the server to accept
	// connections; stopTimeout bounds its shutdown.
	startTimeout = 2 * time.Minute
	stopTimeout  = time.Minute
)

// clusterOptions say where and how to run a private cluster.
type clusterOptions struct {
	// dir holds the cluster: data/, postgres.log and, when its path is short
	// enough, the socket. It is created when missing; its parent must exist.
	dir string
	// throwaway trades durability for speed (fsync off) and removes dir when
	// the cluster is stopped.
	throwaway bool
	// durable keeps a throwaway cluster's commits waiting for the disk:
	// removed when stopped, yet run with fsync, synchronous_commit and
	// full_page_writes on, as a production server is.
	durable bool
	// fast trades durability for speed as throwaway does, but keeps dir
	// when the cluster is stopped, to be started again.
	fast bool
	// logical runs the cluster with wal_level=logical, for the tests of
	// capture by logical replication.
	logical bool
	logf    func(format string, args ...any)
}

// unsafe reports whether the cluster trades durability for speed: its
// commits do not wait for the disk.
func (o clusterOptions) unsafe() bool {
	return o.fast || o.throwaway && !o.durable
}

// startCluster starts the cluster in o.dir, creating it first when it does
// not exist yet, and returns a server-level connection string (user and
// database postgres, over the Unix socket) and a function that stops it. A
// server already running on the same data directory is used as it is, and is
// left running by stop.
func startCluster(ctx context.Context, o clusterOptions) (connString string, stop func() error, err error) {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return "", nil, err
	}
	run, err := newRunner()
	if err != nil {
		return "", nil, err
	}
	if err := run.reachable(filepath.Dir(dir)); err != nil {
		return "", nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", nil, err
	}
	if err := run.chown(dir); err != nil {
		return "", nil, err
	}
	data := filepath.Join(dir, "data")

	if u, ok := runningServer(ctx, data); ok {
		o.logf("pgtest: using the PostgreSQL server already running on %s", data)
		return u, func() error { return nil }, nil
	}

	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()

	bins, err := initCluster(ctx, o, run, dir, data)
	if err != nil {
		return "", nil, err
	}

	sockDir, removeSock, err := socketDir(run, dir)
	if err != nil {
		return "", nil, err
	}

	args := []string{"-D", data, "-p", strconv.Itoa(clusterPort),
		"-c", "listen_addresses=", "-c", "unix_socket_directories=" + sockDir,
		"-c", "max_connections=200"}
	if o.unsafe() {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	if o.logical {
		args = append(args, "-c", "wal_level=logical", "-c", "max_replication_slots=100", "-c", "max_wal_senders=100")
	}
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", nil, errors.Join(err, removeSock())
	}
	cmd := run.command(context.Background(), dir, true, bins.postgres(), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	d, err := startDaemon(cmd)
	logFile.Close() // the server holds its own descriptor
	if err != nil {
		return "", nil, errors.Join(fmt.Errorf("starting postgres: %w", err), removeSock())
	}

	connString = socketURL(sockDir, clusterPort)
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() {
			stopErr = errors.Join(d.stop(stopTimeout), removeSock())
			if o.throwaway {
				stopErr = errors.Join(stopErr, os.RemoveAll(dir))
			}
		})
		return stopErr
	}
	if err := d.waitReady(ctx, connString, logPath); err != nil {
		return "", nil, errors.Join(err, stop())
	}
	return connString, stop, nil
}

// initCluster finds the binaries of the data directory's major version
// (any, for a new one) and, when the directory holds no cluster, makes
// one with initdb as the runner's OS user.
func initCluster(ctx context.Context, o clusterOptions, run runner, dir, data string) (binaries, error) {
	major := 0
	if v, err := os.ReadFile(filepath.Join(data, "PG_VERSION")); err == nil {
		if major, err = strconv.Atoi(strings.TrimSpace(string(v))); err != nil || major <= 0 {
			return binaries{}, fmt.Errorf("%s: unreadable PG_VERSION %q", data, v)
		}
	}
	bins, err := findBinaries(ctx, major)
	if err != nil {
		return binaries{}, err
	}
	if major == 0 {
		// A data directory without PG_VERSION is what an interrupted initdb
		// leaves behind.
		if err := os.RemoveAll(data); err != nil {
			return binaries{}, err
		}
		o.logf("pgtest: creating a PostgreSQL %s cluster in %s (as OS user %s)", bins.version, data, run.user)
		args := []string{"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale"}
		if o.unsafe() {
			args = append(args, "--no-sync")
		}
		if out, err := run.command(ctx, dir, false, bins.initdb(), args...).CombinedOutput(); err != nil {
			return binaries{}, fmt.Errorf("initdb %s: %w\n%s", data, err, out)
		}
	}
	return bins, nil
}

// socketDir returns the directory of the server's Unix socket: dir, or a
// temporary one when dir's path is too long for a socket or holds a
// character the connection string cannot, with how to remove it.
func socketDir(run runner, dir string) (string, func() error, error) {
	if len(filepath.Join(dir, ".s.PGSQL.5432")) <= maxSocketPath && !strings.ContainsAny(dir, `,"'\ `) {
		return dir, func() error { return nil }, nil
	}
	sockDir, err := os.MkdirTemp("", "pgsock-")
	if err != nil {
		return "", nil, err
	}
	if err := run.chown(sockDir); err != nil {
		return "", nil, errors.Join(err, os.RemoveAll(sockDir))
	}
	return sockDir, func() error { return os.RemoveAll(sockDir) }, nil
}

// socketURL is the connection string of user and database postgres on the
// server whose socket is in dir.
func socketURL(dir string, port int) string {
	q := url.Values{"host": {dir}, "port": {strconv.Itoa(port)}, "sslmode": {"disable"}}
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/postgres", RawQuery: q.Encode()}
	return u.String()
}

// runningServer returns the connection string of a server that is running
// on data and answers.
func runningServer(ctx context.Context, data string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return "", false
	}
	// Line 1 is the process id, line 4 the port and line 5 the socket directory.
	lines := strings.Split(string(b), "\n")
	if len(lines) < 5 {
		return "", false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	sock := strings.TrimSpace(lines[4])
	if err1 != nil || err2 != nil || sock == "" || !alive(pid) {
		return "", false
	}
	u := socketURL(sock, port)
	if ping(ctx, u, probeTimeout) != nil {
		return "", false
	}
	return u, true
}

// daemon is a server process started by startCluster.
type daemon struct {
	proc    *os.Process
	exited  chan struct{} // closed once the process has exited
	waitErr error         // how it exited; read only after exited is closed
}

// startDaemon starts cmd and watches for its end.
func startDaemon(cmd *exec.Cmd) (*daemon, error) {
	d := &daemon{exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Linux sends the parent-death signal when the thread that started
		// the child ends, not the process; holding this thread for as long as
		// the server runs keeps the runtime from ending it under the server.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		d.proc = cmd.Process
		started <- nil
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return d, nil
}

// waitReady polls the server until it accepts a connection, it exits, or ctx
// ends.
func (d *daemon) waitReady(ctx context.Context, connString, logPath string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ping(ctx, connString, time.Second)
		if err == nil {
			return nil
		}
		select {
		case <-d.exited:
			return fmt.Errorf("postgres exited (%v) before accepting connections; %s ends:\n%s", d.waitErr, logPath, tail(logPath))
		case <-ctx.Done():
			return fmt.Errorf("postgres did not accept connections in time (%v); %s ends:\n%s", err, logPath, tail(logPath))
		case <-tick.C:
		}
	}
}

// stop asks the server for a fast shutdown and waits for it, killing it when
// it takes longer than timeout.
func (d *daemon) stop(timeout time.Duration) error {
	select {
	case <-d.exited:
		return nil
	default:
	}
	if err := interrupt(d.proc); err != nil {
		select {
		case <-d.exited:
			return nil
		default:
			return err
		}
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-d.exited:
		return nil
	case <-t.C:
	}
	err := d.proc.Kill()
	<-d.exited
	return errors.Join(fmt.Errorf("postgres did not shut down within %v and was killed", timeout), err)
}

// ping connects to connString and disconnects, within timeout.
func ping(ctx context.Context, connString string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := pgconn.Connect(ctx, connString)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

// tail returns the last lines of a log file.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
