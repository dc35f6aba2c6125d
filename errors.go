// This file holds the errors the package and its engines return.

package magicsync

import (
	"fmt"
	"strings"

	"github.com/magicsync/magicsync/internal/codec"
)

// ErrNotDeclared is returned when a row's type, or a table name, is not
// among the Codecs.
var ErrNotDeclared = codec.ErrNotDeclared

// ErrBadValue is wrapped by every error about a value that cannot be
// converted between its canonical form and a Go or database value.
var ErrBadValue = codec.ErrBadValue

// ProtocolError is the error about a message that speaks a newer protocol
// than this build: the side receiving it neither applies nor acknowledges
// it; a newer build of that side will. Both engines return it, for
// errors.As: the replica from Receive, the server from Receive.
type ProtocolError struct {
	// Got is the protocol the message speaks.
	Got uint32
	// Speak is the protocol this build speaks.
	Speak uint32
}

// Error says which protocols are involved and what to do.
func (e *ProtocolError) Error() string {
	return fmt.Sprintf("magicsync: the message speaks protocol %d and this build only %d: update this side; the message was not applied", e.Got, e.Speak)
}

// Problem is one thing wrong with a row type's declaration: the Go type
// (Struct, e.g. "shop.Product"), the field when the problem is one
// field's or the Table field a table-level problem concerns (Field), and
// what is wrong and what to do (Msg). Its String writes it as one line.
type Problem = codec.Problem

// DeclarationError lists every problem NewCodecs found in the row types
// it was given.
type DeclarationError struct {
	// Problems lists every problem found.
	Problems []Problem
}

// Error lists the problems, one a line.
func (e *DeclarationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "magicsync: %d problem(s) with the row declarations:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.String())
	}
	return b.String()
}
