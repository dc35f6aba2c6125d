package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// program is one of the shop's programs, run by the test as a process of
// its own.
type program struct {
	name string
	cmd  *exec.Cmd
	out  syncBuffer
	done chan struct{}
	err  error
}

// buildShop builds the shop's command into a temporary folder: with the
// race detector when the tests run with it, so that the programs' races
// show too.
func buildShop(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shop")
	args := []string{"build", "-o", bin}
	if raceBuild {
		args = append(args, "-race")
	}
	build := exec.CommandContext(t.Context(), "go", append(args, ".")...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startProgram runs bin with args and, added to the test's, env; it is
// killed if still running when the test ends.
func startProgram(t *testing.T, name, bin string, env []string, args ...string) *program {
	t.Helper()
	p := &program{name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		t.Logf("%s printed:\n%s", p.name, p.out.String())
	})
	return p
}

// await waits until the program printed a line matching re (past the
// first skip bytes of its output), and returns its submatches and where it
// ends.
func (p *program) await(t *testing.T, skip int, re string) ([]string, int) {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []int
	var out string
	waitFor(t, fmt.Sprintf("%s printing %q", p.name, re), func() error {
		select {
		case <-p.done:
			t.Fatalf("%s ended (%v) before printing %q:\n%s", p.name, p.err, re, p.out.String())
		default:
		}
		out = p.out.String()
		if m = rx.FindStringSubmatchIndex(out[skip:]); m == nil {
			return errors.New("not yet")
		}
		return nil
	})
	var subs []string
	for i := 0; i+1 < len(m); i += 2 {
		subs = append(subs, out[skip+m[i]:skip+m[i+1]])
	}
	return subs, skip + m[1]
}

// interrupt sends the program Ctrl-C's signal and checks that it stops, at
// once and cleanly.
func (p *program) interrupt(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("%s, interrupted: %v\n%s", p.name, p.err, p.out.String())
		}
	case <-time.After(settle):
		t.Fatalf("%s still runs %v after Ctrl-C", p.name, settle)
	}
}

// freeAddr is a loopback address no one listens on, for now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitFiled waits until the head office filed the receipt whose id starts
// with prefix, of register i+1, with total cents.
func waitFiled(t *testing.T, pool *pgxpool.Pool, i int, prefix string, cents int64) {
	t.Helper()
	waitFor(t, registerName(i)+"'s receipt "+prefix+" filed at the head office", func() error {
		var total int64
		err := pool.QueryRow(t.Context(), "SELECT total_cents FROM shop.receipts WHERE register_id = $1 AND id::text LIKE $2",
			registerID(i), prefix+"%").Scan(&total)
		if err != nil {
			return err
		}
		if total != cents {
			return fmt.Errorf("filed with a total of %d cents, rung up %d", total, cents)
		}
		return nil
	})
}

// saleRE matches a sale the register program prints.
const saleRE = `register 1 rang up \d line\(s\), €(\d+)\.(\d\d) \(receipt ([0-9a-f]{8})\)`

func centsOf(t *testing.T, euros, cents string) int64 {
	t.Helper()
	e, err1 := strconv.ParseInt(euros, 10, 64)
	c, err2 := strconv.ParseInt(cents, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	return e*100 + c
}

// TestHeadOfficeAndRegisterPrograms runs the head office and register 1 as
// programs of their own, as in a shop: the register, handed its token by
// the file the head office wrote, rings up sales that the head office
// files. The head office restarted keeps the register's token, and the
// register, never restarted, goes on being filed. Both stop at Ctrl-C.
func TestHeadOfficeAndRegisterPrograms(t *testing.T) {
	bin := buildShop(t)
	dbURL := pgtest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL}
	hoData, regData := t.TempDir(), t.TempDir()
	addr := freeAddr(t)
	hoArgs := []string{"headoffice", "-addr", addr, "-data", hoData, "-poll", "1s"}
	ho := startProgram(t, "the head office", bin, env, hoArgs...)
	ho.await(t, 0, `head office up; dashboard at http://`+regexp.QuoteMeta(addr)+`/`)
	m, _ := ho.await(t, 0, `register 1: its token is in (\S+)`)
	tokenFile := m[1]
	if tokenFile != tokenPath(hoData, 0) {
		t.Errorf("register 1's token is in %s; want %s", tokenFile, tokenPath(hoData, 0))
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(tokenFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the token file: %v, %v; want readable by its owner only", fi.Mode(), err)
	}

	reg := startProgram(t, "register 1", bin, nil, "register", "-n", "1", "-server", "http://"+addr,
		"-token-file", tokenFile, "-data", regData, "-every", "200ms", "-poll", "30s")
	reg.await(t, 0, `register 1 up over `+regexp.QuoteMeta(registerFile(regData, 0)))
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	m, _ = reg.await(t, 0, saleRE)
	waitFiled(t, pool, 0, m[3], centsOf(t, m[1], m[2]))
	ho.await(t, 0, `head office: register 1 is online`)

	// Restart the head office while the register waits in a long-poll of
	// 30 s: it stops at once, and hands out the same token again. What the
	// register sells meanwhile is filed once it is back.
	restart := len(reg.out.String())
	ho.interrupt(t)
	ho = startProgram(t, "the head office, restarted", bin, env, hoArgs...)
	ho.await(t, 0, `register 1: its token is in `)
	if again, err := os.ReadFile(tokenFile); err != nil || string(again) != string(token) {
		t.Fatalf("register 1's token changed when the head office restarted (%v)", err)
	}
	m, _ = reg.await(t, restart, saleRE)
	waitFiled(t, pool, 0, m[3], centsOf(t, m[1], m[2]))
	reg.interrupt(t)
	ho.interrupt(t)
	if !strings.Contains(reg.out.String(), "stopping: register 1 finishes what it was sending") {
		t.Error("the register did not say it was stopping")
	}
}

// TestStoppingEndsLongPollsInFlight stops the head office while a
// register, which is not stopping, waits in a long-poll of a minute: the
// head office stops at once, not once the long-poll ends nor after a grace
// period (lengthened to a minute too).
func TestStoppingEndsLongPollsInFlight(t *testing.T) {
	grace := shutdownGrace
	shutdownGrace = time.Minute
	t.Cleanup(func() { shutdownGrace = grace })
	dbURL, data := pgtest.NewDatabase(t), t.TempDir()
	tl := &testLog{t: t}
	t.Cleanup(tl.close)
	log := slog.New(slog.NewTextHandler(tl, &slog.HandlerOptions{Level: slog.LevelError}))
	hoCtx, stopHeadOffice := context.WithCancel(t.Context())
	defer stopHeadOffice()
	ho, err := startHeadOffice(hoCtx, dbURL, "127.0.0.1:0", "", len(registerNames), time.Minute, log)
	if err != nil {
		t.Fatal(err)
	}
	hoDone := make(chan struct{})
	go func() {
		ho.wait()
		close(hoDone)
	}()
	regCtx, stopRegister := context.WithCancel(t.Context())
	if err := ho.hooks.Pass(regCtx); err != nil {
		t.Fatal(err)
	}
	token, _, err := ho.token(regCtx, data, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := startRegister(regCtx, nil, data, 0, ho.url, token, ho.codecs, time.Minute, log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopRegister()
		r.wait()
	}()
	// Provisioned, nothing queued: the register waits in a long-poll.
	waitFor(t, "register 1 provisioned and waiting", func() error {
		all, err := ho.engine.Status(regCtx)
		if err != nil {
			return err
		}
		for _, st := range all {
			if st.ID == r.id {
				if !st.Online || st.Provisioning || st.Queued != 0 || localCount(t, r, "products") != len(productNames) {
					return fmt.Errorf("register 1: %+v", st)
				}
				return nil
			}
		}
		return errors.New("register 1 unknown")
	})
	stopHeadOffice()
	select {
	case <-hoDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the head office did not stop within 10 s: it waits for the register's long-poll")
	}
}
