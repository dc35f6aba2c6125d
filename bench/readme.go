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

// markdown is the report as the README's results section: a line saying
// when, how and where, then the table.
func (r runReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, `%s`, %s; %d CPUs (%s/%s), load average %s at the start and %s at the end.\n",
		r.started.UTC().Format("2006-01-02 15:04 MST"), r.command, roundDuration(r.took),
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, r.loadStart, r.loadEnd)
	b.WriteString("Written by the run's `-readme`.\n\n")
	b.WriteString("| " + strings.Join(columns, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(columns)) + "\n")
	for _, res := range r.results {
		cells := res.cells()
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
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
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin := bytes.Index(old, []byte(resultsBegin))
	end := bytes.Index(old, []byte(resultsEnd))
	if begin < 0 || end < begin {
		return fmt.Errorf("%s has no %s … %s lines to write the results between", path, resultsBegin, resultsEnd)
	}
	var b bytes.Buffer
	b.Write(old[:begin+len(resultsBegin)])
	b.WriteString("\n")
	b.WriteString(text)
	b.Write(old[end:])
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), info.Mode().Perm())
}
