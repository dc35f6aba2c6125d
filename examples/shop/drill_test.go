package main

import (
	"database/sql"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// startShopForRegister1 starts a head office over a fresh database, with
// no register of its own, and hands register 1 its token, in a file; the
// head office stops when the test ends.
func startShopForRegister1(t *testing.T) (*testShop, string) {
	t.Helper()
	s := startShop(t, false)
	if err := s.ho.hooks.Pass(s.ctx); err != nil {
		t.Fatal(err)
	}
	_, tokenFile, err := s.ho.token(s.ctx, t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return s, tokenFile
}

// drillShop is a head office in the test's process and register 1 run as
// a program of its own, given a drill file.
type drillShop struct {
	*testShop
	bin, tokenFile string
	// data is register 1's data folder, file its drill file.
	data, file string
}

// startDrillShop starts the head office and builds the shop's command;
// the drill file holds drill, unless drill is empty: then it does not
// exist.
func startDrillShop(t *testing.T, drill string) *drillShop {
	t.Helper()
	s, tokenFile := startShopForRegister1(t)
	d := &drillShop{testShop: s, bin: buildShop(t), tokenFile: tokenFile, data: t.TempDir(),
		file: filepath.Join(t.TempDir(), "register-1.drill")}
	if drill != "" {
		d.setDrill(t, drill)
	}
	return d
}

// setDrill writes the drill file, in one step, as an operator would.
func (d *drillShop) setDrill(t *testing.T, content string) {
	t.Helper()
	if err := replaceFile(d.file, ".drill-*", content, 0o644); err != nil {
		t.Fatal(err)
	}
}

// drillLines reads the drill file.
func (d *drillShop) drillLines(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(d.file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startRegister runs register 1 with the drill file, selling every
// every, and waits until it is up.
func (d *drillShop) startRegister(t *testing.T, name string, every time.Duration) *program {
	t.Helper()
	p := startProgram(t, name, d.bin, nil, "register", "-n", "1", "-server", d.ho.url, "-token-file", d.tokenFile,
		"-data", d.data, "-drill", d.file, "-every", every.String(), "-poll", "1s")
	p.await(t, 0, `register 1 up over `)
	return p
}

// sellThroughDiskDrill runs register 1 as a program of its own, selling,
// and writes line, a disk drill, in its drill file: the register says so
// (says), goes on ringing up sales, says in plain words that it cannot
// save them, why(its file) says why, and keeps them in memory. Once the
// line is gone, it says its drill ended and saves them. Every sale rung
// up — before, during and after — reaches the head office, and the
// program stops cleanly, having lost none and said none of SQLite's own
// words.
func sellThroughDiskDrill(t *testing.T, line, says string, why func(file string) string) {
	t.Helper()
	d := startDrillShop(t, "")
	p := d.startRegister(t, "register 1", 20*time.Millisecond)
	p.await(t, 0, saleRE)

	d.setDrill(t, "# a fire drill\n"+line+"\n")
	_, drilled := p.await(t, 0, says)
	_, failed := p.await(t, drilled, `register 1 could not save a sale of \d line\(s\), €\d+\.\d\d \(receipt [0-9a-f]{8}\): `+
		why(registerFile(d.data, 0))+`\. It keeps \d+ unsaved sale\(s\) in memory and tries them again at its next sale`)
	// The till goes on: two more sales rung up, kept or (where they fit
	// in the pages the file has) saved.
	p.await(t, failed, `(?s)register 1 (could not save a sale|rang up) .*register 1 (could not save a sale|rang up) `)

	d.setDrill(t, "# a fire drill, over\n")
	_, over := p.await(t, failed, `register 1's drill ended: disk and clock as they are`)
	_, end := p.await(t, over, saleRE)
	printed := p.out.String()[:end]
	// A sale is saved at once only when no kept sale waits before it:
	// those kept since the drill began were saved, and said so.
	if !regexp.MustCompile(`register 1 saved \d+ sale\(s\) it had kept in memory: its file takes writes again`).MatchString(printed[failed:]) {
		t.Error("the register did not say it saved the sales it had kept")
	}
	var receipts []string
	for _, m := range regexp.MustCompile(`register 1 (?:rang up|could not save a sale of) \d line\(s\), €\d+\.\d\d \(receipt ([0-9a-f]{8})\)`).FindAllStringSubmatch(printed, -1) {
		receipts = append(receipts, m[1])
	}
	waitAllFiled(t, d.ho, receipts)

	p.interrupt(t)
	out := p.out.String()
	for _, unwanted := range []string{"lost", "gives up", "database or disk is full", "readonly database", "SQLITE", "warning"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("the register printed %q", unwanted)
		}
	}
	if !strings.Contains(out, "stopping: register 1 finishes what it was sending") {
		t.Error("the register did not say it was stopping")
	}
}

// TestRegisterKeepsSellingOnAReadOnlyDisk writes "disk read-only" in a
// selling register's drill file: it says its file is read-only, in plain
// words, keeps its sales in memory, and saves them once the line is gone;
// every sale reaches the head office (see sellThroughDiskDrill).
func TestRegisterKeepsSellingOnAReadOnlyDisk(t *testing.T) {
	t.Parallel()
	sellThroughDiskDrill(t, "disk read-only", `register 1's disk is read-only \(drill\)`, func(file string) string {
		return `its file ` + regexp.QuoteMeta(file) + ` is read-only \(drill\)`
	})
}

// TestRegisterWithItsClockTwoHoursBehindStillSyncs starts a register whose
// drill file steps its clock back two hours: a sale it rings up is filed
// at the head office as rung up two hours ago (within a minute), and the
// register syncs as ever — the products reach it, its receipts are filed.
func TestRegisterWithItsClockTwoHoursBehindStillSyncs(t *testing.T) {
	t.Parallel()
	d := startDrillShop(t, "# the till's clock is two hours behind\nclock -2h\n")
	p := d.startRegister(t, "register 1", 200*time.Millisecond)
	p.await(t, 0, `register 1's clock is stepped -2h \(drill\)`)
	m, _ := p.await(t, 0, saleRE)
	waitFiled(t, d.ho.pool, 0, m[3], centsOf(t, m[1], m[2]))
	var behind float64
	if err := d.ho.pool.QueryRow(t.Context(), "SELECT extract(epoch FROM now() - rung_at)::float8 FROM shop.receipts WHERE register_id = $1 AND id::text LIKE $2",
		registerID(0), m[3]+"%").Scan(&behind); err != nil {
		t.Fatal(err)
	}
	if math.Abs(behind-(2*time.Hour).Seconds()) > time.Minute.Seconds() {
		t.Errorf("the sale was filed as rung up %v ago; want 2h, within a minute", time.Duration(behind*float64(time.Second)).Round(time.Second))
	}
	db, err := sql.Open("sqlite", dsn(registerFile(d.data, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	waitFor(t, "the shop's products at register 1", func() error {
		var n int
		if err := db.QueryRowContext(t.Context(), "SELECT count(*) FROM products WHERE NOT discontinued").Scan(&n); err != nil {
			return err
		}
		if n != len(productNames) {
			return fmt.Errorf("register 1 holds %d products", n)
		}
		return nil
	})
	// Sales rung up later are filed too.
	_, at := p.await(t, 0, saleRE)
	m, _ = p.await(t, at, saleRE)
	waitFiled(t, d.ho.pool, 0, m[3], centsOf(t, m[1], m[2]))
	p.interrupt(t)
}

// TestADrillFileIsReadAgainWhenItChanges writes a drill file, changes it
// and removes it, and checks what the drill asks and says each time: one
// line per drill that starts or ends, a line that is no drill said once,
// as a warning naming the drills, and an unreadable file taken as no
// drill, said once.
func TestADrillFileIsReadAgainWhenItChanges(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "drill")
	var out syncBuffer
	d := newDrill(path, "register 2", sayer(&out))
	write := func(content string) {
		t.Helper()
		if err := replaceFile(path, ".drill-*", content, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(want drillState, said ...string) {
		t.Helper()
		mark := len(out.String())
		d.check()
		got := out.String()[mark:]
		if st := d.load(); st != want {
			t.Errorf("the drill asks %+v; want %+v", st, want)
		}
		var lines []string
		for line := range strings.Lines(got) {
			_, text, _ := strings.Cut(strings.TrimSpace(line), "  ")
			lines = append(lines, text)
		}
		if strings.Join(lines, "\n") != strings.Join(said, "\n") {
			t.Errorf("the drill said:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(said, "\n"))
		}
	}

	expect(drillState{}) // no file: no drill, nothing said
	write("# a fire drill\n\n  Disk  full  \nclock +90s # the till runs fast\nkill in wish\ndisk ful\nclock 90s\n")
	unknown := func(line string) string {
		return fmt.Sprintf("register 2: warning: its drill file %s has the line %q, which is no drill; it is ignored (the drills: %s)", path, line, drillForms)
	}
	expect(drillState{disk: diskFull, clock: 90 * time.Second, killInWish: true},
		unknown("disk ful"), unknown("clock 90s"),
		"register 2's disk is full (drill)",
		"register 2's clock is stepped +1m30s (drill)",
		"register 2 will die (SIGKILL) carrying out its next wish (drill)")
	expect(drillState{disk: diskFull, clock: 90 * time.Second, killInWish: true}) // unchanged: not read again

	// Of two disk lines, the last counts; the unknown line is not said
	// again.
	write("disk full\ndisk read-only\nclock -2h\ndisk ful\n")
	expect(drillState{disk: diskReadOnly, clock: -2 * time.Hour},
		"register 2's disk is read-only (drill)",
		"register 2's clock is stepped -2h (drill)",
		"register 2 no longer dies carrying out its next wish (drill over)")
	if got := d.now(); time.Until(got) > -2*time.Hour+time.Minute || time.Until(got) < -2*time.Hour-time.Minute {
		t.Errorf("the drill's clock reads %v, %v from now; want 2h behind", got, time.Until(got))
	}
	write("clock -2h\n")
	expect(drillState{clock: -2 * time.Hour}, "register 2's disk takes writes again (drill over)")
	write("clock +1h30m\n")
	expect(drillState{clock: 90 * time.Minute}, "register 2's clock is stepped +1h30m (drill)")
	write("")
	expect(drillState{}, "register 2's drill ended: disk and clock as they are")

	// "kill in wish" is taken out of the file, the rest kept as it was.
	write("# keep this\nkill in wish # a power cut\ndisk full\n")
	expect(drillState{disk: diskFull, killInWish: true},
		"register 2's disk is full (drill)", "register 2 will die (SIGKILL) carrying out its next wish (drill)")
	d.mu.Lock()
	err := d.forgetKill()
	d.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "# keep this\ndisk full\n" {
		t.Errorf("the drill file holds %q (%v) once the kill is taken out", b, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("the drill file's mode is %v (%v) once the kill is taken out; want 0640 as it was", fi.Mode(), err)
	}
	expect(drillState{disk: diskFull}, "register 2 no longer dies carrying out its next wish (drill over)")

	// A file that cannot be read is no drill, said once.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	mark := len(out.String())
	d.check()
	d.check()
	said := out.String()[mark:]
	if st := d.load(); st != (drillState{}) || strings.Count(said, "warning: its drill file cannot be read") != 1 ||
		!strings.Contains(said, "register 2's drill ended: disk and clock as they are") {
		t.Errorf("a drill file that is a folder: the drill asks %+v and said:\n%s", st, said)
	}
}
