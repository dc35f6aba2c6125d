package main

import (
	"math/rand/v2"
	"testing"

	"github.com/magicsync/magicsync/internal/testenv"
)

// seeded returns the source of a test's random sales: seeded afresh at
// every run and logged, or with MAGICSYNC_SEED, so that a failure can be
// played again.
func seeded(t testing.TB) *rand.Rand {
	t.Helper()
	seed := testenv.Seed(t)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}
