package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// drill.go holds the faults met inside a register's process: its disk
// full or read-only, its clock stepped, a SIGKILL while it carries out a
// wish. The register reads them from its drill file (the shop register's
// -drill flag), which the soak writes.

// drill is what a register's drill file says.
type drill struct {
	disk       string        // "", "full" or "read-only"
	clock      time.Duration // the step of its clock
	killInWish bool
	// fired is set once the register took the kill line out of its file,
	// as it does just before it kills itself: its death is the drill's.
	fired bool
}

// killLine is the drill that has a register die inside a wish handler.
const killLine = "kill in wish"

// text is the drill file's contents.
func (d drill) text() string {
	var b strings.Builder
	if d.disk != "" {
		fmt.Fprintf(&b, "disk %s\n", d.disk)
	}
	if d.clock != 0 {
		sign := "+"
		if d.clock < 0 {
			sign = ""
		}
		fmt.Fprintf(&b, "clock %s%v\n", sign, d.clock)
	}
	if d.killInWish {
		b.WriteString(killLine + "\n")
	}
	return b.String()
}

// drills keeps each register's drill and writes its file. The register
// writes the file too, once: it takes the kill line out before it kills
// itself. So each change reads the file first, and a kill line gone from
// it is taken as fired, never written back.
type drills struct {
	mu  sync.Mutex
	now map[int]drill // by register number
}

// change changes register r's drill and writes its file.
func (ds *drills) change(r *register, f func(*drill)) error {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.read(r)
	f(&d)
	ds.now[r.n] = d
	return writeAtomically(r.drill, d.text())
}

// read returns register r's drill, seeing whether the register took the
// kill line out. ds.mu is held.
func (ds *drills) read(r *register) drill {
	if ds.now == nil {
		ds.now = map[int]drill{}
	}
	d := ds.now[r.n]
	if d.killInWish {
		if b, err := os.ReadFile(r.drill); err == nil && !strings.Contains(string(b), killLine) {
			d.killInWish, d.fired = false, true
		}
	}
	return d
}

// diedOfDrill reports whether a death of register r by SIGKILL was the
// drill's, and disarms it: the register started again carries its wishes
// out.
func (ds *drills) diedOfDrill(r *register) (bool, error) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.read(r)
	if !d.fired && !d.killInWish {
		return false, nil
	}
	d.fired, d.killInWish = false, false
	ds.now[r.n] = d
	return true, writeAtomically(r.drill, d.text())
}

// writeAtomically writes a file whole, so that a reader sees the old
// contents or the new.
func writeAtomically(path, text string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// fillDisk fills a register's disk for a while, then makes it read-only
// for a while, then gives it back, as a shop's failing disk might.
func (w *world) fillDisk(ctx context.Context, wg *sync.WaitGroup) error {
	r := w.regs[w.rnd.intN(len(w.regs))]
	full := time.Duration(2000+w.rnd.intN(6000)) * time.Millisecond
	readOnly := time.Duration(2000+w.rnd.intN(6000)) * time.Millisecond
	if err := w.drills.change(r, func(d *drill) { d.disk = "full" }); err != nil {
		return err
	}
	w.tally.add(faultDiskFull)
	w.logFault("%s's disk full for %v, then read-only for %v", r.name, full, readOnly)
	wg.Go(func() {
		sleep(ctx, full)
		if err := w.drills.change(r, func(d *drill) { d.disk = "read-only" }); err != nil {
			w.say("making %s's disk read-only: %v", r.name, err)
			return
		}
		w.tally.add(faultDiskReadOnly)
		sleep(ctx, readOnly)
		// Healed at the calm in any case.
		_ = w.drills.change(r, func(d *drill) { d.disk = "" })
	})
	return nil
}

// stepClock steps a register's clock back or forward for a while.
func (w *world) stepClock(ctx context.Context, wg *sync.WaitGroup) error {
	r := w.regs[w.rnd.intN(len(w.regs))]
	step := time.Duration(1+w.rnd.intN(180)) * time.Minute
	if w.rnd.intN(2) == 0 {
		step = -step
	}
	if err := w.drills.change(r, func(d *drill) { d.clock = step }); err != nil {
		return err
	}
	w.tally.add(faultClock)
	d := time.Duration(3000+w.rnd.intN(12000)) * time.Millisecond
	w.logFault("%s's clock stepped %v for %v", r.name, step, d)
	wg.Go(func() {
		sleep(ctx, d)
		_ = w.drills.change(r, func(d *drill) { d.clock = 0 })
	})
	return nil
}

// killInWish has a register SIGKILL itself the next time it carries out a
// wish; the soak counts the kill once it sees the register died so.
func (w *world) killInWish() error {
	r := w.regs[w.rnd.intN(len(w.regs))]
	w.logFault("%s to die the next time it carries out a wish", r.name)
	return w.drills.change(r, func(d *drill) { d.killInWish = true })
}

// healDrills ends every register's drill.
func (w *world) healDrills() error {
	for _, r := range w.regs {
		if err := w.drills.change(r, func(d *drill) { *d = drill{} }); err != nil {
			return err
		}
	}
	return nil
}
