package pgtest

import "syscall"

// setDeathSignal has the server shut down (fast) when this process dies
// without stopping it.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGINT }
