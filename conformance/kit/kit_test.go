package kit_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magicsync/magicsync/conformance/kit"
	"github.com/magicsync/magicsync/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// buildGoReplica builds conformance/goreplica into the test's temporary
// directory and returns its path.
func buildGoReplica(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "goreplica")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/magicsync/magicsync/conformance/goreplica").CombinedOutput()
	if err != nil {
		t.Fatalf("building goreplica: %v\n%s", err, out)
	}
	return bin
}

// runKit runs the kit against the Go replica started with args, and
// returns its reports.
func runKit(t *testing.T, args string) []kit.Report {
	t.Helper()
	bin := buildGoReplica(t)
	var out lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reports, err := kit.Run(ctx, kit.Config{Replica: bin + " " + args, DatabaseURL: pgtest.URL(t), Dir: t.TempDir(), ReplicaOutput: &out})
	if err != nil {
		t.Fatalf("the kit did not run: %v\nthe replica said:\n%s", err, out.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the replica said:\n%s", out.String())
		}
	})
	return reports
}

func TestTheGoReplicaPassesEveryCase(t *testing.T) {
	t.Parallel()
	reports := runKit(t, "")
	if len(reports) < 11 {
		t.Errorf("the kit ran %d cases, want 11", len(reports))
	}
	ran := map[string]bool{}
	for _, r := range reports {
		ran[r.Name] = true
		if !r.Passed {
			t.Errorf("FAIL  %s: %s", r.Name, r.Reason)
			continue
		}
		t.Logf("PASS  %s (%s)", r.Name, r.Took.Round(time.Millisecond))
	}
	for _, name := range []string{"a retired row kept while pointed at", "a wish of a row not held"} {
		if !ran[name] {
			t.Errorf("the kit ran no case %q", name)
		}
	}
}

func TestTheKitCatchesAReplicaThatAppliesAMessageTwice(t *testing.T) {
	t.Parallel()
	reports := runKit(t, "-break=idempotent")
	var found bool
	for _, r := range reports {
		if r.Name != "redelivery of an older message" {
			continue
		}
		found = true
		if r.Passed {
			t.Fatalf("the kit passed a replica that applies a redelivered message again")
		}
		if !strings.Contains(r.Reason, "applied message") || !strings.Contains(r.Reason, "p004") {
			t.Errorf("the reason does not say the message was applied again, nor which row shows it: %s", r.Reason)
		}
	}
	if !found {
		t.Fatalf("no case named %q in the kit's reports", "redelivery of an older message")
	}
}

func TestTheKitCatchesAReplicaThatLetsARetiredRowGoWhileARowPointsAtIt(t *testing.T) {
	t.Parallel()
	reports := runKit(t, "-break=retired")
	for _, r := range reports {
		if r.Name != "a retired row kept while pointed at" {
			continue
		}
		if r.Passed {
			t.Fatalf("the kit passed a replica that lets a retired row go while its own row points at it")
		}
		if !strings.Contains(r.Reason, "let coupons row ckept go") {
			t.Errorf("the reason does not say the pointed-at row was let go: %s", r.Reason)
		}
		return
	}
	t.Fatalf("no case named %q in the kit's reports", "a retired row kept while pointed at")
}

// lockedBuffer is a bytes.Buffer the replica's output and the test's
// reading may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
