// This file holds the device twin's vocabulary, defined once for both
// engines: Wish, a wish of a setting row, and WishState, where it stands.
// server.Wish, server.WishState, replica.Wish and replica.WishState are
// their aliases.

package magicsync

import (
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/enum"
)

// Wish is a wish that a setting row of type T take other values in its
// desired columns, with where it stands. Both engines hand it out: the
// server's WishesOf fills every field; a replica offers a handler the
// wish as it carries it out, with Wanted, Number, Note and WishedAt, and
// leaves the other fields, the server's record of the wish, zero.
type Wish[T any] struct {
	// Replica is the replica that carries it out (the server's record).
	Replica uuid.UUID
	// Key names the row (the server's record).
	Key Key
	// Wanted is the row with the wanted values in its desired columns.
	//
	// On the server it is the row as the server holds it (as the replica
	// last filed it). Of a row the replica has not filed yet (Filed
	// false), the server knows only the key, the origin and the wanted
	// values: its other fields hold their zero values, which are no values
	// of the row.
	//
	// On a replica it is the row as the replica holds it. Its version is
	// the one the replica holds: the engine moves it on when it writes the
	// wish.
	Wanted T
	// Filed says the server holds the row as its replica filed it, and
	// Wanted's other columns are the row's (the server's record).
	Filed bool
	// Number numbers the wish: it grows with every new wish of the same
	// row.
	Number uint64
	// State, Reason and AnsweredAt are the replica's answer to the wish
	// (the server's record): WishPending, empty and zero until the replica
	// answers.
	State  WishState
	Reason string
	// Note is what the server's operator noted with the wish (who, or
	// why).
	Note string
	// WishedAt is when the server made the wish.
	WishedAt   time.Time
	AnsweredAt time.Time
	// Deadline, when not zero, is when the wish expires if not carried
	// out by then (WishExpired). Both engines fill it.
	Deadline time.Time
	// WithdrawnAt is when a wish in state WishWithdrawn was taken back;
	// Before, where it stood then (WishPending, or the replica's answer,
	// with Reason and AnsweredAt). Zero for a wish held (the server's
	// record).
	WithdrawnAt time.Time
	Before      WishState
}

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
	// WishExpired: the wish's deadline passed before the replica carried
	// it out: the replica does not carry it out later. The server shows
	// it as soon as the deadline passes by its clock; a replica says so
	// too, by its own, when it comes to the wish. One whose clock is
	// behind may carry a wish out past the deadline; it answers applied,
	// and the wish shows applied, as it is.
	WishExpired
)

var wishStateNames = []string{
	WishPending: "pending", WishWaiting: "waiting", WishApplied: "applied",
	WishRefused: "refused", WishSuperseded: "superseded", WishWithdrawn: "withdrawn", WishExpired: "expired",
}

// String names the state.
func (s WishState) String() string { return enum.Name(wishStateNames, s, "WishState") }
