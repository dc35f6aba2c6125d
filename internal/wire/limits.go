package wire

import (
	"fmt"
	"slices"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// ErrTooManyRows is wrapped by the error of DecodeToServerRows about a
// message holding more rows than its bound. It wraps ErrTooLarge, and not
// ErrMalformed: the message is well formed, only too big to take at once,
// and its rows go again in smaller messages.
var ErrTooManyRows = fmt.Errorf("%w: too many rows", ErrTooLarge)

// upRowLists names the lists of a message to the server whose entries count
// as its rows for DecodeToServerRows: every entry the server files, records
// or compares one by one.
var upRowLists = []string{
	"table_changes.upserts", "table_changes.deletes",
	"up.rejected", "up.cleared", "up.digests", "up.answers", "up.unsent",
}

// rows counts the entries of a scanned message to the server that count as
// rows (upRowLists).
func (s *scanned) rows() int {
	n := 0
	for _, name := range upRowLists {
		i := slices.Index(lists, name)
		if i < 0 {
			panic("wire: no list " + name)
		}
		n += s.entries[i]
	}
	return n
}

// DecodeToServerRows is DecodeToServerLimit, refusing besides a message that
// holds more than maxRows rows (none when maxRows is not positive): upserts
// and deletes of every table, rejected and cleared rows, digests, answers
// and unsent counts, all counted together. The count comes from the scan
// that precedes decoding, which allocates nothing: a message refused for
// its rows costs no more than that scan. The error wraps ErrTooManyRows
// (and so ErrTooLarge), not ErrMalformed.
func DecodeToServerRows(b []byte, limit, maxRows int) (*syncpb.ToServer, error) {
	return decodeToServer(b, limit, maxRows)
}
