//go:build !race

package testenv

// RaceEnabled reports whether the tests run under the race detector, which
// slows the code it watches several times over: a test bounding how long
// something takes allows for it.
const RaceEnabled = false
