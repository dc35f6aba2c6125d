//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/magicsync/magicsync/transport/httpsync"
)

// runAs is the OS user the register program runs as in a test of a
// read-only folder: root writes to any folder, read-only or not, so a
// test running as root runs it as nobody, as a shop's machine would run
// it as an ordinary user; nil runs it as this process's user.
func runAs(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("running as root, the register runs as nobody to meet a read-only folder, and there is no such user: %v", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(gid)}}
}

// ownedBy makes path, a test's temporary folder or file, the user's who
// runs the register (when that is not this process's), and its test's
// temporary folder reachable by that user.
func ownedBy(t *testing.T, cred *syscall.Credential, path string) {
	t.Helper()
	if cred == nil {
		return
	}
	if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatal(err)
	}
	// t.TempDir's folders sit in one of the test's own, which only its
	// owner may enter.
	for dir := filepath.Dir(path); dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 != 0 {
			continue
		}
		if !strings.HasPrefix(dir, os.TempDir()) || dir == filepath.Clean(os.TempDir()) {
			t.Skipf("nobody, who runs the register, cannot reach %s", dir)
		}
		if err := os.Chmod(dir, fi.Mode().Perm()|0o055); err != nil {
			t.Fatal(err)
		}
	}
}

// chmod sets path's permissions, and puts them back as the test ends so
// that its temporary folder can be removed.
func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(path, fi.Mode().Perm()) })
}

// TestRegisterNamesAReadOnlyDataFolder starts the register program over
// a data folder it cannot write to — read-only and empty, read-only and
// holding the register's file, or writable but with the register's file
// read-only — and checks that it stops at once, naming the folder or the
// file as read-only and saying how to mend it, rather than with SQLite's
// "unable to open database file".
func TestRegisterNamesAReadOnlyDataFolder(t *testing.T) {
	t.Parallel()
	cred := runAs(t)
	bin := buildShop(t)
	ownedBy(t, cred, bin)
	tokens := t.TempDir()
	ownedBy(t, cred, tokens)
	tokenFile := filepath.Join(tokens, "register-1.token")
	// The token is never shown to a head office: the register stops first.
	if err := os.WriteFile(tokenFile, []byte(httpsync.JoinToken(registerID(0), "secret")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		// prepare fills the data folder and makes it, or the file, read-only;
		// it returns the path the error must name, and what it must call it.
		prepare func(t *testing.T, data string) (path, called string)
	}{
		{"an empty read-only folder", func(t *testing.T, data string) (string, string) {
			chmod(t, data, 0o555)
			return data, "the data folder " + data
		}},
		{"a read-only folder holding the register's file", func(t *testing.T, data string) (string, string) {
			createRegisterFile(t, cred, registerFile(data, 0))
			chmod(t, data, 0o555)
			return data, "the data folder " + data
		}},
		{"a read-only file in a writable folder", func(t *testing.T, data string) (string, string) {
			file := registerFile(data, 0)
			createRegisterFile(t, cred, file)
			chmod(t, file, 0o444)
			return file, "its file " + file
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			data := t.TempDir()
			ownedBy(t, cred, data)
			path, called := c.prepare(t, data)
			ctx, cancel := context.WithTimeout(t.Context(), settle)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "register", "-n", "1", "-server", "http://127.0.0.1:1",
				"-token-file", tokenFile, "-data", data, "-for", "10s")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			b, err := cmd.CombinedOutput()
			out := string(b)
			t.Logf("the register printed:\n%s", out)
			if exit, ok := errors.AsType[*exec.ExitError](err); !ok || exit.ExitCode() != 1 {
				t.Fatalf("the register ended with %v; want exit status 1", err)
			}
			for _, want := range []string{
				"shop: register 1: " + called + " is read-only: ",
				"chmod u+w " + path,
				"pick another folder with -data",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("the register did not say %q", want)
				}
			}
			for _, unwanted := range []string{"unable to open", "readonly database", "out of memory", "SQLITE", "(14)", "(8)"} {
				if strings.Contains(out, unwanted) {
					t.Errorf("the register said %q: SQLite's words, not the register's", unwanted)
				}
			}
		})
	}
}

// createRegisterFile creates a register's SQLite file with its tables, as
// a run before would have, the user's who runs the register.
func createRegisterFile(t *testing.T, cred *syscall.Credential, file string) {
	t.Helper()
	db, err := openFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(t.Context(), registerSchema)
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if _, err := os.Stat(file + suffix); err == nil {
			ownedBy(t, cred, file+suffix)
		}
	}
}
