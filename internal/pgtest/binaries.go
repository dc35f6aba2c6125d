package pgtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// binaries is one installation of the PostgreSQL server programs.
type binaries struct {
	dir     string // directory holding initdb and postgres
	major   int    // 15 for PostgreSQL 15.19
	version string // "15.19"
}

func (b binaries) initdb() string   { return filepath.Join(b.dir, "initdb") }
func (b binaries) postgres() string { return filepath.Join(b.dir, "postgres") }

// binaryGlobs are the places PostgreSQL's server programs are installed by
// the common packagings, besides $PATH.
var binaryGlobs = []string{
	"/usr/lib/postgresql/*/bin",          // Debian, Ubuntu
	"/usr/pgsql-*/bin",                   // PGDG RPMs
	"/usr/local/pgsql/bin",               // built from source
	"/opt/homebrew/opt/postgresql@*/bin", // Homebrew, Apple silicon
	"/usr/local/opt/postgresql@*/bin",    // Homebrew, Intel
	"/Applications/Postgres.app/Contents/Versions/*/bin",
}

// findBinaries returns the newest installation of initdb and postgres, or
// the newest of major version want when want is not zero.
func findBinaries(ctx context.Context, want int) (binaries, error) {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, g := range binaryGlobs {
		m, _ := filepath.Glob(g) // the patterns are constant and valid
		dirs = append(dirs, m...)
	}
	return findBinariesIn(ctx, dirs, want)
}

// findBinariesIn is findBinaries looking in dirs alone.
func findBinariesIn(ctx context.Context, dirs []string, want int) (binaries, error) {
	var found []binaries
	seen := map[string]bool{}
	for _, d := range dirs {
		for _, prog := range []string{"initdb", "postgres"} {
			// $PATH often holds symlinks into the real directory, and initdb
			// must run from beside its postgres.
			if real, err := filepath.EvalSymlinks(filepath.Join(d, prog)); err == nil {
				d = filepath.Dir(real)
				break
			}
		}
		if seen[d] || !executable(filepath.Join(d, "initdb")) || !executable(filepath.Join(d, "postgres")) {
			continue
		}
		seen[d] = true
		b, err := probeVersion(ctx, d)
		if err != nil {
			continue
		}
		found = append(found, b)
	}
	if len(found) == 0 {
		return binaries{}, errors.New("no PostgreSQL server programs (initdb and postgres) in $PATH or in " +
			strings.Join(binaryGlobs, ", ") + ": install PostgreSQL, or set DATABASE_URL")
	}
	b, ok := pickBinaries(found, want)
	if !ok {
		var have []string
		for _, f := range found {
			have = append(have, f.version+" in "+f.dir)
		}
		return binaries{}, fmt.Errorf("the cluster needs PostgreSQL %d, but only %s is installed", want, strings.Join(have, ", "))
	}
	return b, nil
}

// pickBinaries returns the newest of found, restricted to major version want
// when want is not zero.
func pickBinaries(found []binaries, want int) (binaries, bool) {
	var best binaries
	ok := false
	for _, b := range found {
		if want != 0 && b.major != want {
			continue
		}
		if !ok || compareVersions(b.version, best.version) > 0 {
			best, ok = b, true
		}
	}
	return best, ok
}

// compareVersions compares dotted version numbers such as "15.19" and "9.6.24".
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if c := cmp.Compare(x, y); c != 0 {
			return c
		}
	}
	return 0
}

var versionPattern = regexp.MustCompile(`\(PostgreSQL\) (\d+)((?:\.\d+)*)`)

// parseVersion reads the version out of "postgres (PostgreSQL) 15.19 (Debian ...)".
func parseVersion(out string) (major int, version string, err error) {
	m := versionPattern.FindStringSubmatch(out)
	if m == nil {
		return 0, "", fmt.Errorf("no version in %q", strings.TrimSpace(out))
	}
	major, err = strconv.Atoi(m[1])
	if err != nil {
		return 0, "", err
	}
	return major, m[1] + m[2], nil
}

// probeVersion asks the postgres program in dir for its version. postgres
// answers --version before it refuses to run as root.
func probeVersion(ctx context.Context, dir string) (binaries, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return binaries{}, err
	}
	major, version, err := parseVersion(string(out))
	if err != nil {
		return binaries{}, err
	}
	return binaries{dir: dir, major: major, version: version}, nil
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
