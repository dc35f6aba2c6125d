package replica

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/magicsync/magicsync/internal/safetext"
)

// undecodable.go holds the report of a message the replica cannot decode:
// it neither applies nor acknowledges such a message, so the server would
// hand it the same bytes for ever. The report is a row of sync_rejected
// naming no table (its message and why), which the main lane sends up as
// Up.undecodable, again until a Filed confirms it, like the rows the
// replica could not take.

// maxUndecodableReason bounds the reason a report of a message that does
// not decode keeps and sends.
const maxUndecodableReason = 300

// reportUndecodable is Endpoint.ReportUndecodable.
func (r *Replica) reportUndecodable(ctx context.Context, id uint64, reason string) error {
	if r.closed.Load() {
		return ErrClosed
	}
	if id == 0 || id > 1<<63-1 {
		return fmt.Errorf("magicsync/replica: reporting message %d as undecodable: no message has that id", id)
	}
	// A decoder's error quotes the bytes it choked on: a NUL among them is
	// dropped, as the server drops it from the report, rather than marked.
	reason = safetext.Text(strings.ReplaceAll(reason, "\x00", ""), maxUndecodableReason)
	// sync_rejected is the engine's own table, guarded against the host's
	// writes: the report goes in a transaction marked as the engine's.
	err := r.writeEngine(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, insertUndecodable, reason, int64(id), r.clock.Now().UnixMicro(), int64(id))
		return err
	})
	if err != nil {
		return fmt.Errorf("magicsync/replica: reporting message %d as undecodable: %w", id, err)
	}
	r.log.Warn("magicsync/replica: a message does not decode; reporting it, for the server to provision the replica again", "message", id, "reason", reason)
	if l := r.lane("main"); l != nil {
		l.poke()
	}
	return nil
}
