package testenv

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Rerun says how [RunAgain] runs a test binary's tests a second time.
type Rerun struct {
	// Env is added to the second run's environment ("NAME=value"): what
	// the tests read to run otherwise.
	Env []string
	// How names the second run in messages ("under logical capture").
	How string
	// Only, when not nil, picks the tests to run again by name; nil runs
	// them all.
	Only *regexp.Regexp
	// LeftOut names tests not to run again: at least the test that calls
	// RunAgain.
	LeftOut *regexp.Regexp
	// Parallel bounds how many tests run at once (-test.parallel); zero
	// leaves it as the run was asked.
	Parallel int
	// AtLeast is the fewest tests the second run must hold: a pattern
	// that matches fewer is a mistake.
	AtLeast int
	// Timeout bounds the second run; zero is 8 minutes.
	Timeout time.Duration
}

// RunAgain runs this test binary's tests again, in short mode and
// verbose, as r says, and fails t unless every one of them ran and
// passed: a test skipped the second time fails too, so that a second run
// that tests nothing cannot pass.
func RunAgain(t *testing.T, r Rerun) {
	t.Helper()
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 8 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	want := listTests(ctx, t, r.LeftOut)
	// The second run ends itself first, so that a test that hangs there
	// says where, in the output kept below.
	args := []string{"-test.short", "-test.count=1", "-test.v", "-test.skip", r.LeftOut.String(),
		"-test.timeout", (timeout - timeout/8).String()}
	if r.Only != nil {
		want = slices.DeleteFunc(want, func(name string) bool { return !r.Only.MatchString(name) })
		args = append(args, "-test.run", r.Only.String())
	}
	if len(want) < r.AtLeast {
		t.Fatalf("the binary lists %d tests to run %s: %v; want at least %d", len(want), r.How, want, r.AtLeast)
	}
	if r.Parallel > 0 {
		args = append(args, "-test.parallel", strconv.Itoa(r.Parallel))
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), r.Env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		kept := keepOutput(out)
		t.Fatalf("the tests %s failed (%v); what failed:\n%s\nthe end of their output:\n%s\nall of it: %s", r.How, err, failures(out, 80), tail(out, 20), kept)
	}
	passed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^--- PASS: (\w+) `).FindAllSubmatch(out, -1) {
		passed[string(m[1])] = true
	}
	var missing []string
	for _, name := range want {
		if !passed[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s, %d of the %d tests did not pass (skipped, or never run): %v\nthe end of their output:\n%s",
			r.How, len(missing), len(want), missing, tail(out, 40))
	}
	t.Logf("all %d tests passed %s", len(want), r.How)
}

// keepOutput writes a failed second run's whole output to a file that
// outlives the test, and returns its name.
func keepOutput(out []byte) string {
	f, err := os.CreateTemp("", "magicsync-rerun-*.log")
	if err != nil {
		return "not kept: " + err.Error()
	}
	defer f.Close()
	if _, err := f.Write(out); err != nil {
		return "not kept: " + err.Error()
	}
	return f.Name()
}

// listTests lists the tests of this binary (its -test.list), less those
// leftOut matches.
func listTests(ctx context.Context, t *testing.T, leftOut *regexp.Regexp) []string {
	t.Helper()
	out, err := exec.CommandContext(ctx, os.Args[0], "-test.list", ".").Output()
	if err != nil {
		t.Fatalf("listing the tests: %v\n%s", err, out)
	}
	var names []string
	for line := range strings.Lines(string(out)) {
		name := strings.TrimSpace(line)
		if strings.HasPrefix(name, "Test") && !leftOut.MatchString(name) {
			names = append(names, name)
		}
	}
	return names
}

// tail is the last n lines of out.
func tail(out []byte, n int) []byte {
	lines := bytes.Split(out, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return bytes.Join(lines, []byte("\n"))
}

// failures picks, from a verbose test run's output, the lines that say
// what failed: the FAIL lines and the messages of the tests (file:line),
// at most n of them, and after a timeout's panic every test it names as
// still running, so that a run that hung says where.
func failures(out []byte, n int) []byte {
	said := regexp.MustCompile(`^\s*(--- FAIL|panic:|\w+_test\.go:\d+: )`)
	stillRunning := regexp.MustCompile(`^\s+(running tests:|Test\w*(/\S+)? \(\S+\))$`)
	var picked [][]byte
	timedOut := false
	for _, line := range bytes.Split(out, []byte("\n")) {
		switch {
		case timedOut && stillRunning.Match(line):
			picked = append(picked, line)
		case timedOut && len(bytes.TrimSpace(line)) == 0:
			timedOut = false // the list of running tests ends at a blank line
		case said.Match(line) && len(picked) < n:
			picked = append(picked, line)
			timedOut = timedOut || bytes.HasPrefix(bytes.TrimSpace(line), []byte("panic: test timed out"))
		}
	}
	return bytes.Join(picked, []byte("\n"))
}
