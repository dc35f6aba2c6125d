package main

import (
	"context"
	"fmt"

	"github.com/magicsync/magicsync/server"
)

// rollout.go holds the head office's fleet-wide wishes: one footer rolled
// out to every register, the first register before the others, and its
// counts followed as the registers answer.

// rolloutFooters are the footers the head office rolls out, a day's in turn.
var rolloutFooters = []string{"Summer hours: 7 to 19", "New: oat milk for your coffee", "Closed on bank holidays"}

// rollFooter rolls text out as every register's footer, in one
// transaction: the first register now, the others once it carried the
// footer out; it stops, taking back what waits, if more than half of the
// registers that answered refused it.
func (ho *headOffice) rollFooter(ctx context.Context, text string) (server.Rollout, error) {
	tx, err := ho.engine.Begin(ctx)
	if err != nil {
		return server.Rollout{}, err
	}
	defer tx.Rollback(ctx) // after Commit, does nothing
	r, err := server.Roll(ctx, ho.engine, tx, Footer{Text: text}, server.RolloutScope{All: true},
		server.RolloutOptions{Note: "the head office's rollout", FirstStage: 1, AbortAbovePercent: 50, AbortAfter: 2})
	if err != nil {
		return server.Rollout{}, err
	}
	return r, tx.Commit(ctx)
}

// rolloutWatch follows one rollout and says its counts as they move.
type rolloutWatch struct {
	ho   *headOffice
	say  func(string, ...any)
	id   int64
	text string
	last string
}

// start follows the rollout r of footer text.
func (w *rolloutWatch) start(r server.Rollout, text string) {
	w.id, w.text, w.last = r.ID, text, ""
}

// running reports whether the rollout followed still runs, saying its
// counts when they moved and how it ended.
func (w *rolloutWatch) running(ctx context.Context) (bool, error) {
	if w.id == 0 {
		return false, nil
	}
	st, err := w.ho.engine.RolloutStatus(ctx, w.id)
	if err != nil {
		return false, err
	}
	if counts := fmt.Sprintf("%d of %d registers wished: %s", st.Wished, st.Replicas, wishCounts(st.Counts)); counts != w.last {
		w.last = counts
		w.say("rollout of the footer %q: %s", w.text, counts)
	}
	switch st.State {
	case server.RolloutRunning:
		return true, nil
	case server.RolloutAborted:
		w.say("rollout of the footer %q stopped: %s", w.text, st.Reason)
	default:
		w.say("rollout of the footer %q done", w.text)
	}
	w.id = 0
	return false, nil
}
