// Package testenv says what the tests may expect of the machine they run
// on: a test that needs a program the machine lacks (PostgreSQL's server
// programs, a Chromium) skips on a developer's machine, saying what to
// install, and fails under CI, where nothing may be skipped silently. It
// also gives the randomised tests their seeds (Seed, Seeds): fresh at every
// run, logged, and replayed one at a time with MAGICSYNC_SEED.
package testenv

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
)

// InCI says whether the environment variable CI, which CI services set, is
// set to anything but empty, "0" or "false", and to what.
func InCI() (string, bool) {
	v := os.Getenv("CI")
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "0", "false":
		return v, false
	}
	return v, true
}

// Missing ends a test that needs what the machine lacks. missing says what
// is missing and how to install it; tests names the tests that need it.
// Under CI the test fails; elsewhere it is skipped.
func Missing(t testing.TB, missing, tests string) {
	t.Helper()
	if ci, ok := InCI(); ok {
		t.Fatalf("%s; CI=%q is set, and under CI %s must run, not skip", missing, ci, tests)
	}
	t.Skip(missing + "; skipped, as CI is not set (under CI it fails)")
}

// Recorder is a testing.TB that records Fatalf and Skip instead of ending
// the test; each still ends the goroutine that calls it, as the real ones
// do. See [Ends].
type Recorder struct {
	testing.TB
	// FatalMsg and SkipMsg are what Fatalf and Skip were given.
	FatalMsg, SkipMsg string
}

// Helper does nothing: a Recorder reports no lines.
func (r *Recorder) Helper() {}

// Fatalf records the failure and ends the calling goroutine.
func (r *Recorder) Fatalf(format string, args ...any) {
	r.FatalMsg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Skip records the skip and ends the calling goroutine.
func (r *Recorder) Skip(args ...any) {
	r.SkipMsg = fmt.Sprint(args...)
	runtime.Goexit()
}

// Ends runs f with a Recorder over t, in a goroutine of its own so that f
// may end it, and returns the Recorder once f returned or was ended.
func Ends(t testing.TB, f func(tb testing.TB)) *Recorder {
	r := &Recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}
