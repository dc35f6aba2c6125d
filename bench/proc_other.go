//go:build !linux

package main

import "os/exec"

// setDeathSignal does nothing here: a child stops when its stdin ends.
func setDeathSignal(*exec.Cmd) {}

// raiseFileLimit does nothing here.
func raiseFileLimit() {}
