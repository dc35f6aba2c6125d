package kit

import (
	"context"
	"fmt"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/server"
)

// wishOfARowNotHeld is the case of a wish of a setting row the replica
// does not hold (PROTOCOL.md, section 10): a value rolled out to every
// replica, some of which lack the row. The replica must answer WAITING,
// with a reason, and not refuse it; once its application writes the row,
// it must carry the wish out — write the wanted value, its version moved
// on — and answer APPLIED.
func wishOfARowNotHeld(ctx context.Context, r *run) error {
	engine, _ := r.o.current()
	tx, err := engine.Begin(ctx)
	if err != nil {
		return fmt.Errorf("the kit could not begin its wish: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit, a no-op
	wished, err := server.Desire(ctx, engine, tx, Setting{ReplicaID: r.id, Name: "footer", Value: "thank you"}, "conformance kit")
	if err != nil {
		return fmt.Errorf("the kit could not wish a setting: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("the kit could not commit its wish: %w", err)
	}
	if err := r.eventually(ctx, func() (bool, string) {
		w, ok, err := r.wish(ctx, wished.Key)
		switch {
		case err != nil:
			return false, "reading the head office's wishes: " + err.Error()
		case !ok:
			return false, "the head office lost its wish of settings row footer"
		case w.State == server.WishWaiting && w.Reason != "":
			return true, ""
		case w.State == server.WishWaiting:
			return false, "the replica answered the wish of settings row footer, which it does not hold, WAITING without a reason: say why (\"holds no such row yet\")"
		case w.State == server.WishPending:
			return false, "the replica did not answer the wish of settings row footer, which it does not hold: it must answer WAITING"
		}
		return false, fmt.Sprintf("the replica answered the wish of settings row footer, which it does not hold, %v (%q): it must answer WAITING, and carry the wish out once it holds the row", w.State, w.Reason)
	}); err != nil {
		return err
	}
	// The replica's application writes the row: the wish holds now.
	if err := r.writeReplica(ctx, "INSERT INTO settings (replica_id, name, value, version) VALUES (?, 'footer', 'plain', 1)", r.id.String()); err != nil {
		return err
	}
	return r.eventually(ctx, func() (bool, string) {
		w, ok, err := r.wish(ctx, wished.Key)
		switch {
		case err != nil:
			return false, "reading the head office's wishes: " + err.Error()
		case !ok:
			return false, "the head office lost its wish of settings row footer"
		case w.State != server.WishApplied:
			return false, fmt.Sprintf("the wish of settings row footer stands %v (%q) at the head office after the replica's application wrote the row: the replica must try a waiting wish again and carry it out", w.State, w.Reason)
		}
		db, err := r.openReplica(false)
		if err != nil {
			return false, err.Error()
		}
		defer db.Close()
		var value string
		var version int64
		if err := db.QueryRowContext(ctx, "SELECT value, version FROM settings WHERE replica_id = ? AND name = 'footer'", r.id.String()).Scan(&value, &version); err != nil {
			return false, "reading the replica's settings row footer: " + err.Error()
		}
		if value != "thank you" || version <= 1 {
			return false, fmt.Sprintf("the replica answered APPLIED but holds settings row footer with value %q, version %d: want the wanted value \"thank you\" and its version moved on past 1", value, version)
		}
		n, err := r.count(ctx, "SELECT count(*) FROM kit.settings WHERE replica_id = $1 AND name = 'footer' AND value = 'thank you'", r.id)
		if err != nil || n == 0 {
			return false, "the replica did not send its settings row footer, as it wrote the wish, up: a wish carried out is the replica's own write"
		}
		return true, ""
	})
}

// wish reads, from the head office, the wish of the replica's setting
// row of key.
func (r *run) wish(ctx context.Context, key magicsync.Key) (server.WishSummary, bool, error) {
	engine, _ := r.o.current()
	list, err := engine.Wishes(ctx, server.WishScope{Replica: r.id})
	if err != nil {
		return server.WishSummary{}, false, err
	}
	for _, w := range list.Wishes {
		if w.Table == "settings" && w.Key == key {
			return w, true, nil
		}
	}
	return server.WishSummary{}, false, nil
}
