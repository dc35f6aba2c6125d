//go:build unix && !linux

package pgtest

import "syscall"

// setDeathSignal does nothing here: only Linux can signal a child when its
// parent dies, so elsewhere a server outlives a process that is killed.
func setDeathSignal(*syscall.SysProcAttr) {}
