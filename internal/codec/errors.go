// This file holds the package's errors, the problems Compile finds, and
// the checking and quoting of SQL names.

package codec

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrNotDeclared is returned when a row's type, or a table name, is not
// among a Set's tables. The root package re-exports it.
var ErrNotDeclared = errors.New("magicsync: not declared")

// ErrBadValue is wrapped by every error about a value that cannot be
// converted between its canonical form and a Go or database value. The
// root package re-exports it.
var ErrBadValue = errors.New("magicsync: bad value")

// Problem is one thing wrong with a row type's declaration; the root
// package names it magicsync.Problem.
type Problem struct {
	Struct string // the Go type, e.g. "shop.Product"
	Field  string // the Go field, when the problem is one field's; or the Table field (Name, Active, Sync…) a table-level problem concerns
	Msg    string // what is wrong and what to do
}

// String writes the problem as one line.
func (p Problem) String() string {
	if p.Field == "" {
		return p.Struct + ": " + p.Msg
	}
	return p.Struct + "." + p.Field + ": " + p.Msg
}

// checkIdentifier reports whether s is usable as a name in both databases:
// not empty, at most 63 bytes, no control character, quote or invalid UTF-8.
func checkIdentifier(s string) error {
	switch {
	case s == "":
		return errors.New("an empty name")
	case len(s) > 63:
		return fmt.Errorf("the name %q is %d bytes, over PostgreSQL's 63", s, len(s))
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == '"' || r == utf8.RuneError {
			return fmt.Errorf("the name %q holds a control character, a quote or invalid UTF-8", s)
		}
	}
	return nil
}

// QuoteIdent quotes a name for SQL, in PostgreSQL and SQLite alike.
func QuoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
