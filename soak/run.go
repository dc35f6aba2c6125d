package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// run.go holds a run: storms and calms, the checks, and the report.

// run runs the soak and returns the process's exit code: 0 when every
// promise held, 1 when one broke, 2 when the soak itself could not run or
// was interrupted.
func run(ctx context.Context, c config) int {
	var sayMu sync.Mutex
	say := func(format string, args ...any) {
		sayMu.Lock()
		defer sayMu.Unlock()
		fmt.Fprintf(c.out, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	rep := &report{seed: c.seed, cfg: c, started: time.Now()}
	say("soak: seed %d (replay with -seed %d), %d registers, %d head-office processes, faults %s, storms of %v for %v",
		c.seed, c.seed, c.registers, c.offices, c.faults, c.stormFor, c.runFor)
	dir, err := runDir(c)
	if err != nil {
		say("soak: %v", err)
		return 2
	}
	root, err := workspaceRoot()
	if err != nil {
		say("soak: %v", err)
		return 2
	}
	// The code the run measures is the code built now, whatever the tree
	// holds by its end.
	rep.code = codeVersion(root)
	bin, err := buildShop(ctx, root, dir)
	if err != nil {
		say("soak: %v", err)
		return 2
	}
	w, err := openWorld(ctx, c, dir, bin, say)
	if err != nil {
		say("soak: could not start the shop: %v (its folder is kept: %s)", err, dir)
		return 2
	}
	broken, err := soak(ctx, w, rep)
	w.stopPrograms()
	if err == nil && len(broken) == 0 && c.sabotage != nil {
		if err = c.sabotage(ctx, w); err != nil {
			err = fmt.Errorf("-break %s could not break its promise: %w", c.sabotageName, err)
		}
	}
	if err == nil && len(broken) == 0 {
		broken, err = w.finalChecks(context.WithoutCancel(ctx), rep)
	}
	w.close()
	rep.took = time.Since(rep.started)
	rep.tally = w.tally
	rep.broken = broken
	if err != nil {
		say("soak: %v; its folder is kept: %s", err, dir)
		return 2
	}
	fmt.Fprint(c.out, rep.text())
	if c.readme != "" {
		if err := rep.writeReadme(c.readme); err != nil {
			say("soak: writing %s: %v", c.readme, err)
			return 2
		}
		say("soak: wrote the figures into %s", c.readme)
	}
	if len(broken) > 0 {
		say("soak: FAILED: %s", broken[0])
		say("soak: the run's folder is kept: %s (logs/, registers/, pg/); replay with -seed %d", dir, c.seed)
		return 1
	}
	if c.keep || c.dir != "" {
		say("soak: passed; its folder is kept: %s", dir)
	} else {
		_ = os.RemoveAll(dir)
		say("soak: passed")
	}
	return 0
}

// runDir makes the run's folder: -dir, which must be empty (a folder of
// an earlier run holds its database, whose receipts this run never
// wrote), or a new one.
func runDir(c config) (string, error) {
	if c.dir != "" {
		if entries, err := os.ReadDir(c.dir); err == nil && len(entries) > 0 {
			return "", fmt.Errorf("-dir %s is not empty: give a new or empty folder (an earlier run's holds its own database)", c.dir)
		}
		return c.dir, os.MkdirAll(c.dir, 0o755)
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("magicsync-soak-%d-", c.seed))
	if err != nil {
		return "", err
	}
	// PostgreSQL's cluster lives inside: run as root, the soak starts it
	// as the OS user postgres, who must be able to enter the folder.
	return dir, os.Chmod(dir, 0o755)
}

// errInterrupted is the soak's error once its context ended (Ctrl-C).
var errInterrupted = errors.New("interrupted")

// soak alternates storms and calms until the storms' time is spent. It
// returns the promises a calm found broken, or the error that kept the
// soak itself from going on.
func soak(ctx context.Context, w *world, rep *report) ([]string, error) {
	left := w.cfg.runFor
	for cycle := 1; left > 0; cycle++ {
		d := min(w.cfg.stormFor, left)
		left -= d
		w.say("storm %d: %v of faults", cycle, d)
		before := w.tally.faults()
		storm(ctx, w, d)
		if ctx.Err() != nil {
			return nil, errInterrupted
		}
		w.say("storm %d over: %d fault(s) injected (%d in all); healing and waiting for the shop to agree", cycle, w.tally.faults()-before, w.tally.faults())
		if broken := w.brokenSoFar(); len(broken) > 0 {
			return broken, nil
		}
		took, broken, err := calm(ctx, w)
		if err != nil || len(broken) > 0 {
			return broken, err
		}
		rep.converged = append(rep.converged, took)
		rep.stormFaults = append(rep.stormFaults, w.tally.faults()-before)
		rep.cycles = cycle
		if ov, err := w.overview(ctx); err == nil {
			rep.wishes = ov.Summary.Wishes
		}
		w.say("calm %d: the shop agreed %v after the storm", cycle, took.Round(time.Millisecond))
		if left > 0 {
			if err := w.restartRegisters(w.cfg.saleEvery); err != nil {
				return nil, err
			}
		}
	}
	return nil, nil
}

// storm runs the faults for d.
func storm(ctx context.Context, w *world, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	w.storm(ctx)
}

// calm heals the shop and waits until it agrees: every program running,
// every drill over, the registers no longer selling and the operator no
// longer wishing (so that agreement is a fixed point); then the checks.
// It returns how long agreement took after the storm, or the promises
// broken, or the error that kept the soak from going on.
func calm(ctx context.Context, w *world) (time.Duration, []string, error) {
	healed := time.Now()
	if err := w.pg.Start(ctx); err != nil {
		return 0, nil, fmt.Errorf("starting PostgreSQL again: %w", err)
	}
	if err := w.setWishing(ctx, false); err != nil {
		return 0, nil, err
	}
	if err := w.healDrills(); err != nil {
		return 0, nil, err
	}
	if err := w.restartRegisters(24 * time.Hour); err != nil {
		return 0, nil, err
	}
	deadline := healed.Add(w.cfg.settleFor)
	said := healed
	for {
		why, err := w.converged(ctx, healed)
		if err == nil && why == "" {
			break
		}
		if ctx.Err() != nil {
			return 0, nil, errInterrupted
		}
		if err != nil {
			why = err.Error()
		}
		if time.Since(said) >= 5*time.Second {
			// What a long wait waited for, in logs/faults.log.
			w.logFault("calm: %v after healing, still waiting: %s", time.Since(healed).Round(time.Second), why)
			said = time.Now()
		}
		if time.Now().After(deadline) {
			return 0, []string{fmt.Sprintf("the shop did not agree within %v of healing: %s", w.cfg.settleFor, why)}, nil
		}
		for _, p := range w.everyProgram() {
			w.revive(p, nil)
		}
		if broken := w.brokenSoFar(); len(broken) > 0 {
			return 0, broken, nil
		}
		sleep(ctx, 250*time.Millisecond)
	}
	took := time.Since(healed)
	if err := w.noteFiles(ctx); err != nil {
		return 0, nil, err
	}
	fs, err := w.filings(ctx)
	if err != nil {
		return 0, nil, err
	}
	var broken []string
	for _, f := range fs {
		broken = append(broken, f.broken()...)
	}
	return took, broken, nil
}

// restartRegisters stops every register (SIGTERM: each saves what its
// till kept) and starts it again selling every so often.
func (w *world) restartRegisters(every time.Duration) error {
	var wg sync.WaitGroup
	for _, r := range w.regs {
		wg.Go(func() { r.stop(15 * time.Second) })
	}
	wg.Wait()
	for _, r := range w.regs {
		r.sell(every)
		if err := r.start(); err != nil {
			return err
		}
	}
	return nil
}

// everyProgram lists the head offices and the registers.
func (w *world) everyProgram() []*program {
	var ps []*program
	for _, o := range w.offices {
		ps = append(ps, o.program)
	}
	for _, r := range w.regs {
		ps = append(ps, r.program)
	}
	return ps
}

// finalChecks checks once more, the programs stopped: every file's
// integrity, every record written against those filed (filling the
// report's rows, with the lines sold in the second shop), and every file
// against the head office.
func (w *world) finalChecks(ctx context.Context, rep *report) ([]string, error) {
	broken, err := w.integrity(ctx)
	if err != nil || len(broken) > 0 {
		return broken, err
	}
	rep.integrityPassed = len(w.regs)
	if err := w.pg.Start(ctx); err != nil {
		return nil, err
	}
	if err := w.noteFiles(ctx); err != nil {
		return nil, err
	}
	fs, err := w.filings(ctx)
	if err != nil {
		return nil, err
	}
	rep.filings = fs
	for _, f := range fs {
		broken = append(broken, f.broken()...)
	}
	if rep.movedLines, err = w.linesOfShop(ctx, w.shops[1]); err != nil {
		return nil, err
	}
	if len(broken) > 0 {
		return broken, nil
	}
	return w.finalStates(ctx)
}

// finalStates checks each register's file against the head office, and
// the catalog against the shop each register is in.
func (w *world) finalStates(ctx context.Context) ([]string, error) {
	var broken []string
	for _, r := range w.regs {
		why, err := w.registerState(ctx, r)
		if err != nil {
			return nil, err
		}
		if why != "" {
			broken = append(broken, why)
		}
	}
	return broken, nil
}
