package natssync_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/natssync/embedded"
	"github.com/magicsync/magicsync/transport/natssync/headoffice"
)

// childEnv, set to a database's URL, makes the test binary a head-office
// process serving it over the NATS server natsEnv names.
const (
	childEnv = "MAGICSYNC_NATSSYNC_HEADOFFICE_DB"
	natsEnv  = "MAGICSYNC_NATSSYNC_HEADOFFICE_NATS"
)

// runHeadOfficeProcess is a head-office process: the engine over the
// database, serving the replicas over NATS as a member of the queue group,
// until SIGTERM or SIGKILL. It says "ready" on standard output once it
// serves, and logs, one line each, what it hands out and files.
func runHeadOfficeProcess() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "head office:", err)
		return 1
	}
	pool, err := pgxpool.New(ctx, os.Getenv(childEnv))
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	codecs, err := shopCodecs()
	if err != nil {
		return fail(err)
	}
	s, err := server.New(ctx, pool, codecs, serverOptions())
	if err != nil {
		return fail(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _ = s.Run(ctx) })
	nc, err := nats.Connect(os.Getenv(natsEnv), nats.MaxReconnects(-1))
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelDebug}))
	served := make(chan error, 1)
	go func() {
		served <- headoffice.Serve(ctx, nc, headoffice.ForServer(s), headoffice.Options{PollWait: time.Second, Logger: log})
	}()
	if err := nc.Flush(); err != nil {
		return fail(err)
	}
	fmt.Println("ready")
	if err := <-served; err != nil {
		return fail(err)
	}
	return 0
}

// child is a head-office process.
type child struct {
	cmd    *exec.Cmd
	served atomic.Int64 // messages it handed out or filed
	done   chan struct{}
}

// startChild starts a head-office process over the database at dbURL and
// the NATS server at natsURL, and returns once it serves. It is killed,
// at the latest, when the test ends.
func startChild(t *testing.T, dbURL, natsURL string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dbURL, natsEnv+"="+natsURL)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "ready":
				close(ready)
			case strings.Contains(line, "message filed"), strings.Contains(line, "message handed out"):
				c.served.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-c.done
	})
	select {
	case <-ready:
	case <-c.done:
		t.Fatal("the head-office process ended before it served")
	case <-time.After(30 * time.Second):
		t.Fatal("the head-office process did not serve within 30 s")
	}
	return c
}

// Two head-office processes serve the same registers as a queue group,
// both taking a share of the work. One is SIGKILLed mid-trade: the
// registers keep selling, the other takes all the work, and every sale is
// filed once, every change reaches the registers — nothing lost.
func TestTwoHeadOfficesServeAsAQueueGroupAndOneKilledLosesNothing(t *testing.T) {
	t.Parallel()
	o := newOffice(t)
	ns := startNATS(t, embedded.Options{})
	a, b := startChild(t, o.url, ns.URL()), startChild(t, o.url, ns.URL())
	coffee := o.addProduct("coffee", 250)
	var regs []*register
	for range 3 {
		id, token := o.addRegister()
		regs = append(regs, startRegister(t, o.codecs, ns.URL(), id, token))
	}
	sold := 0
	sell := func() {
		for range 5 {
			for _, g := range regs {
				g.sell(100)
				sold++
			}
		}
	}
	filed := func() bool { return o.count(`SELECT count(*) FROM shop.receipts`) == sold }
	sell()
	eventually(t, "the first sales are filed and the coffee reaches every register", func() bool {
		for _, g := range regs {
			if g.price(coffee) != 250 {
				return false
			}
		}
		return filed()
	})
	eventually(t, "both head offices take a share of the work", func() bool {
		return a.served.Load() > 0 && b.served.Load() > 0
	})

	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	before := b.served.Load()
	sell()
	defer func() {
		if t.Failed() {
			t.Logf("%d sales of %d filed; served after the kill: %d", o.count(`SELECT count(*) FROM shop.receipts`), sold, b.served.Load()-before)
		}
	}()
	tea := o.addProduct("tea", 180)
	eventually(t, "every sale is filed and the tea reaches every register, through the head office left", func() bool {
		for _, g := range regs {
			if g.price(tea) != 180 {
				return false
			}
		}
		return filed()
	})
	if b.served.Load() == before {
		t.Fatal("the head office left served nothing after the other was killed")
	}
	if n := o.count(`SELECT count(DISTINCT (register_id, id)) FROM shop.receipts`); n != sold {
		t.Fatalf("%d distinct sales filed; want %d", n, sold)
	}
}
