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

	"github.com/google/uuid"
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
	// shops are the head office's shop, where every register starts, and
	// the second shop the soak opens (see openShops); the operator moves
	// registers between them.
	shops [2]uuid.UUID

	offices []*office
	regs    []*register
	tally   *tally
	// The draws of the faults, of the operator's catalog writes and of the
	// copies, each a stream of its own, so that a seed draws the same of
	// each however the goroutines interleave.
	rnd, catalogRnd, copyRnd *lockedRand
	sayMu                    sync.Mutex
	out                      func(format string, args ...any)
	faults                   *os.File // logs/faults.log: each fault beside the links', with its target

	written *oracle
	drills  drills
	// restoring is held (written) while the database is dropped and
	// restored: the operator's writes wait (read) meanwhile, as an
	// operator restoring a backup would not write to it half restored —
	// a row written before the restore put the triggers back would never
	// be noted.
	restoring sync.RWMutex

	upMu sync.Mutex
	pick int // round robin over the head offices

	brokeMu sync.Mutex
	broken  []string // promises found broken in a storm: a program that crashed
}

// openWorld starts PostgreSQL and the shop's programs in dir.
func openWorld(ctx context.Context, cfg config, dir, bin string, out func(string, ...any)) (_ *world, err error) {
	w := &world{cfg: cfg, dir: dir, bin: bin, tally: newTally(), out: out, data: filepath.Join(dir, "office"), written: newOracle(),
		rnd: newLockedRand(cfg.seed, 1), catalogRnd: newLockedRand(cfg.seed, 2), copyRnd: newLockedRand(cfg.seed, 3)}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	for _, sub := range []string{"logs", "registers", "copies", w.data} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("making the run's folder: %w", err)
		}
	}
	if w.faults, err = os.Create(filepath.Join(dir, "logs", "faults.log")); err != nil {
		return nil, err
	}
	w.say("starting PostgreSQL in %s", filepath.Join(dir, "pg"))
	if w.pg, err = pgtest.OpenCluster(ctx, filepath.Join(dir, "pg")); err != nil {
		return nil, err
	}
	if w.dbURL, err = pgtest.EnsureDatabase(ctx, w.pg.URL(), "shop"); err != nil {
		return nil, fmt.Errorf("making the shop's database: %w", err)
	}
	if w.pool, err = pgxpool.New(ctx, w.dbURL); err != nil {
		return nil, fmt.Errorf("connecting to the shop's database: %w", err)
	}
	for i := range cfg.offices {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		o := &office{addr: addr, program: &program{
			name: fmt.Sprintf("head office %d", i+1), bin: bin,
			env: []string{"DATABASE_URL=" + w.dbURL},
			log: filepath.Join(dir, "logs", fmt.Sprintf("office-%d.log", i+1)),
		}}
		o.setArgs(officeArgs(addr, w.data, cfg.registers, false))
		w.offices = append(w.offices, o)
	}
	w.say("starting %d head-office process(es)", len(w.offices))
	if err := w.startOffices(ctx); err != nil {
		return nil, err
	}
	if err := w.openShops(ctx); err != nil {
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
	w.say("starting %d registers, each behind a link of its own", len(w.regs))
	for _, r := range w.regs {
		if err := r.start(); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// say prints a line of the soak's, with the time.
func (w *world) say(format string, args ...any) {
	w.sayMu.Lock()
	defer w.sayMu.Unlock()
	w.out(format, args...)
}

// sell sets the register's arguments, selling every so often.
func (r *register) sell(every time.Duration) {
	r.setArgs([]string{"register", "-n", strconv.Itoa(r.n), "-server", r.link.url(),
		"-token-file", filepath.Join(filepath.Dir(filepath.Dir(r.file)), "office", "tokens", fmt.Sprintf("register-%d.token", r.n)),
		"-data", filepath.Dir(r.file), "-drill", r.drill, "-every", every.String(), "-poll", "1s", "-v"})
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
	o.setArgs(officeArgs(o.addr, w.data, w.cfg.registers, on))
	return w.startOffices(ctx)
}

// startOffices starts the head offices that are not running and waits
// until each listens and the registers' tokens are issued. One that
// stops as it starts (its database away) is started again, as a
// supervisor would, for up to 2 minutes.
func (w *world) startOffices(ctx context.Context) error {
	for _, o := range w.offices {
		if err := o.start(); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, o := range w.offices {
		for !listens(o.addr) {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s does not listen on %s after 2 minutes; its log: %s", o.name, o.addr, o.log)
			}
			if o.strike.TryLock() {
				w.revive(o.program, nil)
				o.strike.Unlock()
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

// revive starts again a program that ended by itself, and reports
// whether it had. An end the drill asked for (expected) is counted as its
// fault; an end with an error the program named (exit code 1: its
// database away as it started, say) is a supervisor's to mend; a crash (a
// panic, a signal) breaks a promise. The caller holds p.strike.
func (w *world) revive(p *program, expected func(*os.ProcessState) bool) bool {
	ended := p.ended()
	if ended == nil {
		return false
	}
	switch {
	case expected != nil && expected(ended):
	case crashed(ended):
		w.breakPromise(fmt.Sprintf("%s crashed (%v); see %s", p.name, ended, p.log))
	default:
		w.tally.add(faultStoppedWithError)
		w.logFault("%s stopped with an error (%v); started again; see %s", p.name, ended, p.log)
	}
	if err := p.start(); err != nil {
		w.say("starting %s again: %v", p.name, err)
	}
	return true
}

// reviveAll starts again, every 100 ms until ctx ends, the programs that
// ended by themselves (see revive); those busy with a fault are looked
// at the next time.
func (w *world) reviveAll(ctx context.Context) {
	for ctx.Err() == nil {
		sleep(ctx, 100*time.Millisecond)
		for _, o := range w.offices {
			if o.strike.TryLock() {
				w.revive(o.program, nil)
				o.strike.Unlock()
			}
		}
		for _, r := range w.regs {
			if r.strike.TryLock() {
				w.revive(r.program, func(st *os.ProcessState) bool { return w.diedOfDrill(r, st) })
				r.strike.Unlock()
			}
		}
	}
}

// diedOfDrill reports whether a register's death was the one its drill
// file asked for (SIGKILL inside a wish handler), and counts it so.
func (w *world) diedOfDrill(r *register, st *os.ProcessState) bool {
	if !killedBySignal(st) {
		return false
	}
	drilled, err := w.drills.diedOfDrill(r)
	if err != nil {
		w.say("disarming %s's drill: %v", r.name, err)
	}
	if drilled {
		w.tally.add(faultKillInWish)
		w.logFault("%s died by SIGKILL carrying out a wish; started again", r.name)
	}
	return drilled
}

// breakPromise records a promise found broken during a storm.
func (w *world) breakPromise(what string) {
	w.brokeMu.Lock()
	defer w.brokeMu.Unlock()
	w.broken = append(w.broken, what)
	w.logFault("BROKEN: %s", what)
}

// brokenSoFar returns the promises found broken during the storms.
func (w *world) brokenSoFar() []string {
	w.brokeMu.Lock()
	defer w.brokeMu.Unlock()
	return append([]string(nil), w.broken...)
}

// logFault notes a fault in logs/faults.log, with when and where.
func (w *world) logFault(format string, args ...any) {
	w.sayMu.Lock()
	defer w.sayMu.Unlock()
	fmt.Fprintf(w.faults, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// upstream returns a running head office's URL, taking turns, other than
// after when another runs.
func (w *world) upstream(after string) string {
	w.upMu.Lock()
	defer w.upMu.Unlock()
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
