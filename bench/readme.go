package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// The results section of bench/README.md is the run's own output: -readme
// writes it between these two lines, and leaves the rest of the file be.
const (
	resultsBegin = "<!-- results:begin -->"
	resultsEnd   = "<!-- results:end -->"
)

// runReport is what a run writes into the README: its results and the
// circumstances they were measured in.
type runReport struct {
	started            time.Time
	took               time.Duration
	loadStart, loadEnd string
	command            string
	short              bool // small sizes: the floors of -short apply
	code               string
	postgres           pgDescription
	logical            pgDescription // the server of the benchmarks run in both capture modes
	results            []result
	errors             []string // benchmarks that failed, with their errors
}

// loadAverage is the machine's load average over the last minute, from
// /proc/loadavg, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return "unknown"
	}
	return fields[0]
}

// header says when, how and on what the figures were measured: the
// machine and its load, the code, and the PostgreSQL servers — the main
// one, and the one with wal_level=logical of the benchmarks run in both
// capture modes — each in bold when its commits do not wait for the disk.
func (r runReport) header() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, `%s`, %s; %d CPUs (%s/%s), load average %s at the start and %s at the end.\n",
		r.started.UTC().Format("2006-01-02 15:04 MST"), r.command, roundDuration(r.took),
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, r.loadStart, r.loadEnd)
	b.WriteString(r.code + "\n")
	if r.postgres.used || !r.logical.used {
		b.WriteString(r.postgres.emphasized() + "\n")
	}
	if r.logical.used {
		b.WriteString("Both capture modes (benchmarks " + bothModesBenchmarks + "): " + r.logical.emphasized() + "\n")
	}
	if r.short {
		b.WriteString("Short sizes (-short): the floors of ratios to a baseline are those for short sizes; those of absolute figures, set for the full sizes, are not judged.\n")
	}
	return b.String()
}

// failures are the floors the run's results fell on the wrong side of,
// each naming the benchmark, the value and the floor.
func (r runReport) failures() []string {
	var out []string
	for _, res := range r.results {
		for _, c := range res.checks(r.short) {
			if c.kind == floorBound && c.judged && !c.met {
				out = append(out, c.failure(res, r.short))
			}
		}
	}
	return out
}

// nearest says which judged floor the run came nearest to, or nothing
// when none was judged.
func (r runReport) nearest() string {
	best, at := 0.0, ""
	for _, res := range r.results {
		for _, c := range res.checks(r.short) {
			if c.kind != floorBound || !c.judged {
				continue
			}
			if m := c.margin(); m > 0 && (at == "" || m < best) {
				best, at = m, c.against(res)
			}
		}
	}
	if at == "" {
		return ""
	}
	return fmt.Sprintf("Nearest its floor or ceiling in this run: %s (a margin of %.2f×).", at, best)
}

// markdown is the report as the README's results section: the header,
// then the table.
func (r runReport) markdown() string {
	var b strings.Builder
	b.WriteString(r.header())
	b.WriteString("Written by the run's `-readme`.\n\n")
	b.WriteString("| " + strings.Join(columns, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(columns)) + "\n")
	for _, res := range r.results {
		cells := res.cells(r.short)
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	if n := r.nearest(); n != "" {
		b.WriteString("\n" + n + "\n")
	}
	if f := r.failures(); len(f) > 0 {
		b.WriteString("\nFloors not held:\n\n")
		for _, e := range f {
			b.WriteString("- " + e + "\n")
		}
	}
	if len(r.errors) > 0 {
		b.WriteString("\nFailed:\n\n")
		for _, e := range r.errors {
			b.WriteString("- " + strings.ReplaceAll(e, "\n", " ") + "\n")
		}
	}
	return b.String()
}

// roundDuration says a run's length as a reader would: "2 min 53 s".
func roundDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%d s", int(d.Seconds()))
	}
	return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
}

// writeReadme replaces what lies between the results markers of the file
// at path with text.
func writeReadme(path, text string) error {
	return writeSection(path, resultsBegin, resultsEnd, text)
}

// writeSection replaces what lies between the lines beginMark and endMark
// of the file at path with text.
func writeSection(path, beginMark, endMark, text string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin := bytes.Index(old, []byte(beginMark))
	end := bytes.Index(old, []byte(endMark))
	if begin < 0 || end < begin {
		return fmt.Errorf("%s has no %s … %s lines to write between", path, beginMark, endMark)
	}
	var b bytes.Buffer
	b.Write(old[:begin+len(beginMark)])
	b.WriteString("\n")
	b.WriteString(text)
	b.Write(old[end:])
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), info.Mode().Perm())
}
