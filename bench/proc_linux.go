package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// setDeathSignal has the kernel kill a child when the benchmark dies.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// raiseFileLimit raises the soft limit of open files to the hard one: a
// thousand replicas and their connections need more than the usual 1024.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// cpuSeconds is the CPU time this process used so far, user and system.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// procCPU is the CPU time, user and system, of process pid, and its
// command name, from /proc/PID/stat; ok is false when there is no such
// process here.
func procCPU(pid int) (secs float64, comm string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	// The name lies in parentheses and may hold spaces: the fields count
	// from its closing one.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return 0, "", false
	}
	fields := strings.Fields(string(b[end+1:]))
	// utime and stime are the stat's fields 14 and 15; state, field 3, is
	// fields[0].
	if len(fields) < 13 {
		return 0, "", false
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, "", false
	}
	return float64(utime+stime) / userHZ, string(b[open+1 : end]), true
}

// userHZ is the clock ticks per second /proc counts CPU time in: USER_HZ,
// 100 on every Linux architecture Go runs on (sysconf(_SC_CLK_TCK)).
const userHZ = 100

// fileLimit is the most files this process may open (its soft limit), or 0
// when it cannot be told.
func fileLimit() int {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return 0
	}
	return int(min(l.Cur, 1<<30))
}
