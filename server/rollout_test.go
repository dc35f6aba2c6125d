package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// roll makes a rollout of the footer's value in a transaction of its own.
func (w *wishShop) roll(value string, scope server.RolloutScope, opts server.RolloutOptions) server.Rollout {
	w.t.Helper()
	tx, err := w.s.Begin(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	defer tx.Rollback(w.ctx) //nolint:errcheck // after Commit, a no-op
	ro, err := server.Roll(w.ctx, w.s, tx, shoptest.Setting{Name: "footer", Value: value}, scope, opts)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := tx.Commit(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	return ro
}

// status reads a rollout's status.
func (w *wishShop) status(id int64) server.RolloutStatus {
	w.t.Helper()
	st, err := w.s.RolloutStatus(w.ctx, id)
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// advance moves the rollouts on, as Run does after a pass.
func (w *wishShop) advance() {
	w.t.Helper()
	if err := w.s.AdvanceRollouts(w.ctx); err != nil {
		w.t.Fatal(err)
	}
}

// answerFooter answers the wish a register holds of its footer.
func (w *wishShop) answerFooter(replica uuid.UUID, state syncpb.WishState, reason string) {
	w.t.Helper()
	ws := w.wishOf(shoptest.Setting{RegisterID: replica, Name: "footer"})
	w.answer(replica, server.Wished{Replica: replica, Table: "settings", Key: ws.Key, Number: ws.Number}, state, reason)
}

// footerWished reports whether the register's footer has a wish of value.
func (w *wishShop) footerWished(replica uuid.UUID, value string) bool {
	w.t.Helper()
	list, err := w.s.Wishes(w.ctx, server.WishScope{Replica: replica, Table: "settings"})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, ws := range list.Wishes {
		if ws.Wanted["value"] == value {
			return true
		}
	}
	return false
}

// inShop adds a register to another shop, and takes its provisioning.
func (w *wishShop) inShop(shop uuid.UUID) uuid.UUID {
	w.t.Helper()
	id := uuid.New()
	w.exec(`INSERT INTO shop.registers VALUES ($1, $2)`, id, shop)
	w.pass()
	w.drain(id)
	return id
}

// wantCounts fails unless the status counts are want (states not named: 0).
func wantCounts(t *testing.T, st server.RolloutStatus, want map[server.WishState]int) {
	t.Helper()
	for _, s := range []server.WishState{server.WishPending, server.WishWaiting, server.WishApplied, server.WishRefused, server.WishSuperseded} {
		if st.Counts[s] != want[s] {
			t.Errorf("rollout %d counts %v, want %v", st.ID, st.Counts, want)
			return
		}
	}
}

// A rollout to a group wishes exactly the group's replicas, in the host's
// transaction: rolled back with it, there is neither rollout nor wish;
// committed, each register of the group is sent its wish, based on the
// version it last filed, and a register of another shop none.
func TestARolloutToAGroupWishesExactlyItsReplicasInOneTransaction(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	a1, a2 := w.register(), w.register()
	other := uuid.New()
	w.exec(`INSERT INTO shop.shops VALUES ($1, 'B')`, other)
	b := w.inShop(other)
	filed := map[uuid.UUID]shoptest.Setting{}
	for _, r := range []uuid.UUID{a1, a2, b} {
		filed[r] = w.setting(r, "footer", "Thank you", time.Now().Add(-time.Hour))
	}
	scope := server.RolloutScope{Group: w.shop.String()}

	tx, err := w.s.Begin(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.Roll(w.ctx, w.s, tx, shoptest.Setting{Name: "footer", Value: "Merci"}, scope, server.RolloutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(w.ctx); err != nil {
		t.Fatal(err)
	}
	if all, err := w.s.Rollouts(w.ctx); err != nil || len(all) != 0 {
		t.Errorf("after a rollback, Rollouts = %+v, %v; want none", all, err)
	}
	if list, err := w.s.Wishes(w.ctx, server.WishScope{}); err != nil || len(list.Wishes) != 0 {
		t.Errorf("after a rollback, the wishes: %+v, %v; want none", list.Wishes, err)
	}

	ro := w.roll("Merci", scope, server.RolloutOptions{Note: "ann: the new footer"})
	if ro.ID == 0 || ro.Table != "settings" || ro.Replicas != 2 || ro.Wished != 2 {
		t.Errorf("Roll = %+v; want the group's 2 registers wished", ro)
	}
	w.pass()
	if got := wishesIn(w.drain(b)); len(got) != 0 {
		t.Errorf("the register of another shop was sent %v", got)
	}
	for _, r := range []uuid.UUID{a1, a2} {
		got := wishesIn(w.drain(r))
		if len(got) != 1 {
			t.Fatalf("register %v was sent %d wishes, want 1", r, len(got))
		}
		want, _ := codec.DecodeTuple(got[0].Wanted, nil)
		based, _ := codec.DecodeTuple(got[0].BasedOn, nil)
		if string(got[0].Key) != string(w.key(filed[r])) || len(want) != 1 || want[0].S != "Merci" ||
			len(based) != 1 || based[0].I != filed[r].ChangedAt.UnixMicro() || got[0].Note != "ann: the new footer" {
			t.Errorf("register %v was sent %v", r, got[0])
		}
	}
	st := w.status(ro.ID)
	if st.Table != "settings" || st.Wanted["value"] != "Merci" || st.Scope.Group != w.shop.String() || st.State != server.RolloutRunning ||
		st.Replicas != 2 || st.Wished != 2 || st.Options.Note != "ann: the new footer" || st.CreatedAt.IsZero() {
		t.Errorf("RolloutStatus = %+v", st)
	}
	wantCounts(t, st, map[server.WishState]int{server.WishPending: 2})
}

// A rollout's counts move as its replicas answer, each read in one query;
// a wish of the row made since (Desire) is no longer counted as the
// rollout's; once every wish is answered for good, the rollout is done.
func TestARolloutsCountsMoveAsReplicasAnswer(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	rs := []uuid.UUID{w.register(), w.register(), w.register(), w.register()}
	for _, r := range rs {
		w.setting(r, "footer", "Thank you", time.Now())
	}
	ro := w.roll("Merci", server.RolloutScope{All: true}, server.RolloutOptions{})
	wantCounts(t, w.status(ro.ID), map[server.WishState]int{server.WishPending: 4})
	w.answerFooter(rs[0], syncpb.WishState_WISH_STATE_APPLIED, "")
	w.answerFooter(rs[1], syncpb.WishState_WISH_STATE_WAITING, "the printer is off")
	w.answerFooter(rs[2], syncpb.WishState_WISH_STATE_REFUSED, "not today")
	st := w.status(ro.ID)
	wantCounts(t, st, map[server.WishState]int{server.WishApplied: 1, server.WishWaiting: 1, server.WishRefused: 1, server.WishPending: 1})
	if st.Refusal != "not today" {
		t.Errorf("Refusal = %q, want the register's reason", st.Refusal)
	}
	// Another wish of the fourth register's footer replaces the rollout's.
	w.desire(shoptest.Setting{RegisterID: rs[3], Name: "footer", Value: "something else"}, "")
	st = w.status(ro.ID)
	wantCounts(t, st, map[server.WishState]int{server.WishApplied: 1, server.WishWaiting: 1, server.WishRefused: 1})
	if st.Withdrawn != 1 {
		t.Errorf("Withdrawn = %d after a Desire replaced one of the rollout's wishes, want 1", st.Withdrawn)
	}
	w.advance()
	if st := w.status(ro.ID); st.State != server.RolloutRunning {
		t.Errorf("with a wish waiting, the rollout is %s", st.State)
	}
	w.answerFooter(rs[1], syncpb.WishState_WISH_STATE_APPLIED, "")
	w.advance()
	st = w.status(ro.ID)
	wantCounts(t, st, map[server.WishState]int{server.WishApplied: 2, server.WishRefused: 1})
	if st.State != server.RolloutDone || st.EndedAt.IsZero() {
		t.Errorf("every wish answered for good: the rollout is %s (ended %v), want done", st.State, st.EndedAt)
	}
}

// A staged rollout wishes its first stage (the first replicas listed) in
// Roll's transaction, and the rest only once the first stage applied: not
// while it is pending, nor while it waits.
func TestAStagedRolloutWishesTheRestOnlyOnceTheFirstStageApplied(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	rs := []uuid.UUID{w.register(), w.register(), w.register(), w.register()}
	for _, r := range rs {
		w.setting(r, "footer", "Thank you", time.Now())
	}
	canary := rs[2]
	ro := w.roll("Merci", server.RolloutScope{Replicas: []uuid.UUID{canary, rs[0], rs[1], rs[3]}}, server.RolloutOptions{FirstStage: 1})
	if ro.Replicas != 4 || ro.Wished != 1 || !w.footerWished(canary, "Merci") {
		t.Fatalf("Roll = %+v; want the canary alone wished", ro)
	}
	w.advance()
	w.answerFooter(canary, syncpb.WishState_WISH_STATE_WAITING, "busy")
	w.advance()
	for _, r := range []uuid.UUID{rs[0], rs[1], rs[3]} {
		if w.footerWished(r, "Merci") {
			t.Fatalf("register %v was wished before the first stage applied", r)
		}
	}
	if st := w.status(ro.ID); st.Wished != 1 || st.Replicas != 4 {
		t.Errorf("before the first stage applied: %+v", st)
	}
	w.answerFooter(canary, syncpb.WishState_WISH_STATE_APPLIED, "")
	w.advance()
	for _, r := range rs {
		if !w.footerWished(r, "Merci") {
			t.Errorf("register %v was not wished once the first stage applied", r)
		}
	}
	st := w.status(ro.ID)
	if st.Wished != 4 || st.State != server.RolloutRunning {
		t.Errorf("after the second stage: %+v", st)
	}
	wantCounts(t, st, map[server.WishState]int{server.WishApplied: 1, server.WishPending: 3})
	w.pass()
	if got := wishesIn(w.drain(rs[0])); len(got) != 1 {
		t.Errorf("a register of the second stage was sent %d wishes, want 1", len(got))
	}
}

// Refusals above the threshold abort a staged rollout: the rest is never
// wished, and the reason names the counts and the refusal.
func TestARolloutAbortsWhenTooManyRefuseAndSaysWhy(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	rs := []uuid.UUID{w.register(), w.register(), w.register(), w.register()}
	for _, r := range rs {
		w.setting(r, "footer", "Thank you", time.Now())
	}
	ro := w.roll("Merci", server.RolloutScope{Replicas: rs}, server.RolloutOptions{FirstStage: 2, AbortAbovePercent: 40})
	w.answerFooter(rs[0], syncpb.WishState_WISH_STATE_APPLIED, "")
	w.answerFooter(rs[1], syncpb.WishState_WISH_STATE_REFUSED, "the printer cannot print it")
	w.advance()
	st := w.status(ro.ID)
	if st.State != server.RolloutAborted || !strings.Contains(st.Reason, "1 of the 2") || !strings.Contains(st.Reason, "the printer cannot print it") {
		t.Errorf("after 1 refusal of 2 answers, above 40 %%: state %s, reason %q", st.State, st.Reason)
	}
	w.advance()
	for _, r := range rs[2:] {
		if w.footerWished(r, "Merci") {
			t.Errorf("register %v of the second stage was wished after the abort", r)
		}
	}
	if st := w.status(ro.ID); st.Wished != 2 || st.Replicas != 4 {
		t.Errorf("after the abort: wished %d of %d, want 2 of 4", st.Wished, st.Replicas)
	}
}

// AbortAfter holds the threshold back until enough replicas answered.
func TestARolloutsThresholdWaitsForAbortAfterAnswers(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	rs := []uuid.UUID{w.register(), w.register(), w.register()}
	ro := w.roll("Merci", server.RolloutScope{All: true}, server.RolloutOptions{AbortAbovePercent: 50, AbortAfter: 2})
	w.answerFooter(rs[0], syncpb.WishState_WISH_STATE_REFUSED, "no")
	w.advance()
	if st := w.status(ro.ID); st.State != server.RolloutRunning {
		t.Fatalf("one refusal, with AbortAfter 2: %s (%s)", st.State, st.Reason)
	}
	w.answerFooter(rs[1], syncpb.WishState_WISH_STATE_APPLIED, "")
	w.advance()
	if st := w.status(ro.ID); st.State != server.RolloutRunning {
		t.Fatalf("1 refusal of 2, 50 %% allowed: %s (%s)", st.State, st.Reason)
	}
	w.answerFooter(rs[2], syncpb.WishState_WISH_STATE_REFUSED, "no")
	w.advance()
	if st := w.status(ro.ID); st.State != server.RolloutAborted {
		t.Errorf("2 refusals of 3, 50 %% allowed: %s", st.State)
	}
}

// AbortRollout takes back the rollout's wishes not carried out yet (the
// replicas are told), leaves what was applied, and says who aborted it; a
// rollout aborted already cannot be aborted again.
func TestAbortingARolloutTakesBackItsWishesNotCarriedOut(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	rs := []uuid.UUID{w.register(), w.register(), w.register()}
	ro := w.roll("Merci", server.RolloutScope{All: true}, server.RolloutOptions{})
	w.pass()
	for _, r := range rs {
		w.drain(r)
	}
	w.answerFooter(rs[0], syncpb.WishState_WISH_STATE_APPLIED, "")
	w.answerFooter(rs[1], syncpb.WishState_WISH_STATE_WAITING, "busy")
	if err := w.s.AbortRollout(w.ctx, ro.ID, "ann: wrong footer"); err != nil {
		t.Fatal(err)
	}
	st := w.status(ro.ID)
	if st.State != server.RolloutAborted || !strings.Contains(st.Reason, "ann: wrong footer") || st.Withdrawn != 2 {
		t.Errorf("after AbortRollout: %+v", st)
	}
	wantCounts(t, st, map[server.WishState]int{server.WishApplied: 1})
	w.pass()
	if got := wishesIn(w.drain(rs[0])); len(got) != 0 {
		t.Errorf("the register that applied it was sent %v", got)
	}
	for _, r := range rs[1:] {
		if got := wishesIn(w.drain(r)); len(got) != 1 || !got[0].Withdrawn {
			t.Errorf("register %v was sent %v, want its wish withdrawn", r, got)
		}
	}
	if err := w.s.AbortRollout(w.ctx, ro.ID, "again"); err == nil {
		t.Error("aborting an aborted rollout again: no error")
	}
	if err := w.s.AbortRollout(w.ctx, ro.ID+100, ""); !errors.Is(err, server.ErrRolloutNotFound) {
		t.Errorf("aborting no rollout: %v, want ErrRolloutNotFound", err)
	}
}

// A rollout to all replicas wishes every one, in every group; one that
// never filed the row is wished on no version (IfUnchanged), one that did
// on the version it filed. Rollouts lists the newest first.
func TestARolloutToAllWishesEveryReplica(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	other := uuid.New()
	w.exec(`INSERT INTO shop.shops VALUES ($1, 'B')`, other)
	a, b := w.register(), w.inShop(other)
	filed := w.setting(a, "footer", "Thank you", time.Now())
	first := w.roll("Merci", server.RolloutScope{All: true}, server.RolloutOptions{})
	w.pass()
	for r, based := range map[uuid.UUID]int{a: 1, b: 0} {
		got := wishesIn(w.drain(r))
		if len(got) != 1 {
			t.Fatalf("register %v was sent %d wishes, want 1", r, len(got))
		}
		tuple, _ := codec.DecodeTuple(got[0].BasedOn, nil)
		if len(tuple) != based || (based == 1 && tuple[0].I != filed.ChangedAt.UnixMicro()) {
			t.Errorf("register %v's wish is based on %v", r, tuple)
		}
	}
	second := w.roll("Danke", server.RolloutScope{All: true}, server.RolloutOptions{})
	all, err := w.s.Rollouts(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].ID != second.ID || all[1].ID != first.ID || !all[0].Scope.All || all[0].Replicas != 2 {
		t.Errorf("Rollouts = %+v; want the second, then the first", all)
	}
	wantCounts(t, all[0], map[server.WishState]int{server.WishPending: 2})
	if all[1].Withdrawn != 2 {
		t.Errorf("the first rollout, its wishes replaced by the second's: %+v", all[1])
	}
}

// A scope must name exactly one kind of scope, of replicas the server
// knows.
func TestARolloutOfABadScopeIsRefused(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	for _, c := range []struct {
		scope server.RolloutScope
		want  string
	}{
		{server.RolloutScope{}, "exactly one"},
		{server.RolloutScope{All: true, Replicas: []uuid.UUID{r}}, "exactly one"},
		{server.RolloutScope{Replicas: []uuid.UUID{r, uuid.New()}}, "not known"},
		{server.RolloutScope{Group: uuid.NewString()}, "holds no replica"},
	} {
		tx, err := w.s.Begin(w.ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = server.Roll(w.ctx, w.s, tx, shoptest.Setting{Name: "footer", Value: "x"}, c.scope, server.RolloutOptions{})
		tx.Rollback(w.ctx) //nolint:errcheck // a test's
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Roll of scope %+v: %v; want an error saying %q", c.scope, err, c.want)
		}
	}
}

// Run moves a staged rollout on by itself once its first stage applied.
func TestRunWishesARolloutsNextStage(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	rs := []uuid.UUID{w.register(), w.register()}
	ro := w.roll("Merci", server.RolloutScope{Replicas: rs}, server.RolloutOptions{FirstStage: 1})
	w.answerFooter(rs[0], syncpb.WishState_WISH_STATE_APPLIED, "")
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	go func() { done <- w.s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for w.status(ro.ID).Wished != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("Run did not wish the second stage: %+v", w.status(ro.ID))
		}
		<-tick.C
	}
}

// RollValues rolls values given as text out, as Roll does a Go row: the
// same wishes, and a clear refusal of a column missing or unknown.
func TestRollValuesRollsOutValuesGivenAsText(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	a, b := w.register(), w.register()
	tables := w.s.SettingTables()
	if len(tables) != 1 || tables[0].Name != "settings" || strings.Join(tables[0].Key, ",") != "name" || strings.Join(tables[0].Desired, ",") != "value" {
		t.Fatalf("SettingTables = %+v; want settings, keyed by name beside the register, value desired", tables)
	}
	ro, err := w.s.RollValues(w.ctx, "settings", map[string]string{"name": "footer"}, map[string]string{"value": "Merci"},
		server.RolloutScope{All: true}, server.RolloutOptions{Note: "from a form"})
	if err != nil {
		t.Fatal(err)
	}
	if ro.Replicas != 2 || ro.Wished != 2 {
		t.Errorf("RollValues = %+v; want 2 replicas wished", ro)
	}
	for _, r := range []uuid.UUID{a, b} {
		if !w.footerWished(r, "Merci") {
			t.Errorf("register %v has no wish of its footer", r)
		}
	}
	for _, c := range []struct {
		key, values map[string]string
		want        string
	}{
		{map[string]string{}, map[string]string{"value": "x"}, `no value for the key column "name"`},
		{map[string]string{"name": "footer"}, map[string]string{}, `no value for the desired column "value"`},
		{map[string]string{"name": "footer"}, map[string]string{"value": "x", "colour": "red"}, `no key or desired column "colour"`},
	} {
		_, err := w.s.RollValues(w.ctx, "settings", c.key, c.values, server.RolloutScope{All: true}, server.RolloutOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RollValues(%v, %v) = %v; want it to say %s", c.key, c.values, err, c.want)
		}
	}
	if _, err := w.s.RollValues(w.ctx, "products", nil, nil, server.RolloutScope{All: true}, server.RolloutOptions{}); err == nil {
		t.Error("RollValues of a catalog was taken")
	}
}
