package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheExtrapolationNamesTheResourceAFleetUsesUpFirst checks the README's
// section against costs whose order is known: with 100 KB a parked poll
// on a 1 GB machine, memory (about 10,000 replicas) runs out before the
// descriptors of a process (19,800), and both before the CPU.
func TestTheExtrapolationNamesTheResourceAFleetUsesUpFirst(t *testing.T) {
	t.Parallel()
	costs := fleetCosts{source: "benchmark 14, 20000 replicas", replicas: 20000, serverCPU: 0.1, pgCPU: 0.05, pgMeasured: true,
		statements: 2, rssKB: 100}
	text := extrapolation(costs, machine{cores: 2, memKB: 1 << 20, descriptors: 20000})
	order := strings.SplitN(text[strings.Index(text, "uses up"):], ";", 3)
	if !strings.Contains(order[0], "memory") || !strings.Contains(order[1], "descriptors") {
		t.Errorf("the order of saturation is %q, want memory first, then descriptors", order[:2])
	}
	for _, want := range []string{"| head-office processes, for the descriptors | 6 | 51 |", "| PostgreSQL statements a broadcast | 200000 | 2000000 |"} {
		if !strings.Contains(text, want) {
			t.Errorf("the section lacks %q:\n%s", want, text)
		}
	}
}

// TestAnUnmeasuredPostgreSQLIsADashNotAFigure checks that where
// PostgreSQL's backends cannot be read, the row says so and judges no
// goal, rather than reporting zero CPU as met.
func TestAnUnmeasuredPostgreSQLIsADashNotAFigure(t *testing.T) {
	t.Parallel()
	m := &pgMeter{err: errPGNotHere}
	r := m.result("9 fleet of 100: PostgreSQL CPU per delivery", "ms", nil, nil, func(s float64) float64 { return s }, "", goal(atMost, 0.03))
	cells := r.cells(false)
	if cells[1] != "—" || !strings.Contains(cells[5], "not measured") || cells[6] != "not measured" {
		t.Errorf("cells = %q, want a dash, the goal not measured", cells)
	}
	if !strings.Contains(cells[7], "not processes of this machine") {
		t.Errorf("the note %q does not say why", cells[7])
	}
}

// TestTheReadmeKeepsWhatLiesOutsideItsSections checks that -readme
// rewrites the extrapolation between its markers and nothing else.
func TestTheReadmeKeepsWhatLiesOutsideItsSections(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "README.md")
	before := "intro\n" + extrapolationBegin + "\nold\n" + extrapolationEnd + "\nprose\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(path, extrapolationBegin, extrapolationEnd, "new\n"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n" + extrapolationBegin + "\nnew\n" + extrapolationEnd + "\nprose\n"; string(got) != want {
		t.Errorf("README = %q, want %q", got, want)
	}
}
