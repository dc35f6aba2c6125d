package testenv

import (
	"os"
	"strings"
	"testing"
)

func TestMissingFailsUnderCIAndSkipsOtherwise(t *testing.T) {
	for _, tc := range []struct {
		ci   string
		fail bool
	}{{"true", true}, {"1", true}, {"yes", true}, {"", false}, {"false", false}, {"0", false}} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			r := Ends(t, func(tb testing.TB) { Missing(tb, "no frobnicator (apt-get install frob)", "the frob tests") })
			switch {
			case tc.fail && r.FatalMsg == "":
				t.Errorf("under CI=%q, a missing program did not fail the test (skip: %q)", tc.ci, r.SkipMsg)
			case tc.fail && !strings.Contains(r.FatalMsg, "under CI the frob tests must run"):
				t.Errorf("under CI=%q, the failure does not say why: %q", tc.ci, r.FatalMsg)
			case !tc.fail && (r.SkipMsg == "" || r.FatalMsg != ""):
				t.Errorf("with CI=%q, a missing program did not skip the test (fatal: %q)", tc.ci, r.FatalMsg)
			}
			if msg := r.FatalMsg + r.SkipMsg; !strings.Contains(msg, "apt-get install frob") {
				t.Errorf("the message does not say what to install: %q", msg)
			}
		})
	}
	t.Run("CI unset", func(t *testing.T) {
		t.Setenv("CI", "")
		os.Unsetenv("CI")
		if r := Ends(t, func(tb testing.TB) { Missing(tb, "no frobnicator", "the frob tests") }); r.SkipMsg == "" || r.FatalMsg != "" {
			t.Errorf("with CI unset, a missing program did not skip: skip %q, fatal %q", r.SkipMsg, r.FatalMsg)
		}
	})
}
