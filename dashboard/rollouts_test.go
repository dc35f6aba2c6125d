package dashboard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync/server"
)

// A *server.Server is every Source the dashboard knows of.
var (
	_ Source         = (*server.Server)(nil)
	_ Pinger         = (*server.Server)(nil)
	_ WishLister     = (*server.Server)(nil)
	_ RolloutLister  = (*server.Server)(nil)
	_ SettingReader  = (*server.Server)(nil)
	_ RolloutStarter = (*server.Server)(nil)
)

// rolloutSource lists fixed rollouts.
type rolloutSource struct {
	fakeSource
	rollouts []server.RolloutStatus
}

func (r rolloutSource) Rollouts(context.Context) ([]server.RolloutStatus, error) {
	return r.rollouts, nil
}

// The rollouts' page shows each rollout in plain words: what was wished to
// whom, how far it got, where its wishes stand, the refusal most said, and
// why one stopped.
func TestRolloutsPage(t *testing.T) {
	t.Parallel()
	src := rolloutSource{fakeSource: fakeSource{st: fleet()}, rollouts: []server.RolloutStatus{
		{ID: 3, Table: "footers", Wanted: map[string]any{"text": "Closed Monday"}, Scope: server.RolloutScope{All: true},
			Options: server.RolloutOptions{StartAt: testNow.Add(time.Hour), Window: server.DayWindow{From: 2 * time.Hour, To: 5*time.Hour + 30*time.Minute}},
			State:   server.RolloutRunning, Scheduled: true, Replicas: 3, CreatedAt: testNow},
		{ID: 2, Table: "footers", Wanted: map[string]any{"text": "Open on <b>Sundays</b>"}, Scope: server.RolloutScope{All: true},
			Options: server.RolloutOptions{Note: "the head office's operator", FirstStage: 1}, State: server.RolloutRunning,
			Replicas: 3, Wished: 1, Counts: map[server.WishState]int{server.WishWaiting: 1}, CreatedAt: testNow.Add(-5 * time.Minute)},
		{ID: 1, Table: "footers", Wanted: map[string]any{"text": "Thank you for shopping at the corner shop, see you soon!"}, Scope: server.RolloutScope{Group: "shop 1"},
			Options: server.RolloutOptions{AbortAbovePercent: 50}, State: server.RolloutAborted, Reason: "more than 50 % refused",
			Replicas: 3, Wished: 2, Counts: map[server.WishState]int{server.WishRefused: 2}, Withdrawn: 0,
			Refusal: "longer than the printer's 40 characters", CreatedAt: testNow.Add(-time.Hour), EndedAt: testNow.Add(-59 * time.Minute)},
	}}
	body := wishPage(t, src, "/rollouts")
	if strings.Contains(body, "<b>Sundays") {
		t.Error("a wanted value is not escaped")
	}
	got := text(body)
	for _, s := range []string{
		"receipt footer “Open on &lt;b&gt;Sundays&lt;/b&gt;” to every replica under way",
		"Wished to 1 of 3 replicas; the other 2 once the first have answered.", "1 waiting.", "Asked by the head office&#39;s operator.",
		"Started at 15:04 (5 min ago).",
		"to the replicas of the group shop 1 stopped", "Wished to 2 of 3 replicas; the other 1 never will be.", "2 refused.",
		"Most refusals say: longer than the printer&#39;s 40 characters",
		"Stopped: more than 50 % refused. Its wishes not yet carried out were taken back",
		"ended at 14:10",
		"“Closed Monday” to every replica scheduled", "Starts at 16:09: nothing is wished before.", "Carried out only from 02:00 to 05:30 of each replica's day.",
	} {
		if !strings.Contains(got, s) {
			t.Errorf("the rollouts' page lacks %q:\n%s", s, got)
		}
	}
	if i, j := strings.Index(body, `id="ro-2"`), strings.Index(body, `id="ro-1"`); i < 0 || j < i {
		t.Error("the rollouts are not listed newest first")
	}
	if got := text(wishPage(t, fakeSource{st: fleet()}, "/rollouts")); !strings.Contains(got, "This dashboard is not told of rollouts") {
		t.Errorf("without a RolloutLister: %s", got)
	}
	if got := text(wishPage(t, rolloutSource{fakeSource: fakeSource{st: fleet()}}, "/rollouts")); !strings.Contains(got, "No rollouts yet.") {
		t.Errorf("no rollouts: %s", got)
	}
}
