package testenv

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// SeedVar names the environment variable that replays one seed of the
// randomised tests (the random histories, the chaos drill): set, every
// such test plays that seed alone, as a failed run logged it:
//
//	MAGICSYNC_SEED=8207145412733351013 go test -race -run '^TestRandomHistoriesSettle$' ./internal/e2e/
//
// Unset, each run draws seeds of its own, so that the runs of the suite
// together try ever more histories rather than the same few again.
const SeedVar = "MAGICSYNC_SEED"

// Seed returns the seed of a randomised test: the one SeedVar names, or
// one drawn afresh. It logs it, with how to replay it, so that a failure
// shows it; a SeedVar that does not read as a seed fails the test.
func Seed(t testing.TB) uint64 {
	t.Helper()
	return Seeds(t, 1)[0]
}

// Seeds returns the n seeds a randomised test plays, each in a subtest
// of its own: n drawn afresh, or only the one SeedVar names. It logs them,
// with how to replay one, and says again how once the test failed.
func Seeds(t testing.TB, n int) []uint64 {
	t.Helper()
	seeds, fresh, err := seedsFrom(os.Getenv(SeedVar), n, rand.Uint64)
	if err != nil {
		t.Fatalf("%v", err)
	}
	name, _, _ := strings.Cut(t.Name(), "/")
	replay := func(seed string) string {
		return fmt.Sprintf("%s=%s go test -run '^%s$' <its package>", SeedVar, seed, name)
	}
	switch {
	case !fresh:
		t.Logf("seed %d, from %s", seeds[0], SeedVar)
	case len(seeds) == 1:
		t.Logf("seed %d, drawn for this run; to replay it: %s", seeds[0], replay(join(seeds)))
	default:
		t.Logf("seeds %s, drawn for this run, one per subtest; to replay one: %s", join(seeds), replay("<seed>"))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed with seeds %s; to replay one: %s", join(seeds), replay("<seed>"))
		}
	})
	return seeds
}

// seedsFrom returns the seeds given the value of SeedVar: the one it
// names, or n drawn with draw (fresh is then true).
func seedsFrom(env string, n int, draw func() uint64) (seeds []uint64, fresh bool, err error) {
	if v := strings.TrimSpace(env); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("%s=%q is not a seed: give an unsigned decimal integer, as a failed run logs it (or unset it to draw fresh seeds)", SeedVar, env)
		}
		return []uint64{s}, false, nil
	}
	seeds = make([]uint64, max(n, 1))
	for i := range seeds {
		seeds[i] = draw()
	}
	return seeds, true, nil
}

// join writes seeds as a list: "1, 2, 3".
func join(seeds []uint64) string {
	parts := make([]string, len(seeds))
	for i, s := range seeds {
		parts[i] = strconv.FormatUint(s, 10)
	}
	return strings.Join(parts, ", ")
}
