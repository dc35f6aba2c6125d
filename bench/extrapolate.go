package main

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// The README's section "Past this machine" is written by -readme, as the
// results are, from the run's own figures: what a fleet's delivery and its
// parked poll cost in benchmarks 9 and 14, multiplied out to fleets this
// machine could not hold. Nothing in it is typed by hand.
const (
	extrapolationBegin = "<!-- extrapolation:begin -->"
	extrapolationEnd   = "<!-- extrapolation:end -->"
)

// broadcastWithin is the time a broadcast should take to reach a fleet
// (benchmark 14's goal): the cores a broadcast needs are its CPU time
// spread over it.
const broadcastWithin = 4.0 // seconds

// descriptorReserve is what a head-office process keeps of its descriptors
// for other than parked polls (its pool, listener, files), as benchmark
// 14's balancer does.
const descriptorReserve = 200

// fleetCosts are what a fleet benchmark measured per delivery and per
// parked poll, attached to one of its results.
type fleetCosts struct {
	source     string // "benchmark 14, 20000 replicas"
	replicas   int
	serverCPU  float64 // ms of the head offices' CPU a delivery
	pgCPU      float64 // ms of PostgreSQL's backends' CPU a delivery
	pgMeasured bool
	statements float64 // a delivery
	rssKB      float64 // of a head office, a parked poll
	// idle, when measured: % of a core the server and PostgreSQL spent
	// on idle polling, over the replicas.
	idleServerPct, idlePGPct float64
	idleMeasured             bool
}

// machine is what this machine offers the extrapolation.
type machine struct {
	cores       int
	memKB       float64
	descriptors int // a process may open
}

// thisMachine describes the machine the run measured on.
func thisMachine() machine {
	m := machine{cores: runtime.NumCPU(), descriptors: fileLimit()}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				m.memKB, _ = strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			}
		}
	}
	return m
}

// fleetCostsOf picks, from the run's results, the delivery costs measured
// with the most replicas (benchmark 14 over 9 when as many), and the idle
// costs measured with the most; ok is false when the run measured none.
func fleetCostsOf(rs []result) (fleetCosts, bool) {
	var all []fleetCosts
	for _, r := range rs {
		if r.costs != nil {
			all = append(all, *r.costs)
		}
	}
	if len(all) == 0 {
		return fleetCosts{}, false
	}
	best := slices.MaxFunc(all, func(a, b fleetCosts) int { return cmp.Compare(a.replicas, b.replicas) })
	var idle []fleetCosts
	for _, c := range all {
		if c.idleMeasured {
			idle = append(idle, c)
		}
	}
	if !best.idleMeasured && len(idle) > 0 {
		i := slices.MaxFunc(idle, func(a, b fleetCosts) int { return cmp.Compare(a.replicas, b.replicas) })
		best.idleServerPct, best.idlePGPct, best.idleMeasured = i.idleServerPct, i.idlePGPct, true
		best.source += fmt.Sprintf("; idle polling from %s", i.source)
	}
	return best, true
}

// extrapolation is the README's section: the fleet's needs at 100,000 and
// 1,000,000 replicas, and which of this machine's resources runs out
// first.
func extrapolation(c fleetCosts, m machine) string {
	var b strings.Builder
	fmt.Fprintf(&b, "From %s: %s ms of head-office CPU, %s ms of PostgreSQL CPU and %s statements a delivery, %s KB of head-office memory a parked poll",
		c.source, formatNumber(c.serverCPU), pgText(c), formatNumber(c.statements), formatNumber(c.rssKB))
	if c.idleMeasured {
		fmt.Fprintf(&b, "; idle polling %s %% of a core in the server and %s %% in PostgreSQL per 1,000 replicas",
			formatNumber(1000*c.idleServerPct), formatNumber(1000*c.idlePGPct))
	}
	fmt.Fprintf(&b, ". A broadcast is one row changed for every replica, delivered within %s s; a head office holds one descriptor a parked poll, and keeps %d of its %d for the rest.\n\n",
		formatNumber(broadcastWithin), descriptorReserve, m.descriptors)
	b.WriteString("| | 100,000 replicas | 1,000,000 replicas |\n|---|---|---|\n")
	for _, row := range needs(c, m) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", row.what, row.at[0], row.at[1])
	}
	b.WriteString("\n" + saturation(c, m) + "\n")
	return b.String()
}

// pgText is PostgreSQL's CPU a delivery, or why there is none.
func pgText(c fleetCosts) string {
	if !c.pgMeasured {
		return "(not measured)"
	}
	return formatNumber(c.pgCPU)
}

// need is a row of the extrapolation's table.
type need struct {
	what string
	at   [2]string // at 100,000 and 1,000,000 replicas
}

// needs are what fleets of 100,000 and 1,000,000 replicas take.
func needs(c fleetCosts, m machine) []need {
	sizes := [2]float64{100_000, 1_000_000}
	row := func(what string, f func(n float64) string) need {
		return need{what: what, at: [2]string{f(sizes[0]), f(sizes[1])}}
	}
	perProcess := float64(m.descriptors - descriptorReserve)
	rows := []need{
		row("head-office processes, for the descriptors", func(n float64) string {
			if perProcess <= 0 {
				return "—"
			}
			return fmt.Sprintf("%.0f", math.Ceil(n/perProcess))
		}),
		row("head-office memory, parked polls", func(n float64) string { return gigabytes(n * c.rssKB) }),
		row("head-office CPU a broadcast", func(n float64) string {
			return coreSeconds(n * c.serverCPU / 1000)
		}),
		row("PostgreSQL statements a broadcast", func(n float64) string { return fmt.Sprintf("%.0f", n*c.statements) }),
		row("PostgreSQL CPU a broadcast", func(n float64) string {
			if !c.pgMeasured {
				return "—"
			}
			return coreSeconds(n * c.pgCPU / 1000)
		}),
	}
	if c.idleMeasured {
		rows = append(rows,
			row("idle polling, head offices", func(n float64) string { return fmt.Sprintf("%s cores", formatNumber(n*c.idleServerPct/100)) }),
			row("idle polling, PostgreSQL", func(n float64) string { return fmt.Sprintf("%s cores", formatNumber(n*c.idlePGPct/100)) }))
	}
	rows = append(rows, row(fmt.Sprintf("machines like this one (%d cores, %s)", m.cores, gigabytes(m.memKB)), func(n float64) string {
		cores := n * (c.serverCPU + c.pgCPU) / 1000 / broadcastWithin
		if c.idleMeasured {
			cores = max(cores, n*(c.idleServerPct+c.idlePGPct)/100)
		}
		return fmt.Sprintf("%.0f", math.Ceil(max(cores/float64(m.cores), n*c.rssKB/m.memKB)))
	}))
	return rows
}

// coreSeconds says CPU time, and the cores it takes to spend it within
// broadcastWithin.
func coreSeconds(secs float64) string {
	return fmt.Sprintf("%s core-s: %s cores for %s s", formatNumber(secs), formatNumber(secs/broadcastWithin), formatNumber(broadcastWithin))
}

// gigabytes says KiB as GB.
func gigabytes(kb float64) string { return formatNumber(kb/(1<<20)) + " GB" }

// limit is the fleet at which one of this machine's resources runs out.
type limit struct {
	what     string
	replicas float64
}

// saturation says the resources of this machine in the order the
// fleet's growth uses them up.
func saturation(c fleetCosts, m machine) string {
	window := float64(m.cores) * broadcastWithin * 1000 // core-ms within a broadcast
	var ls []limit
	// add is a resource of which the machine has have and a replica
	// takes each; one a replica does not use never runs out.
	add := func(what string, have, each float64) {
		if have > 0 && each > 0 {
			ls = append(ls, limit{what, have / each})
		}
	}
	add(fmt.Sprintf("descriptors, %d a head-office process", m.descriptors), float64(m.descriptors-descriptorReserve), 1)
	add("memory, "+gigabytes(m.memKB), m.memKB, c.rssKB)
	within := fmt.Sprintf("a broadcast within %s s on %d cores", formatNumber(broadcastWithin), m.cores)
	add("head-office CPU, "+within, window, c.serverCPU)
	if c.pgMeasured {
		add("PostgreSQL CPU, "+within, window, c.pgCPU)
		add("both sharing the cores, as here", window, c.serverCPU+c.pgCPU)
	}
	if c.idleMeasured {
		add("idle polling alone, server and PostgreSQL", float64(m.cores)*100, c.idleServerPct+c.idlePGPct)
	}
	slices.SortStableFunc(ls, func(a, b limit) int { return cmp.Compare(a.replicas, b.replicas) })
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%s at %.0f replicas", l.what, l.replicas)
	}
	return "On this machine the fleet's growth uses up, in this order: " + strings.Join(parts, "; ") + "."
}
