// Command soak runs the shop for a while under faults injected from
// outside — a lossy network, killed processes, a register's disk full,
// read-only or put back from an older copy, its clock stepped, PostgreSQL
// restarted and restored from a dump — and then checks, as a sceptical
// user would, that nothing was lost, nothing filed twice and every
// register holds what it should.
//
//	go run ./soak                     # the full run: 30 minutes, ≥ 10,000 faults
//	go run ./soak -short              # a minute, a few hundred faults (CI)
//	go run ./soak -seed 42            # replay a run's draws
//	go run ./soak -readme soak/README.md   # write the figures into the README
//	go run ./soak -short -break drop-filed # a promise broken on purpose: the run must fail
//
// The head office (two processes of the shop's `headoffice` program over
// one database, the first also wishing and rolling out settings as a busy
// operator) and the registers (the shop's `register` program, each over
// its own SQLite file) run as processes; each register reaches the head
// offices through a link of the soak's that loses, doubles, delays, holds
// back and cuts requests and answers, and meets the faults of its own
// process (a full or read-only disk, a stepped clock, a death inside a
// wish handler) through its drill file. The soak alternates storms, when
// the faults fly, with calms, when it heals everything, waits for the
// shop to agree, and checks: every receipt and line each register wrote
// is in PostgreSQL exactly once, with its contents; every register's file
// holds exactly what the head office's tables say it should; the
// dashboard shows every register's digests agreeing and every wish
// answered; and, at the end, PRAGMA integrity_check passes on every file.
// A run that breaks a promise names the first it broke, keeps its folder
// (logs, files, the database) and exits 1. See soak/README.md.
//
// It needs Go and PostgreSQL's server programs (initdb, postgres,
// pg_dump, pg_restore): it runs a PostgreSQL cluster of its own, in its
// folder, to restart and restore it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// config is what a run does, from its flags (see parseFlags).
type config struct {
	short     bool
	runFor    time.Duration // the storms' time in all
	stormFor  time.Duration // one storm
	settleFor time.Duration // the longest a calm waits for the shop to agree
	registers int
	offices   int
	saleEvery time.Duration
	seed      uint64
	faults    faultSet
	dir       string
	keep      bool
	readme    string
	out       io.Writer
	// sabotage, when set (-break), breaks a promise on purpose once the
	// last calm agreed, before the final checks.
	sabotage     func(context.Context, *world) error
	sabotageName string
}

// faultSet is the kinds of fault turned on, by their -faults names.
type faultSet map[string]bool

// faultKinds are the -faults names, with what each turns on.
var faultKinds = []struct{ name, what string }{
	{"net", "the links lose, double, delay, hold back and cut; registers cut off for a while"},
	{"kill", "registers SIGKILLed at random points, also inside a wish handler, and started again"},
	{"office", "head-office processes SIGKILLed and started again while the other serves"},
	{"copy", "a register's file put back from an older copy"},
	{"disk", "a register's disk full for a while, then read-only, then back"},
	{"clock", "a register's clock stepped back or forward for a while"},
	{"postgres", "PostgreSQL restarted"},
	{"dump", "PostgreSQL's database restored from a dump taken earlier"},
}

// has reports whether the kind of fault named is on.
func (s faultSet) has(kind string) bool { return s[kind] }

// String lists the kinds on, as -faults takes them.
func (s faultSet) String() string {
	var on []string
	for _, k := range faultKinds {
		if s[k.name] {
			on = append(on, k.name)
		}
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, ",")
}

// parseFaults reads -faults: "all", "none", or kinds separated by commas.
func parseFaults(v string) (faultSet, error) {
	s := faultSet{}
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		if name == "none" {
			continue
		}
		if name == "all" {
			for _, k := range faultKinds {
				s[k.name] = true
			}
			continue
		}
		if !slices.ContainsFunc(faultKinds, func(k struct{ name, what string }) bool { return k.name == name }) {
			return nil, fmt.Errorf("-faults: no kind of fault %q; the kinds are %s, or all, or none", name, kindNames())
		}
		s[name] = true
	}
	return s, nil
}

// kindNames lists the -faults names.
func kindNames() string {
	var names []string
	for _, k := range faultKinds {
		names = append(names, k.name)
	}
	return strings.Join(names, ", ")
}

func main() {
	c, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, c))
}

// parseFlags reads the soak's flags into a config, with the defaults of
// a full run or, under -short, of a short one.
func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	c := config{out: os.Stdout}
	fs.BoolVar(&c.short, "short", false, "a short run (a minute, a few hundred faults), as CI runs it")
	fs.DurationVar(&c.runFor, "for", 0, "the storms' time in all (default 30m, -short 1m)")
	fs.DurationVar(&c.stormFor, "storm", 0, "one storm's length, between two checks (default 2m, -short 30s)")
	fs.DurationVar(&c.settleFor, "settle", 3*time.Minute, "the longest a calm waits for the shop to agree before it fails the run")
	fs.IntVar(&c.registers, "registers", 5, "registers, each a process over its own SQLite file")
	fs.IntVar(&c.offices, "offices", 2, "head-office processes over the one database")
	fs.DurationVar(&c.saleEvery, "sale-every", 150*time.Millisecond, "time between two sales on each register's till")
	fs.Uint64Var(&c.seed, "seed", 0, "the seed of the run's draws (0: a new one, printed)")
	faults := fs.String("faults", "all", "the kinds of fault, separated by commas: "+kindNames()+", or all, or none")
	fs.StringVar(&c.dir, "dir", "", "the run's folder (default: a new one under the system's temporary folder)")
	fs.BoolVar(&c.keep, "keep", false, "keep the run's folder when it passes (a failing run always keeps it)")
	fs.StringVar(&c.sabotageName, "break", "", "break a promise on purpose before the final checks, which must then fail naming it: "+sabotageNames())
	fs.StringVar(&c.readme, "readme", "", "write the run's figures into this README, between its soak markers")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.faults, err = parseFaults(*faults); err != nil {
		return c, err
	}
	if c.sabotageName != "" {
		if c.sabotage, err = sabotageNamed(c.sabotageName); err != nil {
			return c, err
		}
	}
	if c.runFor == 0 {
		c.runFor = pick(c.short, time.Minute, 30*time.Minute)
	}
	if c.stormFor == 0 {
		c.stormFor = pick(c.short, 30*time.Second, 2*time.Minute)
	}
	switch {
	case c.registers < 1:
		return c, fmt.Errorf("-registers must be at least 1, not %d", c.registers)
	case c.offices < 1:
		return c, fmt.Errorf("-offices must be at least 1, not %d", c.offices)
	case c.runFor <= 0 || c.stormFor <= 0 || c.settleFor <= 0 || c.saleEvery <= 0:
		return c, fmt.Errorf("-for, -storm, -settle and -sale-every must be positive")
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	return c, nil
}

// sabotageNames lists the -break kinds, each with what it breaks.
func sabotageNames() string {
	var b strings.Builder
	for i, s := range sabotages {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s (%s)", s.name, s.what)
	}
	return b.String()
}

// pick returns ifShort under -short, otherwise otherwise.
func pick[T any](short bool, ifShort, otherwise T) T {
	if short {
		return ifShort
	}
	return otherwise
}
