// Package e2e holds the end-to-end tests of the engines together: a real
// PostgreSQL, several real SQLite replicas, and an in-process transport
// that can be unplugged, lose, duplicate and reorder messages.
//
// The randomised tests — the random histories (TestRandomHistoriesSettle,
// TestRandomRouteHistoriesSettle) and the chaos drill
// (TestChaosProductsArriveWhileSalesContinue) — draw fresh seeds at every
// run and log them, so that the runs together try ever more histories. A
// failure shows its seed (the subtest's name, seed=…, and the test's log);
// play it again with MAGICSYNC_SEED:
//
//	MAGICSYNC_SEED=8207145412733351013 go test -race -run '^TestRandomHistoriesSettle$' ./internal/e2e/
//
// MAGICSYNC_PROPERTY_SEEDS=n has the random histories play n fresh seeds
// each instead of three (one under -short). A replayed history draws the
// same choices; the timing of the goroutines around them may still differ.
package e2e
