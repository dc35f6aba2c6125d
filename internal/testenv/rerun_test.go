package testenv

import (
	"strings"
	"testing"
)

// A second run that timed out says which tests were still running, as
// well as what failed before.
func TestFailuresNameTheTestsStillRunningAtATimeout(t *testing.T) {
	t.Parallel()
	out := strings.Join([]string{
		"=== RUN   TestA",
		"    a_test.go:12: something said",
		"--- FAIL: TestA (0.10s)",
		"=== RUN   TestB",
		"    TestB (1s)",
		"panic: test timed out after 7m0s",
		"\trunning tests:",
		"\t\tTestSlow (6m59s)",
		"\t\tTestSlower/sub (6m58s)",
		"",
		"goroutine 1 [running]:",
		"\t\tTestNotATestLine (x)",
	}, "\n")
	got := string(failures([]byte(out), 80))
	for _, want := range []string{"a_test.go:12: something said", "--- FAIL: TestA", "panic: test timed out", "running tests:", "TestSlow (6m59s)", "TestSlower/sub (6m58s)"} {
		if !strings.Contains(got, want) {
			t.Errorf("failures left out %q; got:\n%s", want, got)
		}
	}
	for _, notWant := range []string{"TestB (1s)", "TestNotATestLine"} {
		if strings.Contains(got, notWant) {
			t.Errorf("failures picked %q, outside the timeout's list, as a running test; got:\n%s", notWant, got)
		}
	}
}
