// Command bench measures magicsync against the limits it could reach on the
// same machine: each figure beside a baseline measured in the same run, and
// the ratio between them checked against a floor.
//
//	go run ./bench            # every benchmark, full sizes
//	go run ./bench -short     # small sizes, floors not enforced (CI)
//	go run ./bench -run apply # only benchmarks whose name contains "apply"
//	go run ./bench -cpuprofile cpu.out -run fanout # profile this process
//	go run ./bench -childprofile dir -run 6        # profile the server and replica processes
//	go run ./bench -sqlstats -run 7                # the statements that took longest
//
// Benchmarks 3 to 7 need PostgreSQL: $DATABASE_URL, else the server on
// 127.0.0.1:5432, else a throwaway cluster from the local binaries (see
// internal/pgtest). Each creates a database of its own and drops it at the
// end. Benchmarks 6 and 7 run the server and the replicas in processes of
// their own (this binary again, with the hidden -role flag), so that each
// one's peak memory is its own.
//
// It exits non-zero when a figure falls outside its floor or ceiling.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// result is one benchmark's outcome.
type result struct {
	name     string
	figure   float64
	unit     string
	baseline float64 // zero when the benchmark has no baseline
	// floor is the least acceptable value: of figure/baseline when there is
	// a baseline (or when ratio is set), else of the figure itself. A
	// ceiling, when set, is the most acceptable figure (latencies, seconds).
	floor   float64
	ceiling float64
	note    string
}

func (r result) ratio() float64 {
	if r.baseline == 0 {
		return 0
	}
	return r.figure / r.baseline
}

func (r result) ok() bool {
	switch {
	case r.ceiling > 0:
		return r.figure <= r.ceiling
	case r.baseline > 0:
		return r.ratio() >= r.floor
	default:
		return r.figure >= r.floor
	}
}

// config is what every benchmark gets.
type config struct {
	short bool
	dir   string
	log   *slog.Logger
	// pg finds PostgreSQL for the benchmarks that need it, once.
	pg *pgSource
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
	{"11-host-writes", benchHostWrites},
}

func main() {
	short := flag.Bool("short", false, "small sizes; floors are reported but not enforced")
	only := flag.String("run", "", "run only benchmarks whose name contains this")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process to the file")
	childprofile := flag.String("childprofile", "", "write CPU profiles of the child processes of benchmarks 6 and 7 to this directory")
	sqlstats := flag.Bool("sqlstats", false, "print the statements that took the most time, per benchmark (diagnostic)")
	role := flag.String("role", "", "internal: run as a child process of benchmarks 6 and 7 (server, replica, fleet)")
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
	os.Exit(run(*short, *only, *cpuprofile, *sqlstats))
}

// run runs the benchmarks and returns the exit code.
func run(short bool, only, cpuprofile string, sqlstats bool) int {
	dir, err := os.MkdirTemp("", "magicsync-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	if cpuprofile != "" {
		stop, err := startProfile(cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer stop()
	}
	pg := &pgSource{}
	defer pg.close()
	c := config{short: short, dir: dir, log: slog.New(slog.NewTextHandler(io.Discard, nil)), pg: pg, sqlStats: sqlstats,
		note: func(format string, args ...any) { fmt.Fprintf(os.Stderr, "  "+format+"\n", args...) }}
	ctx := context.Background()
	var all []result
	failed := false
	for _, b := range benchmarks {
		if only != "" && !strings.Contains(b.name, only) {
			continue
		}
		start := time.Now()
		fmt.Fprintf(os.Stderr, "running %s…\n", b.name)
		rs, err := b.run(ctx, c)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", b.name, err)
			failed = true
			continue
		}
		fmt.Fprintf(os.Stderr, "  done in %v\n", time.Since(start).Round(time.Millisecond))
		all = append(all, rs...)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "benchmark\tfigure\tbaseline\tratio\tfloor\tverdict\tnote")
	for _, r := range all {
		base, ratio, floor := "—", "—", "—"
		if r.baseline > 0 {
			base, ratio = formatFigure(r.baseline, r.unit), fmt.Sprintf("%.2f", r.ratio())
		}
		switch {
		case r.ceiling > 0:
			floor = fmt.Sprintf("≤ %g %s", r.ceiling, r.unit)
		case r.baseline > 0 && r.floor > 0:
			floor = fmt.Sprintf("ratio ≥ %.2f", r.floor)
		case r.floor > 0:
			floor = fmt.Sprintf("≥ %g %s", r.floor, r.unit)
		}
		verdict := "ok"
		if !r.ok() {
			verdict = "UNDER FLOOR"
			if !short {
				failed = true
			}
		}
		if r.floor == 0 && r.ceiling == 0 {
			verdict = "report"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.name, formatFigure(r.figure, r.unit), base, ratio, floor, verdict, r.note)
	}
	w.Flush()
	if failed {
		return 1
	}
	return 0
}

func formatFigure(v float64, unit string) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f %s", v, unit)
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}
