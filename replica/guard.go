// Guarding the engine's own tables: the triggers that refuse the host's
// writes to the sync_* tables, and the mark that lets the engine's own
// writes pass.

package replica

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/magicsync/magicsync/internal/codec"
)

// guardedFrom is the step from which the engine's tables refuse the
// host's writes.
const guardedFrom = 6

const (
	// markWriting marks a transaction as one in which the engine writes
	// its own tables; unmarkWriting ends the mark before the commit, so
	// that it is never committed.
	markWriting   = "UPDATE sync_replica SET writing = 1"
	unmarkWriting = "UPDATE sync_replica SET writing = 0"

	// engineWriting is true while the engine writes in the transaction:
	// its mark, or a message's (applying).
	engineWriting = "(SELECT writing = 1 OR applying = 1 FROM sync_replica)"
)

// notOwnTable is true for a note of a table that is no own table of the
// file: one missing, or a catalog (which carries the triggers refusing the
// host's writes). It reads the file, not the declarations, so that every
// build installs the same guards.
const notOwnTable = "(NOT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = NEW.tbl) " +
	"OR EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'sync_' || NEW.tbl || '_refuse_insert'))"

// pendingColumns are the columns of sync_pending the note triggers leave
// alone: the host's writes to its own tables set row_id and change only.
var pendingColumns = []string{"tbl", "key", "sent_lane", "sent_seq", "sent_change", "sent_at", "resent", "held", "held_reason", "unreadable"}

// guardTriggers builds the triggers that refuse the host's writes to the
// engine's own tables. sync_pending takes the notes the triggers of own
// tables write on the host's writes (a new note, or change counted up on
// one held), and nothing else; sync_replica takes the engine's mark.
//
// The guards name no declared table, so that they are the same for every
// build: a build that declares other tables starts over the same file
// without installing them anew (a note of a table no build declares is
// only ever reported, never filed).
func guardTriggers() []trigger {
	var out []trigger
	for _, tbl := range engineTableNames {
		refuse := fmt.Sprintf("SELECT RAISE(ABORT, '%s')", sqlString(fmt.Sprintf(
			"magicsync/replica: %s is the engine's own table: the engine writes it, and refuses the host's writes to it; read it, or use the replica's API (Status, Inspect, ReleaseBacklog)", tbl)))
		when := map[string]string{"insert": "NOT " + engineWriting, "update": "NOT " + engineWriting, "delete": "NOT " + engineWriting}
		update := "UPDATE"
		switch tbl {
		case "sync_replica":
			// The engine's mark is itself an update of sync_replica.
			when["update"] = "OLD.writing = 0 AND NEW.writing = 0 AND OLD.applying = 0 AND NEW.applying = 0"
		case "sync_pending":
			when["insert"] = "(NEW.change <> 1 OR NEW.sent_lane IS NOT NULL OR NEW.sent_seq IS NOT NULL OR NEW.sent_change IS NOT NULL " +
				"OR NEW.sent_at IS NOT NULL OR NEW.resent <> 0 OR NEW.held IS NOT NULL OR NEW.held_reason IS NOT NULL " +
				"OR NEW.unreadable IS NOT NULL OR " + notOwnTable + ") AND " + when["insert"]
			update = "UPDATE OF " + strings.Join(pendingColumns, ", ")
		}
		for _, op := range []struct{ suffix, event string }{{"insert", "INSERT"}, {"update", update}, {"delete", "DELETE"}} {
			name := "sync_guard_" + tbl + "_" + op.suffix
			out = append(out, trigger{name, fmt.Sprintf("CREATE TRIGGER %s BEFORE %s ON %s WHEN %s BEGIN %s; END",
				codec.QuoteIdent(name), op.event, tbl, when[op.suffix], refuse)})
		}
	}
	return out
}

// writeEngine runs f in a transaction of its own, marked as the engine's
// (markWriting): the way for the engine's writes outside a message, a
// gather or an offer, which mark their own transactions.
func (r *Replica) writeEngine(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	if _, err := tx.ExecContext(ctx, markWriting); err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, unmarkWriting); err != nil {
		return err
	}
	return tx.Commit()
}
