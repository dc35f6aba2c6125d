//go:build !linux

package main

import "os/exec"

// setDeathSignal does nothing here: a child stops when its stdin ends.
func setDeathSignal(*exec.Cmd) {}

// raiseFileLimit does nothing here.
func raiseFileLimit() {}

// cpuSeconds is 0 here: the fleet benchmark reports no CPU time.
func cpuSeconds() float64 { return 0 }

// procCPU finds no process here: PostgreSQL's CPU time is not measured.
func procCPU(int) (secs float64, comm string, ok bool) { return 0, "", false }

// fileLimit cannot be told here: 0.
func fileLimit() int { return 0 }
