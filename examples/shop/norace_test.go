//go:build !race

package main

// raceBuild says whether the tests run with the race detector: the
// programs they build and run are then built with it too.
const raceBuild = false
