//go:build unix && !linux

package main

import "syscall"

// childAttr puts a program in a process group of its own: a Ctrl-C at the
// soak's terminal is the soak's to handle.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
