// This file holds what a command is on both sides: CommandState, where a
// command stands. server.CommandState and replica.CommandState are its
// aliases.

package magicsync

import "github.com/magicsync/magicsync/internal/enum"

// CommandState is where a command stands: a one-shot action the server
// asked one replica to run (print a test page, recount the drawer), which
// the replica runs at most once. Its values are the protocol's, and are
// stored as they are: they never change.
type CommandState int

// The states of a command, numbered as the protocol numbers them. Queued,
// delivered and running are on the way; the others are final.
const (
	// CommandQueued: written at the server, not yet known to be at the
	// replica.
	CommandQueued CommandState = 1 + iota
	// CommandDelivered: the replica holds it and has not started it (it
	// runs commands one at a time, in the order they were issued).
	CommandDelivered
	// CommandRunning: the replica started its handler.
	CommandRunning
	// CommandSucceeded: the handler returned no error; its result is
	// kept.
	CommandSucceeded
	// CommandFailed: the handler returned an error, which the reason
	// holds, or the replica has no handler of the command's name.
	CommandFailed
	// CommandInterrupted: the handler may have run, but the replica
	// stopped (a crash, a power cut, a restore from an older copy) before
	// it answered. A command is never run twice, so it stays so: ask
	// again with a new command if it should run.
	CommandInterrupted
	// CommandExpired: its deadline passed before it started.
	CommandExpired
	// CommandCancelled: the server took it back before it started.
	CommandCancelled
)

var commandStateNames = []string{
	CommandQueued: "queued", CommandDelivered: "delivered", CommandRunning: "running",
	CommandSucceeded: "succeeded", CommandFailed: "failed", CommandInterrupted: "interrupted",
	CommandExpired: "expired", CommandCancelled: "cancelled",
}

// String names the state.
func (s CommandState) String() string { return enum.Name(commandStateNames, s, "CommandState") }

// Final reports whether the state is an end: succeeded, failed,
// interrupted, expired or cancelled.
func (s CommandState) Final() bool { return s >= CommandSucceeded && s <= CommandCancelled }
