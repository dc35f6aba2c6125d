// Command bench measures magicsync against the limits it could reach on the
// same machine: each figure beside a baseline measured in the same run, and
// the ratio between them checked against a floor.
//
//	go run ./bench            # every benchmark, full sizes
//	go run ./bench -short     # small sizes, the ratios' short floors enforced (CI)
//	go run ./bench -run 9     # only benchmark 9
//	go run ./bench -run apply # only benchmarks whose name contains "apply"
//	go run ./bench -cpuprofile cpu.out -run fanout # profile this process
//	go run ./bench -childprofile dir -run 6        # profile the server and replica processes
//	go run ./bench -sqlstats -run 7                # the statements that took longest
//	go run ./bench -readme bench/README.md         # write the results into the README
//
// Benchmarks 3 to 7, 9 to 14, 16 and 17 need PostgreSQL: $DATABASE_URL,
// else the server on 127.0.0.1:5432, else a throwaway cluster from the
// local binaries (see internal/pgtest). Each creates a database of its own and drops it at
// the end. Benchmarks 5, 10, 11 and 16 run twice, once in each of the
// server's capture modes (triggers, logical replication), both on a server
// with wal_level=logical (pgtest.EnsureLogical: that server when it is so
// configured, else a private cluster, durable, started for the run).
// Benchmarks 6, 7, 9 and 17 run the server (and 6 and 7 the replicas, 17
// the NATS server) in processes of their own (this binary again, with the
// hidden -role flag), so that each one's memory and CPU time are its own. Benchmark 15 builds
// programs of the workspace: it runs from the repository, with the go
// command.
//
// Each figure is judged by its bounds (bounds.go): floors and ceilings,
// which the run enforces, and goals, which it reports met or NOT met. It
// exits non-zero when a figure falls outside a floor or ceiling, naming
// it; under -short, the floors of ratios to a baseline are judged at their
// values for short sizes (floors.go) and those of absolute figures not at
// all. The results' header says which PostgreSQL ran — and which ran the
// benchmarks of both capture modes — with its durability settings, and
// which git revision.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/magicsync/magicsync/server"
)

// result is one benchmark's outcome.
type result struct {
	name     string
	figure   float64
	unit     string
	baseline float64 // zero when the benchmark has no baseline
	// bounds judge the figure, its ratio to the baseline or values of
	// their own: floors the run enforces, goals it reports (bounds.go).
	bounds []bound
	note   string
	// unmeasured is a figure that could not be measured here (the note
	// says why): shown as a dash, its bounds not judged.
	unmeasured bool
	// costs, on one result of a fleet benchmark, are what it measured a
	// delivery and a parked poll to cost: the README extrapolates them.
	costs *fleetCosts
}

func (r result) ratio() float64 {
	if r.baseline == 0 {
		return 0
	}
	return r.figure / r.baseline
}

// config is what every benchmark gets.
type config struct {
	short bool
	dir   string
	log   *slog.Logger
	// pg finds PostgreSQL for the benchmarks that need it, once.
	pg *pgSource
	// onLogical puts the benchmark's databases on pg's server with
	// wal_level=logical, and capture is the way its engines learn the
	// host's writes: set by inBothModes for the benchmarks that run in
	// both (capture.go); else the main server, and triggers.
	onLogical bool
	capture   server.Capture
	// linger is the engines' server.Options.Linger: zero but in
	// benchmark 16's second pair of runs.
	linger time.Duration
	// sqlStats times every statement of the benchmarks' pools and prints
	// the costliest when a benchmark's database is dropped.
	sqlStats bool
	// note prints progress to stderr.
	note func(format string, args ...any)
}

// scale picks the full size, or the short one under -short.
func (c config) scale(full, short int) int {
	if c.short {
		return short
	}
	return full
}

type benchmark struct {
	name string
	run  func(ctx context.Context, c config) ([]result, error)
}

var benchmarks = []benchmark{
	{"1-apply-10k-rows", benchApplyBatch},
	{"2-apply-1k-messages", benchApplyMessages},
	{"3-file-upload", benchFileUpload},
	{"4-broadcast-fanout", benchFanout},
	{"5-update-latency", benchLatency},
	{"6-provision-1m", benchProvision},
	{"7-fleet-1k", benchFleet},
	{"8-encode-decode", benchEncodeDecode},
	{"9-fleet-sim", benchFleetSim},
	{"10-streaming", benchStreaming},
	{"11-host-writes", benchHostWrites},
	{"12-wishes", benchWishes},
	{"13-follows-fanout", benchFollows},
	{"14-fleet-processes", benchFleetProcesses},
	{"15-binary-size", benchBinaries},
	{"16-engine-pg-cpu", benchEngineCPU},
	{"17-fleet-nats", benchFleetNATS},
}

func main() {
	short := flag.Bool("short", false, "small sizes; the ratios' floors for short sizes are enforced, absolute floors not judged")
	only := flag.String("run", "", "run only the benchmark of this number, or those whose name contains this")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process to the file")
	childprofile := flag.String("childprofile", "", "write CPU profiles of the child processes of benchmarks 6, 7 and 9 to this directory")
	sqlstats := flag.Bool("sqlstats", false, "print the statements that took the most time, per benchmark (diagnostic)")
	readme := flag.String("readme", "", "write the results as Markdown into this file, between its <!-- results:begin --> and <!-- results:end --> lines")
	role := flag.String("role", "", "internal: run as a child process of benchmarks 6, 7 and 9 (server, replica, fleet)")
	flag.Parse()
	if *role != "" {
		os.Exit(runChild(*role))
	}
	if *childprofile != "" {
		if err := os.Setenv(profileDirEnv, *childprofile); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(run(runOptions{short: *short, only: *only, cpuprofile: *cpuprofile, sqlstats: *sqlstats, readme: *readme, command: commandLine()}))
}

// runOptions are the command's flags.
type runOptions struct {
	short      bool
	only       string
	cpuprofile string
	sqlstats   bool
	// readme, when set, is the file the results are written into.
	readme string
	// command is the command line, as the results' header shows it.
	command string
}

// commandLine is the command as run, without -readme: what a reader would
// type to measure again.
func commandLine() string {
	cmd := "go run ./bench"
	flag.Visit(func(f *flag.Flag) {
		switch {
		case f.Name == "readme":
		case f.Value.String() == "true":
			cmd += " -" + f.Name
		default:
			cmd += " -" + f.Name + " " + f.Value.String()
		}
	})
	return cmd
}

// selected reports whether the benchmark named name runs under -run only:
// a number selects the benchmark of that number ("1" is not "10"), other
// text the benchmarks whose name contains it.
func selected(name, only string) bool {
	if only == "" {
		return true
	}
	if _, err := strconv.Atoi(only); err == nil {
		num, _, _ := strings.Cut(name, "-")
		return num == only
	}
	return strings.Contains(name, only)
}

// run runs the benchmarks and returns the exit code.
func run(o runOptions) int {
	dir, err := os.MkdirTemp("", "magicsync-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	if o.cpuprofile != "" {
		stop, err := startProfile(o.cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer stop()
	}
	pg := &pgSource{}
	defer pg.close()
	c := config{short: o.short, dir: dir, log: slog.New(slog.NewTextHandler(io.Discard, nil)), pg: pg, sqlStats: o.sqlstats,
		note: func(format string, args ...any) { fmt.Fprintf(os.Stderr, "  "+format+"\n", args...) }}
	ctx := context.Background()
	rep := runReport{started: time.Now(), loadStart: loadAverage(), command: o.command, short: o.short, code: codeState(ctx)}
	for _, b := range benchmarks {
		if !selected(b.name, o.only) {
			continue
		}
		start := time.Now()
		fmt.Fprintf(os.Stderr, "running %s…\n", b.name)
		rs, err := b.run(ctx, c)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", b.name, err)
			rep.errors = append(rep.errors, fmt.Sprintf("%s: %v", b.name, err))
			continue
		}
		fmt.Fprintf(os.Stderr, "  done in %v\n", time.Since(start).Round(time.Millisecond))
		rep.results = append(rep.results, rs...)
	}
	rep.took, rep.loadEnd = time.Since(rep.started), loadAverage()
	rep.postgres, rep.logical = pg.description()
	fmt.Println(rep.header())
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(columns, "\t"))
	for _, r := range rep.results {
		fmt.Fprintln(w, strings.Join(r.cells(o.short), "\t"))
	}
	w.Flush()
	if n := rep.nearest(); n != "" {
		fmt.Println(n)
	}
	if o.readme != "" {
		if err := writeReadme(o.readme, rep.markdown()); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
		if costs, ok := fleetCostsOf(rep.results); ok {
			if err := writeSection(o.readme, extrapolationBegin, extrapolationEnd, extrapolation(costs, thisMachine())); err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
				return 2
			}
		}
		fmt.Fprintf(os.Stderr, "results written into %s\n", o.readme)
	}
	// What failed, last, where CI's log ends: each floor not held, and
	// each benchmark that could not measure.
	failures := rep.failures()
	for _, f := range append(failures, rep.errors...) {
		fmt.Fprintln(os.Stderr, "bench: FAILED:", strings.ReplaceAll(f, "\n", " "))
	}
	if len(failures) > 0 || len(rep.errors) > 0 {
		return 1
	}
	return 0
}

// columns are the results table's.
var columns = []string{"benchmark", "figure", "baseline", "ratio", "floor", "goal", "verdict", "note"}

// cells are a result's row of the results table, its bounds judged at
// the run's size (short under -short).
func (r result) cells(short bool) []string {
	base, ratio := "—", "—"
	if r.baseline > 0 {
		base, ratio = formatFigure(r.baseline, r.unit), fmt.Sprintf("%.2f", r.ratio())
	}
	var floors, goals []string
	verdict := "report"
	judged, failed := false, ""
	for _, c := range r.checks(short) {
		if c.kind == goalBound {
			goals = append(goals, c.goalText())
			continue
		}
		floors = append(floors, c.floorText(short))
		switch {
		case !c.judged:
		case !c.met:
			judged = true
			if failed == "" {
				failed = "UNDER FLOOR"
				if c.cmp == atMost {
					failed = "OVER CEILING"
				}
			}
		default:
			judged = true
		}
	}
	switch {
	case failed != "":
		verdict = failed
	case judged:
		verdict = "ok"
	case len(floors) > 0:
		verdict = "not judged (-short)"
	}
	figure := formatFigure(r.figure, r.unit)
	if r.unmeasured {
		figure, verdict = "—", "not measured"
	}
	return []string{r.name, figure, base, ratio, orDash(strings.Join(floors, "; ")),
		orDash(strings.Join(goals, "; ")), verdict, r.note}
}

// orDash is s, or a dash for an empty cell.
func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func formatFigure(v float64, unit string) string {
	if v >= 100 || v == 0 {
		return fmt.Sprintf("%.0f %s", v, unit)
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}
