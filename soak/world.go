package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// world.go holds the shop the soak runs: a private PostgreSQL, the head
// offices and the registers as processes, and the links between them.

// office is one head-office process.
type office struct {
	*program
	addr string
}

// register is one register process, its link and its file.
type register struct {
	*program
	n     int // 1-based, as the shop numbers them
	link  *link
	file  string
	drill string // its drill file (see drill.go)
	// restored is set once the file was put back from an older copy: the
	// head office then keeps receipts the file lacks.
	restored atomic.Bool
}

// world is everything the soak runs, and where.
type world struct {
	cfg   config
	dir   string
	bin   string
	pg    *pgtest.Cluster
	dbURL string
	pool  *pgxpool.Pool
	data  string // the head offices' data folder (tokens, dashboard password)

	offices []*office
	regs    []*register
	tally   *tally
	rnd     *lockedRand
	say     func(format string, args ...any)
	faults  *os.File // logs/faults.log: each fault beside the links', with its target

	mu      sync.Mutex
	pick    int // round robin over the head offices
	written *oracle
	drills  drills
}

// openWorld starts PostgreSQL and the shop's programs in dir.
func openWorld(ctx context.Context, cfg config, dir, bin string, say func(string, ...any)) (_ *world, err error) {
	w := &world{cfg: cfg, dir: dir, bin: bin, tally: newTally(), rnd: newLockedRand(cfg.seed, 1), say: say,
		data: filepath.Join(dir, "office"), written: newOracle()}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	for _, sub := range []string{"logs", "registers", "copies", w.data} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	if w.faults, err = os.Create(filepath.Join(dir, "logs", "faults.log")); err != nil {
		return nil, err
	}
	say("starting PostgreSQL in %s", filepath.Join(dir, "pg"))
	if w.pg, err = pgtest.OpenCluster(ctx, filepath.Join(dir, "pg")); err != nil {
		return nil, err
	}
	if w.dbURL, err = pgtest.EnsureDatabase(ctx, w.pg.URL(), "shop"); err != nil {
		return nil, err
	}
	if w.pool, err = pgxpool.New(ctx, w.dbURL); err != nil {
		return nil, err
	}
	for i := range cfg.offices {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		w.offices = append(w.offices, &office{addr: addr, program: &program{
			name: fmt.Sprintf("head office %d", i+1), bin: bin,
			args: officeArgs(addr, w.data, cfg.registers, false),
			env:  []string{"DATABASE_URL=" + w.dbURL},
			log:  filepath.Join(dir, "logs", fmt.Sprintf("office-%d.log", i+1)),
		}})
	}
	say("starting %d head-office process(es)", len(w.offices))
	if err := w.startOffices(ctx); err != nil {
		return nil, err
	}
	for i := range cfg.registers {
		n := i + 1
		l, err := newLink(fmt.Sprintf("register %d", n), w.upstream, w.tally, newLockedRand(cfg.seed, uint64(100+n)))
		if err != nil {
			return nil, err
		}
		r := &register{n: n, link: l, file: filepath.Join(dir, "registers", fmt.Sprintf("register-%d.db", n)),
			drill: filepath.Join(dir, "registers", fmt.Sprintf("register-%d.drill", n)), program: &program{
				name: fmt.Sprintf("register %d", n), bin: bin,
				log: filepath.Join(dir, "logs", fmt.Sprintf("register-%d.log", n)),
			}}
		r.sell(cfg.saleEvery)
		w.regs = append(w.regs, r)
	}
	say("starting %d registers, each behind a link of its own", len(w.regs))
	for _, r := range w.regs {
		if err := r.start(); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// sell sets the register's arguments, selling every so often.
func (r *register) sell(every time.Duration) {
	r.args = []string{"register", "-n", strconv.Itoa(r.n), "-server", r.link.url(),
		"-token-file", filepath.Join(filepath.Dir(filepath.Dir(r.file)), "office", "tokens", fmt.Sprintf("register-%d.token", r.n)),
		"-data", filepath.Dir(r.file), "-drill", r.drill, "-every", every.String(), "-poll", "1s", "-v"}
}

// officeArgs are a head office's arguments; a wishing one acts as a busy
// operator, making and withdrawing wishes and rolling footers out.
func officeArgs(addr, data string, registers int, wishing bool) []string {
	args := []string{"headoffice", "-addr", addr, "-data", data, "-registers", strconv.Itoa(registers), "-poll", "1s", "-v"}
	if wishing {
		args = append(args, "-wish-every", "700ms")
	}
	return args
}

// setWishing starts the first head office again, wishing or not: it
// wishes during storms, and stops in calms so that agreement is a fixed
// point.
func (w *world) setWishing(ctx context.Context, on bool) error {
	o := w.offices[0]
	o.stop(10 * time.Second)
	o.args = officeArgs(o.addr, w.data, w.cfg.registers, on)
	return w.startOffices(ctx)
}

// startOffices starts the head offices that are not running and waits
// until each listens and the registers' tokens are issued.
func (w *world) startOffices(ctx context.Context) error {
	for _, o := range w.offices {
		if err := o.start(); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, o := range w.offices {
		for !listens(o.addr) {
			if !o.running() {
				return fmt.Errorf("%s stopped as it started; its log: %s", o.name, o.log)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s does not listen on %s after 2 minutes; its log: %s", o.name, o.addr, o.log)
			}
			sleep(ctx, 50*time.Millisecond)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	for n := 1; n <= w.cfg.registers; n++ {
		path := filepath.Join(w.data, "tokens", fmt.Sprintf("register-%d.token", n))
		for {
			if _, err := os.Stat(path); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no token for register %d in %s after 2 minutes", n, path)
			}
			sleep(ctx, 50*time.Millisecond)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return nil
}

// logFault notes a fault in logs/faults.log, with when and where.
func (w *world) logFault(format string, args ...any) {
	fmt.Fprintf(w.faults, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// upstream returns a running head office's URL, taking turns, other than
// after when another runs.
func (w *world) upstream(after string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for range w.offices {
		w.pick = (w.pick + 1) % len(w.offices)
		o := w.offices[w.pick]
		if u := "http://" + o.addr; o.running() && u != after {
			return u
		}
	}
	return "http://" + w.offices[w.pick].addr
}

// close stops every program, the links and PostgreSQL.
func (w *world) close() {
	w.stopPrograms()
	if w.pool != nil {
		w.pool.Close()
	}
	if w.pg != nil {
		if err := w.pg.Stop(); err != nil {
			w.say("stopping PostgreSQL: %v", err)
		}
	}
	if w.faults != nil {
		w.faults.Close()
	}
}

// stopPrograms stops the registers (SIGTERM, each saving what its till
// kept), their links and the head offices.
func (w *world) stopPrograms() {
	var wg sync.WaitGroup
	for _, r := range w.regs {
		wg.Go(func() { r.stop(10 * time.Second) })
	}
	wg.Wait()
	for _, r := range w.regs {
		r.link.close()
	}
	for _, o := range w.offices {
		wg.Go(func() { o.stop(10 * time.Second) })
	}
	wg.Wait()
}

// freeAddr returns a loopback address no one listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// listens reports whether something accepts connections at addr.
func listens(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
