package minimal_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// process is one of the example's programs, run as a process of its own.
type process struct {
	name  string
	cmd   *exec.Cmd
	lines chan string // its output, line by line; closed when it ends
	mu    sync.Mutex
	out   strings.Builder
	done  chan error
}

// start builds the program in dir ("headoffice", "register") and runs it
// with args, its output read line by line; it is killed if still running
// when the test ends.
func start(t *testing.T, name string, env []string, args ...string) *process {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./"+name).CombinedOutput(); err != nil {
		t.Fatalf("go build ./%s: %v\n%s", name, err, out)
	}
	p := &process{name: name, cmd: exec.Command(bin, args...), lines: make(chan string, 1024), done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default: // nobody waits for a line: it is kept in out only
			}
		}
		close(p.lines)
	}()
	go func() {
		err := p.cmd.Wait()
		_ = w.Close()
		p.done <- err
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		t.Logf("%s printed:\n%s", p.name, p.out.String())
	})
	return p
}

// await returns the submatches of the first line of its output matching
// re, failing the test if none came within a minute.
func (p *process) await(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(time.Minute)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("%s ended before printing %q", p.name, re)
			}
			if m := rx.FindStringSubmatch(line); m != nil {
				return m
			}
		case <-deadline:
			t.Fatalf("%s did not print %q within a minute", p.name, re)
		}
	}
}

// stop interrupts the program and waits for it to end, which it must do
// cleanly within 30 s.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("%s ended with %v after Ctrl-C; want a clean end", p.name, err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s still running 30 s after Ctrl-C", p.name)
	}
}

// The minimal head office and register, each a process of its own over
// HTTP: a product the head office adds reaches the register, which sells
// it, and the sale comes up to the head office. Both stop at Ctrl-C.
func TestTheMinimalHeadOfficeAndRegisterSyncAProductDownAndASaleUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "register.token")
	office := start(t, "headoffice", []string{"DATABASE_URL=" + dbURL}, "-addr", "127.0.0.1:0", "-token-file", token)
	addr := office.await(t, `serving the sync endpoints at (http://\S+)/sync/`)[1]

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	coffee := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO shop.products (id, name, price_cents) VALUES ($1, 'Coffee', 250)`, coffee); err != nil {
		t.Fatal(err)
	}
	register := start(t, "register", nil, "-server", addr, "-token-file", token, "-db", filepath.Join(dir, "register.db"), "-every", "100ms")
	register.await(t, `sold Coffee for 250 cents`)

	var cents int64
	deadline := time.Now().Add(time.Minute)
	for cents == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no sale of Coffee filed at the head office within a minute of the register's first")
		}
		err := pool.QueryRow(ctx, `SELECT cents FROM shop.sales WHERE product_id = $1 LIMIT 1`, coffee).Scan(&cents)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // the head office says nothing of what it files
	}
	if cents != 250 {
		t.Errorf("the head office filed a sale of %d cents; want 250", cents)
	}
	register.stop(t)
	office.stop(t)
}
