package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// binaries.go is benchmark 15: what a device carries. The programs are
// built as a device's would be, CGO_ENABLED=0 (modernc.org/sqlite, no C
// compiler), from the workspace the run is in.

// headOfficeOnly matches the packages only a head office needs: a
// replica's program must link none of them (CI checks it too).
var headOfficeOnly = regexp.MustCompile(`^(github\.com/jackc/pgx|github\.com/magicsync/magicsync/server(/|$)|github\.com/prometheus/)`)

// benchBinaries builds the replica-only register of examples/minimal, the
// shop's program (head office and register in one) and the minimal head
// office, and reports their sizes; the register's baseline is a program
// of modernc.org/sqlite and net/http's client alone (bench/sizefloor),
// the least a register's program holds before the engine. It also counts
// the head office's packages the register links: none, at any size.
func benchBinaries(ctx context.Context, c config) ([]result, error) {
	root, err := workspaceRoot(ctx)
	if err != nil {
		return nil, err
	}
	size := func(pkg string) (float64, error) {
		out := filepath.Join(c.dir, "size-"+strings.NewReplacer("/", "-", ".", "").Replace(pkg))
		ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, pkg)
		cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
		}
		fi, err := os.Stat(out)
		if err != nil {
			return 0, err
		}
		return float64(fi.Size()) / 1e6, nil
	}
	sizes := map[string]float64{}
	for _, pkg := range []string{"./examples/minimal/register", "./bench/sizefloor", "./examples/shop", "./examples/minimal/headoffice"} {
		c.note("building %s", pkg)
		if sizes[pkg], err = size(pkg); err != nil {
			return nil, err
		}
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "./examples/minimal/register")
	cmd.Dir = root
	deps, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps ./examples/minimal/register: %w", err)
	}
	var linked []string
	for pkg := range strings.Lines(string(deps)) {
		if pkg = strings.TrimSpace(pkg); headOfficeOnly.MatchString(pkg) {
			linked = append(linked, pkg)
		}
	}
	linkedNote := "none of server, pgx, prometheus (go list -deps)"
	if len(linked) > 0 {
		linkedNote = strings.Join(linked, ", ")
	}
	reg, shop := sizes["./examples/minimal/register"], sizes["./examples/shop"]
	return []result{
		{name: "15 binary: replica-only register", figure: reg, unit: "MB", baseline: sizes["./bench/sizefloor"],
			note: fmt.Sprintf("examples/minimal/register, CGO_ENABLED=0 go build -trimpath: replica, httpsync, modernc.org/sqlite; %.0f%% of the shop's program. "+
				"Baseline: modernc.org/sqlite and net/http's client alone (bench/sizefloor)", 100*reg/shop)},
		{name: "15 binary: the register's head-office packages", figure: float64(len(linked)), unit: "packages",
			bounds: []bound{ceilingAtAnySize(0)}, note: linkedNote},
		{name: "15 binary: the shop (head office + register)", figure: shop, unit: "MB",
			note: "examples/shop, one program for both sides, CGO_ENABLED=0"},
		{name: "15 binary: minimal head office", figure: sizes["./examples/minimal/headoffice"], unit: "MB",
			note: "examples/minimal/headoffice: server, headoffice, pgx; CGO_ENABLED=0"},
	}, nil
}

// workspaceRoot is the folder of the go.work the run is in: the
// repository's root.
func workspaceRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOWORK").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOWORK: %w", err)
	}
	work := strings.TrimSpace(string(out))
	if work == "" || work == "off" {
		return "", fmt.Errorf("benchmark 15 builds the workspace's programs: run it from the repository, where go.work is")
	}
	return filepath.Dir(work), nil
}
