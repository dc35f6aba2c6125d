//go:build unix

package kit

import (
	"os/exec"
	"syscall"
)

// ownGroup runs cmd in a process group of its own, which its Cancel
// signals whole: sh and whatever the replica's command started.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
}
