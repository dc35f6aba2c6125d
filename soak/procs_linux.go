package main

import "syscall"

// childAttr puts a program in a process group of its own (a Ctrl-C at the
// soak's terminal is the soak's to handle) and has the kernel kill it if
// the soak dies first, so that no program outlives a soak killed hard.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
