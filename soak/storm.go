package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// storm.go holds the faults injected from outside the programs, and the
// head office's own writes meanwhile.

// storm injects faults into the world until ctx ends: the links' faults
// drawn per request, and every few moments one of the others. It returns
// once every fault it started is undone (a register cut off is back, a
// program killed runs again).
func (w *world) storm(ctx context.Context) {
	odds := defaultNetOdds
	for _, r := range w.regs {
		if w.cfg.faults.has("net") {
			r.link.odds.Store(&odds)
		}
	}
	if w.cfg.faults.has("dump") {
		// A dump to restore later in the storm, unless one waits.
		if err := w.ensureDump(ctx); err != nil && ctx.Err() == nil {
			w.say("dumping the head office's database: %v", err)
		}
	}
	if err := w.setWishing(ctx, true); err != nil && ctx.Err() == nil {
		w.say("starting the wishing head office: %v", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { w.writeCatalog(ctx) })
	wg.Go(func() { w.keepCopies(ctx) })
	wg.Go(func() { w.reviveAll(ctx) })
	for ctx.Err() == nil {
		sleep(ctx, time.Duration(300+w.rnd.intN(1200))*time.Millisecond)
		if ctx.Err() != nil {
			break
		}
		if err := w.strike(ctx, &wg); err != nil && ctx.Err() == nil {
			w.say("a fault could not be injected: %v", err)
		}
	}
	wg.Wait()
	for _, r := range w.regs {
		r.link.odds.Store(nil)
		r.link.cutOff.Store(false)
	}
}

// strikes are the faults beside the links', with their weights.
var strikes = []struct {
	kind   string // the -faults name that turns it on
	weight int
	fault  fault
}{
	{"kill", 6, faultKillReg},
	{"kill", 2, faultKillInWish},
	{"office", 3, faultKillOffice},
	{"net", 3, faultPartition},
	{"copy", 1, faultOldCopy},
	{"postgres", 1, faultPGRestart},
	{"dump", 1, faultPGDump},
	{"disk", 2, faultDiskFull},
	{"clock", 2, faultClock},
}

// strike injects one fault drawn by weight among those turned on.
func (w *world) strike(ctx context.Context, wg *sync.WaitGroup) error {
	total := 0
	for _, s := range strikes {
		if w.cfg.faults.has(s.kind) {
			total += s.weight
		}
	}
	if total == 0 {
		return nil
	}
	x := w.rnd.intN(total)
	for _, s := range strikes {
		if !w.cfg.faults.has(s.kind) {
			continue
		}
		if x -= s.weight; x >= 0 {
			continue
		}
		switch s.fault {
		case faultKillReg:
			return w.killRegister(ctx)
		case faultKillInWish:
			return w.killInWish()
		case faultDiskFull:
			return w.fillDisk(ctx, wg)
		case faultClock:
			return w.stepClock(ctx, wg)
		case faultKillOffice:
			return w.killOffice(ctx)
		case faultPartition:
			w.partition(ctx, wg)
			return nil
		case faultOldCopy:
			return w.restoreCopy(ctx)
		case faultPGRestart:
			return w.restartPostgres(ctx)
		case faultPGDump:
			return w.restoreDump(ctx)
		}
	}
	return nil
}

// killRegister SIGKILLs a register and starts it again a moment later.
func (w *world) killRegister(ctx context.Context) error {
	r := w.regs[w.rnd.intN(len(w.regs))]
	pause, down := time.Duration(w.rnd.intN(200))*time.Millisecond, time.Duration(w.rnd.intN(1500))*time.Millisecond
	r.strike.Lock()
	defer r.strike.Unlock()
	sleep(ctx, pause)
	r.kill()
	w.tally.add(faultKillReg)
	w.logFault("%s SIGKILLed", r.name)
	sleep(ctx, down)
	return r.start()
}

// killOffice SIGKILLs one head-office process and starts it again a
// moment later, while the others serve.
func (w *world) killOffice(ctx context.Context) error {
	o := w.offices[w.rnd.intN(len(w.offices))]
	down := time.Duration(200+w.rnd.intN(2000)) * time.Millisecond
	o.strike.Lock()
	defer o.strike.Unlock()
	o.kill()
	w.tally.add(faultKillOffice)
	w.logFault("%s SIGKILLed", o.name)
	sleep(ctx, down)
	return o.start()
}

// partition cuts a register off from the head office for a while: every
// request it makes is lost.
func (w *world) partition(ctx context.Context, wg *sync.WaitGroup) {
	r := w.regs[w.rnd.intN(len(w.regs))]
	if !r.link.cutOff.CompareAndSwap(false, true) {
		return
	}
	w.tally.add(faultPartition)
	d := time.Duration(2000+w.rnd.intN(8000)) * time.Millisecond
	w.logFault("%s cut off for %v", r.name, d)
	wg.Go(func() {
		sleep(ctx, d)
		r.link.cutOff.Store(false)
	})
}

// keepCopies copies each register's file every few seconds, as a backup
// would (restoreCopy puts one back), and notes in the oracle what each
// copy holds: a row that vanished from a file between two calms is then
// still known to have been written.
func (w *world) keepCopies(ctx context.Context) {
	for ctx.Err() == nil {
		for _, r := range w.regs {
			if err := w.keepCopy(ctx, r); err != nil && ctx.Err() == nil {
				w.say("copying %s's file: %v", r.name, err)
			}
		}
		sleep(ctx, time.Duration(3000+w.copyRnd.intN(7000))*time.Millisecond)
	}
}

// keepCopy copies a register's file, consistently (VACUUM INTO), and
// notes what the copy holds.
func (w *world) keepCopy(ctx context.Context, r *register) error {
	r.strike.Lock()
	defer r.strike.Unlock()
	if _, err := os.Stat(r.file); err != nil {
		return nil // not made yet
	}
	db, err := openFile(r.file)
	if err != nil {
		return err
	}
	defer db.Close()
	to := w.copyOf(r)
	tmp := to + ".tmp"
	_ = os.Remove(tmp)
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", tmp); err != nil {
		return fmt.Errorf("VACUUM INTO: %w", err)
	}
	if err := os.Rename(tmp, to); err != nil {
		return err
	}
	return w.noteFile(ctx, to)
}

// copyOf is where the last copy of a register's file is kept.
func (w *world) copyOf(r *register) string {
	return filepath.Join(w.dir, "copies", filepath.Base(r.file))
}

// restoreCopy stops a register the hard way and puts back an older copy
// of its file, as a shop restoring last night's backup would. What the
// file held that the copy lacks is noted first: the head office must set
// the register straight, and what it had filed of those rows it keeps;
// rows the register never got to send are gone with the disk.
func (w *world) restoreCopy(ctx context.Context) error {
	r := w.regs[w.rnd.intN(len(w.regs))]
	r.strike.Lock()
	defer r.strike.Unlock()
	st, err := os.Stat(w.copyOf(r))
	if err != nil {
		return nil // no copy yet
	}
	// The copy put back, read whole before the register's file is
	// touched: the same one both for what is gone and for the file.
	cp := filepath.Join(w.dir, "copies", "restoring.db")
	if err := copyPlain(w.copyOf(r), cp); err != nil {
		return err
	}
	defer os.Remove(cp)
	r.kill()
	r.link.settle()
	if err := w.noteFile(ctx, r.file); err != nil {
		return errStart(r.start(), fmt.Errorf("reading %s's file before the restore: %w", r.name, err))
	}
	if err := w.noteGone(ctx, r, cp); err != nil {
		return errStart(r.start(), err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Remove(r.file + suffix); err != nil && !os.IsNotExist(err) {
			return errStart(r.start(), err)
		}
	}
	if err := copyPlain(cp, r.file); err != nil {
		return errStart(r.start(), err)
	}
	r.restored.Store(true)
	w.tally.add(faultOldCopy)
	w.logFault("%s's file put back from a copy of %v ago", r.name, time.Since(st.ModTime()).Round(time.Millisecond))
	return r.start()
}

// noteGone records as gone with the disk the records the register's
// file holds, the copy lacks and the head office never filed.
func (w *world) noteGone(ctx context.Context, r *register, cp string) error {
	now, err := openFile(r.file)
	if err != nil {
		return err
	}
	defer now.Close()
	old, err := openFile(cp)
	if err != nil {
		return err
	}
	defer old.Close()
	for _, t := range recordTables {
		have, err := fileRecords(ctx, now, t.name)
		if err != nil {
			return fmt.Errorf("%s's file: %w", r.name, err)
		}
		kept, err := fileRecords(ctx, old, t.name)
		if err != nil {
			return fmt.Errorf("the copy of %s's file: %w", r.name, err)
		}
		filed, err := filedRecords(ctx, w.pool, t.name)
		if err != nil {
			return fmt.Errorf("the head office's %s: %w", t.name, err)
		}
		w.written.lose(t.name, keysMissing(have, kept, filed))
	}
	return nil
}

// keysMissing returns the keys of rows that none of others holds.
func keysMissing(rows []string, others ...[]string) []string {
	in := map[string]bool{}
	for _, o := range others {
		for _, row := range o {
			in[row[:keyLen]] = true
		}
	}
	var out []string
	for _, row := range rows {
		if !in[row[:keyLen]] {
			out = append(out, row[:keyLen])
		}
	}
	return out
}

// copyPlain copies a file that nothing writes.
func copyPlain(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// restartPostgres stops PostgreSQL (a fast shutdown: every connection
// cut) and starts it again a moment later.
func (w *world) restartPostgres(ctx context.Context) error {
	if err := w.pg.Stop(); err != nil {
		return err
	}
	w.tally.add(faultPGRestart)
	w.logFault("PostgreSQL stopped")
	sleep(ctx, time.Duration(300+w.rnd.intN(2500))*time.Millisecond)
	err := w.pg.Start(context.WithoutCancel(ctx))
	w.logFault("PostgreSQL started again: %v", err)
	return err
}

// restoreDump puts back the head office's database as a dump taken a
// while ago held it, as an operator restoring last night's backup would:
// the head offices stop, the database is dropped and restored, and they
// start again. A storm dumps the database as it begins, unless a dump
// not yet restored waits, and restores it at most once. Records the
// dump lacks that no register's file holds any more (put back from an
// older copy since) are gone with both copies: no engine could file them.
func (w *world) restoreDump(ctx context.Context) error {
	st, err := os.Stat(w.dumpFile())
	if err != nil {
		return nil // restored once this storm
	}
	for _, o := range w.offices {
		o.strike.Lock()
		defer o.strike.Unlock()
		o.kill()
	}
	w.restoring.Lock()
	defer w.restoring.Unlock()
	ctx = context.WithoutCancel(ctx)
	before, err := w.filedKeys(ctx)
	if err == nil {
		err = w.replaceDatabase(ctx, w.dumpFile())
	}
	if err == nil {
		err = w.noteGoneWithDump(ctx, before)
	}
	if err == nil {
		w.tally.add(faultPGDump)
		w.logFault("the head office's database restored from a dump of %v ago", time.Since(st.ModTime()).Round(time.Millisecond))
		err = os.Remove(w.dumpFile())
	}
	for _, o := range w.offices {
		err = errStart(o.start(), err)
	}
	return err
}

// filedKeys returns the head office's records, by table.
func (w *world) filedKeys(ctx context.Context) (map[string][]string, error) {
	out := map[string][]string{}
	for _, t := range recordTables {
		rows, err := filedRecords(ctx, w.pool, t.name)
		if err != nil {
			return nil, fmt.Errorf("the head office's %s: %w", t.name, err)
		}
		out[t.name] = rows
	}
	return out, nil
}

// noteGoneWithDump records as gone the records filed before the restore
// (before) that the restored database lacks and no register's file holds.
func (w *world) noteGoneWithDump(ctx context.Context, before map[string][]string) error {
	after, err := w.filedKeys(ctx)
	if err != nil {
		return err
	}
	for _, t := range recordTables {
		held := [][]string{after[t.name]}
		for _, r := range w.regs {
			rows, err := w.fileRows(ctx, r, t.name)
			if err != nil {
				return err
			}
			held = append(held, rows)
		}
		w.written.lose(t.name, keysMissing(before[t.name], held...))
	}
	return nil
}

// fileRows reads a register file's records of table, while it runs.
func (w *world) fileRows(ctx context.Context, r *register, table string) ([]string, error) {
	r.strike.Lock()
	defer r.strike.Unlock()
	db, err := openFile(r.file)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := fileRecords(ctx, db, table)
	if err != nil {
		return nil, fmt.Errorf("%s's file: %w", r.name, err)
	}
	return rows, nil
}

func (w *world) dumpFile() string { return filepath.Join(w.dir, "shop.dump") }

// ensureDump dumps the head office's database unless a dump waits.
func (w *world) ensureDump(ctx context.Context) error {
	if _, err := os.Stat(w.dumpFile()); err == nil {
		return nil
	}
	w.logFault("dumping the head office's database")
	return w.takeDump(ctx, w.dumpFile())
}

// takeDump dumps the head office's database.
func (w *world) takeDump(ctx context.Context, dump string) error {
	pgDump, err := pgtest.Program(ctx, "pg_dump")
	if err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, pgDump, "-Fc", "-f", dump+".tmp", "-d", w.dbURL).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_dump: %w\n%s", err, out)
	}
	return os.Rename(dump+".tmp", dump)
}

// replaceDatabase drops the shop's database and restores dump into a new
// one of the same name.
func (w *world) replaceDatabase(ctx context.Context, dump string) error {
	admin, err := pgx.Connect(ctx, w.pg.URL())
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	w.pool.Reset()
	if _, err := admin.Exec(ctx, "DROP DATABASE shop WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE shop"); err != nil {
		return err
	}
	pgRestore, err := pgtest.Program(ctx, "pg_restore")
	if err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, pgRestore, "--no-owner", "-d", w.dbURL, dump).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_restore: %w\n%s", err, out)
	}
	return nil
}

// errStart joins the error of starting a program again to err's.
func errStart(startErr, err error) error { return errors.Join(err, startErr) }
