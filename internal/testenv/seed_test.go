package testenv

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Without MAGICSYNC_SEED, each call draws n seeds of its own; with it, the
// one it names alone, whatever n; a value that is not a seed is refused,
// saying what to give.
func TestSeedsAreFreshUnlessMagicsyncSeedNamesOne(t *testing.T) {
	t.Parallel()
	next := uint64(100)
	draw := func() uint64 { next++; return next }
	got, fresh, err := seedsFrom("", 3, draw)
	if err != nil || !fresh || !slices.Equal(got, []uint64{101, 102, 103}) {
		t.Errorf("unset: %v, fresh %v, %v; want 3 seeds drawn", got, fresh, err)
	}
	if got, _, _ := seedsFrom("", 0, draw); len(got) != 1 {
		t.Errorf("n = 0: %v; want one seed drawn all the same", got)
	}
	for _, env := range []string{"8207145412733351013", " 8207145412733351013\n"} {
		got, fresh, err := seedsFrom(env, 3, draw)
		if err != nil || fresh || !slices.Equal(got, []uint64{8207145412733351013}) {
			t.Errorf("%s=%q: %v, fresh %v, %v; want that seed alone", SeedVar, env, got, fresh, err)
		}
	}
	for _, env := range []string{"x", "-1", "1.5", "18446744073709551616"} {
		if _, _, err := seedsFrom(env, 3, draw); err == nil || !strings.Contains(err.Error(), "unsigned decimal integer") || !strings.Contains(err.Error(), SeedVar) {
			t.Errorf("%s=%q: %v; want it refused, saying what to give", SeedVar, env, err)
		}
	}
	// Two runs draw different seeds.
	a, _, _ := seedsFrom("", 3, rand.Uint64)
	b, _, _ := seedsFrom("", 3, rand.Uint64)
	if slices.Equal(a, b) {
		t.Errorf("two runs drew the same seeds %v", a)
	}
}

// logs is a testing.TB that keeps what is logged and runs the cleanups
// when told.
type logs struct {
	testing.TB
	mu       sync.Mutex
	lines    []string
	failed   bool
	cleanups []func()
}

func (l *logs) Helper()      {}
func (l *logs) Name() string { return "TestSomething/seed=1" }
func (l *logs) Failed() bool { return l.failed }
func (l *logs) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}
func (l *logs) Cleanup(f func()) { l.cleanups = append(l.cleanups, f) }

// Seeds logs the seeds a test plays and how to replay one, and says it
// again once the test failed, so that a failure shows them.
func TestSeedsAreLoggedWithHowToReplayThem(t *testing.T) {
	t.Setenv(SeedVar, "")
	l := &logs{TB: t}
	seeds := Seeds(l, 2)
	if len(seeds) != 2 || len(l.lines) != 1 {
		t.Fatalf("seeds %v, logged %q", seeds, l.lines)
	}
	for _, want := range []string{fmt.Sprint(seeds[0]), fmt.Sprint(seeds[1]), SeedVar + "=<seed>", "-run '^TestSomething$'"} {
		if !strings.Contains(l.lines[0], want) {
			t.Errorf("logged %q; want it to say %q", l.lines[0], want)
		}
	}
	l.failed = true
	for _, f := range l.cleanups {
		f()
	}
	if len(l.lines) != 2 || !strings.Contains(l.lines[1], "failed with seeds") || !strings.Contains(l.lines[1], fmt.Sprint(seeds[1])) {
		t.Errorf("logged once failed: %q", l.lines)
	}

	t.Setenv(SeedVar, "42")
	l = &logs{TB: t}
	if s := Seed(l); s != 42 || len(l.lines) != 1 || !strings.Contains(l.lines[0], "seed 42, from "+SeedVar) {
		t.Errorf("with %s=42: seed %d, logged %q", SeedVar, s, l.lines)
	}

	t.Setenv(SeedVar, "forty-two")
	if r := Ends(t, func(tb testing.TB) { Seed(tb) }); !strings.Contains(r.FatalMsg, `"forty-two" is not a seed`) {
		t.Errorf("with %s=forty-two: ended with %q; want the test failed, saying why", SeedVar, r.FatalMsg)
	}
}
