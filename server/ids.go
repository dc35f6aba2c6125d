package server

import (
	"fmt"

	"github.com/google/uuid"
)

// ids.go holds the one judgement of a message id a replica names: in an
// acknowledgement (Ack), in its word of the last message it applied as it
// polls (Next) or as it uploads (Up.LastApplied). Every path asks
// judgeID, so that an id one path takes is never one another refuses.

// maxID bounds the ids a replica may report having applied beyond those
// the server issued it: a report of such an id tells a server restored
// from an older backup, which moves its ids past the report (reissued);
// one at or beyond the bound is refused and changes nothing. An id the
// server issued is always taken, even past the bound, so that a replica
// whose report moved the ids up to the bound is never stuck: the
// server's ids are PostgreSQL bigints, with 2^62 more ids above it.
const maxID = 1 << 62

// idWord is what a replica's naming of an id amounts to.
type idWord int

const (
	// idNone: a report of 0, before the replica applied any message.
	idNone idWord = iota
	// idIssued: an id the server issued the replica.
	idIssued
	// idAhead: a report of an id the server never issued the replica,
	// below the bound: the server was restored from an older backup.
	idAhead
)

// judgeID says what id amounts to for a replica the server issued ids
// below nextID: an acknowledgement, or with report the replica's word of
// the last message it applied. An id it refuses is answered with an
// error wrapping ErrNotIssued (and so ErrPermanent), and must change
// nothing.
func judgeID(replica uuid.UUID, id uint64, nextID int64, report bool) (idWord, error) {
	switch {
	case id == 0 && report:
		return idNone, nil
	case id == 0:
		return idNone, fmt.Errorf("%w: message 0 to replica %s (ids start at 1)", ErrNotIssued, replica)
	case nextID > 0 && id < uint64(nextID):
		return idIssued, nil
	case !report:
		return idNone, fmt.Errorf("%w: message %d to replica %s: the server issued it only messages up to %d", ErrNotIssued, id, replica, nextID-1)
	case id >= maxID:
		return idNone, fmt.Errorf("%w: replica %s says it applied message %d, but the server issued it only messages up to %d, and no replica can have applied one at or beyond 2^62 that the server did not issue it", ErrNotIssued, replica, id, nextID-1)
	}
	return idAhead, nil
}
