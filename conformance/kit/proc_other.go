//go:build !unix

package kit

import "os/exec"

// ownGroup leaves cmd as it is: without process groups, Cancel ends the
// shell alone.
func ownGroup(*exec.Cmd) {}
