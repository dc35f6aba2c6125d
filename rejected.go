// This file holds RejectedRow, a row one side of a sync could not take,
// and Side, which side that was: defined once for both engines
// (server.RejectedRow, server.Side and replica.RejectedRow are aliases).

package magicsync

import "time"

// RejectedRow is a row one side could not take, as an engine's status
// lists it: the server's Status, for every replica, or a replica's own.
type RejectedRow struct {
	// Table is the row's table. On a replica, a RejectedRow with no Table
	// is a whole message it could not decode: Message names it.
	Table string
	// Key names the row.
	Key Key
	// Reason says why.
	Reason string
	// Side says which side could not take it. A replica's own rows are
	// all SideReplica's.
	Side Side
	// Message is the id of the message that brought the row, on a
	// replica; zero in the server's Status.
	Message uint64
	// At is when the row was rejected.
	At time.Time
	// Reported is true once the server confirmed it heard of it, on a
	// replica; false in the server's Status.
	Reported bool
}

// Side names the side of a sync that could not take a row. Its values are
// stored as they are: they never change.
type Side string

const (
	// SideReplica: the replica could not apply a row the server sent, or
	// could not read a row of its own to send it.
	SideReplica Side = "replica"
	// SideServer: the server refused to file a row the replica sent.
	SideServer Side = "server"
)
