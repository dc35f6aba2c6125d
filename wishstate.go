// This file holds WishState, where a wish of the device twin stands: the
// one vocabulary of both engines (server.WishState and replica.WishState
// are its aliases).

package magicsync

import "fmt"

// WishState is where a wish stands. Its values are the protocol's, and are
// stored as they are: they never change.
type WishState int

// The states of a wish, numbered as the protocol numbers them.
const (
	// WishPending: the wish is on its way, or the replica has not answered
	// it yet.
	WishPending WishState = 1 + iota
	// WishWaiting: the replica will try again later, and offers the wish
	// again; the reason says why (its handler answered Later, panicked or
	// did not answer in time; the hardware is off; the replica does not
	// hold the row yet).
	WishWaiting
	// WishApplied: the replica carried the wish out: it wrote the wanted
	// values onto the row and moved its version on.
	WishApplied
	// WishRefused: the replica will not carry the wish out, for good; the
	// reason says why (its handler's reason, or the database's refusal).
	WishRefused
	// WishSuperseded: the row changed on the replica since the version the
	// wish was based on (IfUnchanged), so the wish no longer held: the
	// replica's value stands.
	WishSuperseded
	// WishWithdrawn: the server took the wish back (server.Withdraw, or a
	// rollout aborted). The server's own state: no replica answers it, and
	// a new wish of the row replaces it.
	WishWithdrawn
)

// String names the state.
func (s WishState) String() string {
	switch s {
	case WishPending:
		return "pending"
	case WishWaiting:
		return "waiting"
	case WishApplied:
		return "applied"
	case WishRefused:
		return "refused"
	case WishSuperseded:
		return "superseded"
	case WishWithdrawn:
		return "withdrawn"
	}
	return fmt.Sprintf("WishState(%d)", int(s))
}
