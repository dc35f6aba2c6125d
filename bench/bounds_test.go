package main

import (
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// TestAShortRunFailsOnARatioUnderItsShortFloor checks what CI relies on: a
// ratio under its floor for short sizes fails a -short run, naming the
// benchmark and the ratio, while a floor of an absolute figure, set for
// the full sizes, is not judged there.
func TestAShortRunFailsOnARatioUnderItsShortFloor(t *testing.T) {
	t.Parallel()
	slow := result{name: "2 replica applies one-row messages", figure: 50, baseline: 100, unit: "msgs/s",
		bounds: []bound{ratioFloor(0.7, 0.6)}}
	latency := result{name: "5 update reaches a replica, p50", figure: 50, unit: "ms", bounds: []bound{ceiling(12)}}
	rep := runReport{short: true, results: []result{slow, latency}}
	failures := rep.failures()
	if len(failures) != 1 {
		t.Fatalf("failures = %q, want one: the ratio's", failures)
	}
	for _, want := range []string{"2 replica applies one-row messages", "ratio 0.5", "floor 0.6"} {
		if !strings.Contains(failures[0], want) {
			t.Errorf("failure %q does not say %q", failures[0], want)
		}
	}
	if v := latency.cells(true)[6]; v != "not judged (-short)" {
		t.Errorf("an absolute ceiling under -short has the verdict %q", v)
	}

	// At full size, the full floor applies: 0.65 holds the short floor,
	// not the full one.
	nearly := result{name: "2 replica applies one-row messages", figure: 65, baseline: 100, unit: "msgs/s", bounds: []bound{ratioFloor(0.7, 0.6)}}
	if f := (runReport{short: true, results: []result{nearly}}).failures(); len(f) != 0 {
		t.Errorf("0.65 against a short floor of 0.6 failed: %q", f)
	}
	if f := (runReport{results: []result{nearly, latency}}).failures(); len(f) != 2 {
		t.Errorf("at full size, failures = %q, want the ratio's and the latency's", f)
	}
}

// TestEveryGoalIsMarkedMetOrNotMet checks that a goal is never printed
// without its verdict, and that a goal not met fails nothing.
func TestEveryGoalIsMarkedMetOrNotMet(t *testing.T) {
	t.Parallel()
	r := result{name: "9 fleet of 10000: reach p99", figure: 12216, unit: "ms",
		bounds: []bound{goalOf("p99/p50", 2.48, "", atMost, 1.5)}}
	met := result{name: "9 fleet of 10000: server RSS per parked poll", figure: 39, unit: "KB", bounds: []bound{goal(atMost, 40)}}
	cell := r.cells(false)[5]
	if cell != "p99/p50 ≤ 1.5: NOT met (2.48)" {
		t.Errorf("goal cell = %q", cell)
	}
	if cell := met.cells(false)[5]; cell != "≤ 40 KB: met" {
		t.Errorf("goal cell = %q", cell)
	}
	if f := (runReport{results: []result{r, met}}).failures(); len(f) != 0 {
		t.Errorf("a goal not met failed the run: %q", f)
	}
	if v := r.cells(false)[6]; v != "report" {
		t.Errorf("a result with goals only has the verdict %q", v)
	}
}

// TestAServerThatDoesNotWaitForTheDiskIsSaidInBold checks the results'
// header: the throwaway cluster, or any server with a durability setting
// off, is named in bold with its settings; the local server in plain words.
func TestAServerThatDoesNotWaitForTheDiskIsSaidInBold(t *testing.T) {
	t.Parallel()
	throwaway := pgDescription{used: true, origin: pgtest.OriginThrowaway,
		server: pgServer{version: "15.20", fsync: "off", synchronousCommit: "off", fullPageWrites: "off"}}
	local := pgDescription{used: true, origin: pgtest.OriginLocal,
		server: pgServer{version: "15.20", fsync: "on", synchronousCommit: "on", fullPageWrites: "on"}}
	unsafeLocal := local
	unsafeLocal.server.fsync = "off"
	for _, tc := range []struct {
		d    pgDescription
		bold bool
		says []string
	}{
		{throwaway, true, []string{"PostgreSQL 15.20", "throwaway cluster", "fsync off", "synchronous_commit off", "full_page_writes off"}},
		{local, false, []string{"PostgreSQL 15.20", "local server", "fsync on"}},
		{unsafeLocal, true, []string{"local server", "fsync off"}},
	} {
		h := runReport{started: time.Now(), code: "Code: git revision abc, its tree clean.", postgres: tc.d}.header()
		if got := strings.Contains(h, "**PostgreSQL"); got != tc.bold {
			t.Errorf("bold = %v, want %v, in:\n%s", got, tc.bold, h)
		}
		for _, want := range append(tc.says, "git revision abc") {
			if !strings.Contains(h, want) {
				t.Errorf("the header does not say %q:\n%s", want, h)
			}
		}
	}
}
