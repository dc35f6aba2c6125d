package kitcmd

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

// What the command cannot run with is refused, exit code 2, before
// anything starts: no replica, an argument left over, an unknown flag,
// and what the command's own Transport refuses.
func TestUsageErrorsExit2BeforeAnythingStarts(t *testing.T) {
	refusing := Command{
		Flags:     func(fs *flag.FlagSet) { fs.String("transport", "", "") },
		Transport: func() (Transport, error) { return Transport{}, errors.New("-transport must be one it knows") },
	}
	for _, c := range []struct {
		cmd  Command
		args []string
		said string
	}{
		{Command{}, nil, "say which replica to test"},
		{Command{}, []string{"-replica", "true", "extra"}, "say which replica to test"},
		{Command{}, []string{"-replica", "true", "-transport", "nats"}, "flag provided but not defined: -transport"},
		{refusing, []string{"-replica", "true", "-transport", "x"}, "conformance: -transport must be one it knows"},
	} {
		var stdout, stderr bytes.Buffer
		if code := c.cmd.Run(c.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.said) {
			t.Errorf("%q exited %d, said %q; want 2 and %q", c.args, code, stderr.String(), c.said)
		}
		if stdout.Len() > 0 {
			t.Errorf("%q printed %q; want nothing on stdout", c.args, stdout.String())
		}
	}
}
