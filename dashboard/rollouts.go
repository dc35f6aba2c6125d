package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/magicsync/magicsync/server"
)

// RolloutLister is a Source that can list the rollouts of a setting to
// many replicas (see [server.Roll]); [*server.Server] is one. With it, the
// dashboard serves the rollouts' page (GET /rollouts), each with its live
// counts.
type RolloutLister interface {
	Rollouts(ctx context.Context) ([]server.RolloutStatus, error)
}

// RolloutStarter is a Source that can start a rollout: wish one value of
// a setting to many replicas in one call (see [server.Server.RollValues]);
// [*server.Server] is one. With it, the rollouts' page has a form per
// setting table, and POST /rollouts starts the rollout it describes.
type RolloutStarter interface {
	// SettingTables lists the setting tables, with their key columns
	// (but the replica's own) and the columns a wish sets.
	SettingTables() []server.SettingTable
	// RollValues starts a rollout of table's row named by key, wishing
	// it values (each as text), to scope, tuned by opts.
	RollValues(ctx context.Context, table string, key, values map[string]string, scope server.RolloutScope, opts server.RolloutOptions) (server.Rollout, error)
}

// rolloutEntry is a rollout as its page shows it.
type rolloutEntry struct {
	server.RolloutStatus
	Label string
	// Values is the values wished, in plain words; Scope, the replicas
	// in scope.
	Values, Scope string
	Counts        []WishCount
	// Waiting counts the replicas in scope not wished yet.
	Waiting int
	// Window is the window of the replicas' day its wishes hold to, as
	// "02:00 to 05:30"; "" for none.
	Window string
	Now    time.Time
}

// rolloutsView is the rollouts' page: the newest first, each with where
// its wishes stand; above them, with a [RolloutStarter], the form
// starting one.
func (h *handler) rolloutsView(r *http.Request) view {
	return h.rolloutsPage(r, nil)
}

// rolloutsPage is the rollouts' page with the form as filled (nil: empty).
func (h *handler) rolloutsPage(r *http.Request, filled *filledForm) view {
	v := view{Title: "Rollouts · " + h.title, Heading: "Rollouts", At: h.now()}
	if rs, ok := h.src.(RolloutStarter); ok {
		v.Form = h.rolloutForm(rs.SettingTables(), filled)
	}
	rl, ok := h.src.(RolloutLister)
	if !ok {
		v.Parts = []part{h.render("norollouts", true, "norollouts", nil)}
		return v
	}
	list, err := rl.Rollouts(r.Context())
	if err != nil {
		return h.failedView(v, fmt.Errorf("reading the rollouts: %w", err), h.noteFailure(r, "reading the rollouts", err, v.At))
	}
	h.answered()
	if len(list) == 0 {
		v.Parts = []part{h.render("norollouts", true, "norollouts", true)}
		return v
	}
	for _, ro := range list {
		e := rolloutEntry{RolloutStatus: ro, Label: h.words.Label(ro.Table), Values: values(ro.Wanted), Waiting: max(ro.Replicas-ro.Wished, 0), Now: v.At}
		if w := ro.Options.Window; !w.IsZero() {
			e.Window = clockTime(w.From) + " to " + clockTime(w.To)
		}
		counts := map[string]int{}
		for st, n := range ro.Counts {
			counts[st.String()] += n
		}
		e.Counts = wishCounts(counts)
		switch {
		case ro.Scope.All:
			e.Scope = "every replica"
		case ro.Scope.Group != "":
			e.Scope = "the replicas of the group " + ro.Scope.Group
		default:
			e.Scope = "a list of replicas"
		}
		v.Parts = append(v.Parts, h.render("ro-"+strconv.FormatInt(ro.ID, 10), true, "rollout", e))
	}
	return v
}

// clockTime writes a time of the day as "02:00".
func clockTime(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(d/time.Hour), int(d%time.Hour/time.Minute))
}
