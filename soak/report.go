package main

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// report.go holds the run's figures, as printed and as written into the
// README.

// The README's figures are the run's own: -readme writes them between
// these two lines and leaves the rest of the file be.
const (
	figuresBegin = "<!-- soak:begin -->"
	figuresEnd   = "<!-- soak:end -->"
)

// report is what a run found.
type report struct {
	cfg             config
	seed            uint64
	started         time.Time
	code            string // the commit built, as codeVersion names it
	took            time.Duration
	tally           *tally
	cycles          int
	converged       []time.Duration // per calm, from the storm's end
	stormFaults     []int           // per storm, the faults injected
	filings         []filing
	movedLines      int // receipt lines filed for the second shop's products
	integrityPassed int
	broken          []string
	wishes          map[string]int // the fleet's wishes by state, at the last calm
}

// text is the report as a Markdown table and a verdict.
func (r *report) text() string {
	var b strings.Builder
	mode := "full"
	if r.cfg.short {
		mode = "short"
	}
	fmt.Fprintf(&b, "\n%s run, %s: seed %d, %d registers, %d head-office processes, %d storm(s) of %v, faults: %s; %s.\n\n",
		mode, r.started.UTC().Format("2006-01-02 15:04 MST"), r.seed, r.cfg.registers, r.cfg.offices, r.cycles, r.cfg.stormFor, r.cfg.faults,
		fmt.Sprintf("took %v on %d CPUs (%s/%s)", r.took.Round(time.Second), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH))
	b.WriteString("| fault | injected |\n|---|---:|\n")
	for _, f := range faultOrder {
		fmt.Fprintf(&b, "| %s | %d |\n", f, r.tally.get(f))
	}
	fmt.Fprintf(&b, "| **all faults** | **%d** |\n", r.tally.faults())
	fmt.Fprintf(&b, "| (load) catalog writes at the head office meanwhile | %d |\n", r.tally.get(faultPrices))
	fmt.Fprintf(&b, "| (load) registers moved to the other shop meanwhile | %d |\n", r.tally.get(loadMoves))
	fmt.Fprintf(&b, "| (not injected) a program stopped with an error it named, started again as a supervisor would | %d |\n\n", r.tally.get(faultStoppedWithError))
	b.WriteString("| checked after healing | result |\n|---|---:|\n")
	for _, f := range r.filings {
		fmt.Fprintf(&b, "| %s written by the registers | %d |\n", f.table, f.written)
		fmt.Fprintf(&b, "| %s lost (written, never filed) | %d |\n", f.table, len(f.lost))
		fmt.Fprintf(&b, "| %s filed twice | %d |\n", f.table, len(f.duplicated))
		fmt.Fprintf(&b, "| %s filed with other contents, or never written | %d |\n", f.table, len(f.differing)+len(f.extra))
		fmt.Fprintf(&b, "| %s gone with every copy put back to an older one (a disk before they were sent, or both the disk and the database) | %d |\n", f.table, f.gone)
	}
	if len(r.filings) > 0 {
		fmt.Fprintf(&b, "| receipt_lines filed for the second shop's products, rung up by registers moved there (all start in the first) | %d |\n", r.movedLines)
	}
	if r.integrityPassed > 0 {
		fmt.Fprintf(&b, "| files passing PRAGMA integrity_check | %d of %d |\n", r.integrityPassed, r.cfg.registers)
	}
	if len(r.converged) > 0 {
		s := slices.Sorted(slices.Values(r.converged))
		fmt.Fprintf(&b, "| time to agree after a storm, p50 / max (%d calms) | %v / %v |\n",
			len(s), s[(len(s)-1)/2].Round(10*time.Millisecond), s[len(s)-1].Round(10*time.Millisecond))
	}
	if len(r.wishes) > 0 {
		var parts []string
		for _, st := range slices.Sorted(maps.Keys(r.wishes)) {
			parts = append(parts, fmt.Sprintf("%s %d", st, r.wishes[st]))
		}
		fmt.Fprintf(&b, "| the last wish of each register's setting, by its answer (the dashboard's count) | %s |\n", strings.Join(parts, ", "))
	}
	if len(r.converged) > 0 {
		var faults, agreed []string
		for i, d := range r.converged {
			faults = append(faults, fmt.Sprint(r.stormFaults[i]))
			agreed = append(agreed, d.Round(100*time.Millisecond).String())
		}
		fmt.Fprintf(&b, "\nStorm by storm, the faults injected: %s; and the time to agree after each: %s.\n",
			strings.Join(faults, ", "), strings.Join(agreed, ", "))
	}
	if len(r.broken) == 0 {
		b.WriteString("\nEvery promise held: every row written filed once with its contents, every register holding what it should, digests agreeing, every file intact.\n")
	} else {
		fmt.Fprintf(&b, "\nBROKEN: %s\n", strings.Join(r.broken, "\n"))
	}
	return b.String()
}

// writeReadme writes the report between the README's markers.
func (r *report) writeReadme(path string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin, end := bytes.Index(old, []byte(figuresBegin)), bytes.Index(old, []byte(figuresEnd))
	if begin < 0 || end < begin {
		return fmt.Errorf("%s has no %s … %s section for the figures", path, figuresBegin, figuresEnd)
	}
	var b bytes.Buffer
	b.Write(old[:begin+len(figuresBegin)])
	b.WriteString("\n")
	fmt.Fprintf(&b, "`%s`, %s\n", commandLine(), r.code)
	b.WriteString(r.text())
	b.Write(old[end:])
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// commandLine is how the soak was run, as a user would type it.
func commandLine() string {
	return strings.TrimSpace("go run ./soak " + strings.Join(os.Args[1:], " "))
}

// codeVersion names the commit checked out in root, and whether the tree
// holds changes beside it: taken as the run builds the shop, it names the
// code the run measured.
func codeVersion(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "code of an unknown commit"
	}
	v := "commit " + strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		v += " with uncommitted changes"
	}
	return v
}
