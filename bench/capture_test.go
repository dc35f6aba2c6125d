package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/server"
)

// TestBothModesRunOnTheLogicalServerEachNamed checks inBothModes: the
// body runs by triggers, then by logical replication, each on the server
// with wal_level=logical and in a directory of its own, and each result
// is named with its mode; logical capture's goals go to its results alone.
func TestBothModesRunOnTheLogicalServerEachNamed(t *testing.T) {
	t.Parallel()
	c := config{dir: t.TempDir(), note: t.Logf}
	var modes []server.Capture
	dirs := map[string]bool{}
	rs, err := inBothModes(context.Background(), c, func(_ context.Context, mc config) ([]result, error) {
		if !mc.onLogical {
			t.Errorf("capture by %s ran off the logical server", mc.capture)
		}
		modes = append(modes, mc.capture)
		dirs[mc.dir] = true
		return []result{{name: "5 x", bounds: mc.logicalGoals(goal(atMost, 4))}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(modes) != 2 || modes[0] != server.CaptureTriggers || modes[1] != server.CaptureLogical || len(dirs) != 2 {
		t.Fatalf("ran in %v, in %d directories; want triggers then logical, each in its own", modes, len(dirs))
	}
	if len(rs) != 2 || rs[0].name != "5 x (triggers)" || rs[1].name != "5 x (logical)" {
		t.Fatalf("results %+v", rs)
	}
	if len(rs[0].bounds) != 0 || len(rs[1].bounds) != 1 {
		t.Errorf("goals: %d by triggers, %d by logical replication; want 0 and 1", len(rs[0].bounds), len(rs[1].bounds))
	}
}

// TestTheHeaderNamesTheServerOfBothModes checks that the results' header
// names the server the benchmarks of both capture modes ran on, in bold
// when its commits do not wait for the disk, and leaves out the main
// server's line when no other benchmark used it.
func TestTheHeaderNamesTheServerOfBothModes(t *testing.T) {
	t.Parallel()
	logical := pgDescription{used: true, origin: pgtest.OriginLogicalCluster,
		server: pgServer{version: "15.20", fsync: "on", synchronousCommit: "on", fullPageWrites: "on"}}
	h := runReport{started: time.Now(), logical: logical}.header()
	for _, want := range []string{"Both capture modes (benchmarks " + bothModesBenchmarks + "): PostgreSQL 15.20", "wal_level=logical", "fsync on"} {
		if !strings.Contains(h, want) {
			t.Errorf("the header does not say %q:\n%s", want, h)
		}
	}
	if strings.Contains(h, "not used") || strings.Contains(h, "**") {
		t.Errorf("the header names an unused server, or a durable one in bold:\n%s", h)
	}
	logical.server.fsync = "off"
	h = runReport{started: time.Now(), logical: logical}.header()
	if !strings.Contains(h, "**PostgreSQL 15.20") {
		t.Errorf("a server of both modes whose commits do not wait for the disk is not in bold:\n%s", h)
	}
}
