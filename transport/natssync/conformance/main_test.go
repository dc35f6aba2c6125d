package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/magicsync/magicsync/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The Go replica over NATS passes every case of the kit, run with
// -transport nats: the kit's head office behind a NATS server, the
// replica given its nats:// URL (the NATS-only replica could not sync
// with the HTTP one).
func TestTheGoReplicaOverNATSPassesEveryCase(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "goreplica")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/magicsync/magicsync/transport/natssync/conformance/goreplica").CombinedOutput(); err != nil {
		t.Fatalf("building goreplica: %v\n%s", err, out)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"-transport", "nats", "-replica", bin, "-database", pgtest.URL(t)}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "cases passed over nats") || strings.Contains(stdout.String(), "FAIL") {
		t.Fatalf("conformance -transport nats exited %d:\n%s\n%s", code, stdout.String(), stderr.String())
	}
	if n := strings.Count(stdout.String(), "PASS  "); n < 14 {
		t.Fatalf("%d cases passed; want the kit's 14:\n%s", n, stdout.String())
	}
}

// A transport it does not know is refused before anything starts.
func TestAnUnknownTransportIsRefused(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-transport", "carrier-pigeon", "-replica", "true"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "-transport") {
		t.Fatalf("exited %d, said %q; want 2 naming -transport", code, stderr.String())
	}
}
