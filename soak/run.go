package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// run.go holds a run: storms and calms, the checks, and the report.

// run runs the soak and returns the process's exit code: 0 when every
// promise held, 1 when one broke, 2 when the soak itself could not run.
func run(ctx context.Context, c config) int {
	say := func(format string, args ...any) {
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
	broken := soak(ctx, w, rep)
	w.stopPrograms()
	if c.sabotage != nil && len(broken) == 0 && ctx.Err() == nil {
		if err := c.sabotage(ctx, w); err != nil {
			w.close()
			say("soak: -break %s could not break its promise: %v", c.sabotageName, err)
			return 2
		}
	}
	rep.took = time.Since(rep.started)
	rep.tally = w.tally
	if ctx.Err() != nil && len(broken) == 0 {
		w.close()
		say("soak: interrupted; its folder is kept: %s", dir)
		return 2
	}
	if len(broken) == 0 {
		broken = append(broken, w.integrity(context.Background())...)
		rep.integrityChecked = len(w.regs)
	}
	if len(broken) == 0 {
		// Once more, the programs stopped: what the files hold at last.
		broken = append(broken, w.finalFilings(context.Background(), rep)...)
	}
	if len(broken) == 0 {
		broken = append(broken, w.finalStates(context.Background())...)
	}
	w.close()
	rep.broken = broken
	fmt.Fprint(c.out, rep.text())
	if c.readme != "" {
		if err := rep.writeReadme(c.readme, root); err != nil {
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

// runDir makes the run's folder.
func runDir(c config) (string, error) {
	if c.dir != "" {
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

// soak alternates storms and calms until the storms' time is spent, or
// until a calm finds a promise broken, which it returns.
func soak(ctx context.Context, w *world, rep *report) []string {
	left := w.cfg.runFor
	for cycle := 1; left > 0 && ctx.Err() == nil; cycle++ {
		d := min(w.cfg.stormFor, left)
		left -= d
		w.say("storm %d: %v of faults", cycle, d)
		before := w.tally.faults()
		storm(ctx, w, d)
		w.say("storm %d over: %d fault(s) injected (%d in all); healing and waiting for the shop to agree", cycle, w.tally.faults()-before, w.tally.faults())
		took, broken := calm(ctx, w)
		if len(broken) > 0 {
			return broken
		}
		if ov, err := w.overview(ctx); err == nil {
			rep.wishes = ov.Summary.Wishes
		}
		rep.converged = append(rep.converged, took)
		rep.cycles = cycle
		w.say("calm %d: the shop agreed %v after the storm", cycle, took.Round(time.Millisecond))
		if left > 0 {
			if err := w.restartRegisters(w.cfg.saleEvery); err != nil {
				return []string{err.Error()}
			}
		}
	}
	return nil
}

// storm runs the faults for d.
func storm(ctx context.Context, w *world, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	w.storm(ctx)
}

// calm heals the shop and waits until it agrees: every program running,
// the registers no longer selling (so that agreement is a fixed point),
// then the checks. It returns how long agreement took after the storm,
// or the promises broken.
func calm(ctx context.Context, w *world) (time.Duration, []string) {
	healed := time.Now()
	if err := w.pg.Start(ctx); err != nil {
		return 0, []string{fmt.Sprintf("PostgreSQL does not start again: %v", err)}
	}
	if err := w.setWishing(ctx, false); err != nil {
		return 0, []string{err.Error()}
	}
	if err := w.healDrills(); err != nil {
		return 0, []string{err.Error()}
	}
	if err := w.restartRegisters(24 * time.Hour); err != nil {
		return 0, []string{err.Error()}
	}
	deadline := healed.Add(w.cfg.settleFor)
	why := ""
	for {
		var err error
		why, err = w.converged(ctx)
		if err == nil && why == "" {
			break
		}
		if err != nil {
			why = err.Error()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, []string{fmt.Sprintf("the shop did not agree within %v of healing: %s", w.cfg.settleFor, why)}
		}
		for _, p := range w.everyProgram() {
			if ended, err := p.restartDied(); ended != nil {
				w.say("%s had stopped by itself (%v); started again (%v); see %s", p.name, ended, err, p.log)
			}
		}
		sleep(ctx, 250*time.Millisecond)
	}
	took := time.Since(healed)
	if err := w.noteFiles(ctx); err != nil {
		return 0, []string{err.Error()}
	}
	fs, err := w.filings(ctx)
	if err != nil {
		return 0, []string{err.Error()}
	}
	var broken []string
	for _, f := range fs {
		broken = append(broken, f.broken()...)
	}
	return took, broken
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

// finalFilings reads the files once the programs stopped and compares
// the head office's records with every row written; it fills the report's
// rows.
func (w *world) finalFilings(ctx context.Context, rep *report) []string {
	if err := w.pg.Start(ctx); err != nil {
		return []string{err.Error()}
	}
	if err := w.noteFiles(ctx); err != nil {
		return []string{err.Error()}
	}
	fs, err := w.filings(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	rep.filings = fs
	var broken []string
	for _, f := range fs {
		broken = append(broken, f.broken()...)
	}
	return slices.Clip(broken)
}

// finalStates checks each register's file against the head office once
// more, the programs stopped.
func (w *world) finalStates(ctx context.Context) []string {
	shop, err := w.shopID(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	var broken []string
	for _, r := range w.regs {
		why, err := w.registerState(ctx, r, shop)
		if err != nil {
			why = err.Error()
		}
		if why != "" {
			broken = append(broken, why)
		}
	}
	return broken
}
