// This file holds NewCodecs and the Codecs it builds, carrying each
// declaration over into the engines' machinery (internal/codec).

package magicsync

import "github.com/magicsync/magicsync/internal/codec"

// Codecs holds the declared tables, compiled for the engines. It is an
// opaque handle: build it once with NewCodecs and pass it to the engines
// (server.New, replica.New), which read it; it is safe for concurrent use.
type Codecs = codec.Set

// NewCodecs checks the row types and builds their codecs. Each row is a
// value (or pointer) of a struct type with a SyncTable method. It refuses
// with a *DeclarationError listing every problem found, each naming the
// struct and field and saying what to do.
func NewCodecs(rows ...Declarer) (*Codecs, error) {
	anys := make([]any, len(rows))
	for i, row := range rows {
		anys[i] = row
	}
	c, problems := codec.Compile(anys, func(row any) codec.Table {
		return row.(Declarer).SyncTable()
	})
	if len(problems) > 0 {
		return nil, &DeclarationError{Problems: problems}
	}
	return c, nil
}
