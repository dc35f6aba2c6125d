//go:build race

package main

import "time"

// raceBuild says whether the tests run with the race detector: the
// programs they build and run are then built with it too.
const raceBuild = true

// settle bounds every wait for the shop to reach a state: convergence has
// no single signal, so the tests poll for it, this long at most. Under the
// race detector, beside the rest of CI's packages on two cores, starting
// the demo's head office and registers alone took 19 s: the bound is
// longer there. It bounds an eventual state, not a speed.
const settle = 60 * time.Second
