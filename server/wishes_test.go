package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// wishShop is a head office with registers and their settings.
type wishShop struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	s      *server.Server
	codecs *magicsync.Codecs
	shop   uuid.UUID
	seq    map[uuid.UUID]uint64
	// applied is the last message each register took.
	applied map[uuid.UUID]uint64
}

func newWishShop(t *testing.T) *wishShop {
	t.Helper()
	pool := newCapturePool(t)
	codecs := shoptest.Codecs(t, shoptest.Setting{}, shoptest.Currency{}, shoptest.Product{})
	opts := withCapture(server.Options{Replicas: shoptest.Replicas})
	shopserver.InstallTriggers(t, pool, codecs, opts)
	ctx := context.Background()
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	w := &wishShop{t: t, ctx: ctx, pool: pool, s: s, codecs: codecs, shop: uuid.New(), seq: map[uuid.UUID]uint64{}, applied: map[uuid.UUID]uint64{}}
	w.exec(`INSERT INTO shop.shops VALUES ($1, 'A')`, w.shop)
	return w
}

func (w *wishShop) exec(sql string, args ...any) {
	w.t.Helper()
	if _, err := w.pool.Exec(w.ctx, sql, args...); err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
}

func (w *wishShop) pass() {
	w.t.Helper()
	if err := w.s.Pass(w.ctx); err != nil {
		w.t.Fatal(err)
	}
}

// register adds a register and takes its provisioning.
func (w *wishShop) register() uuid.UUID {
	w.t.Helper()
	id := uuid.New()
	w.exec(`INSERT INTO shop.registers VALUES ($1, $2)`, id, w.shop)
	w.pass()
	w.drain(id)
	return id
}

// drain takes and acknowledges the register's messages until none waits,
// and returns them.
func (w *wishShop) drain(replica uuid.UUID) []*syncpb.ToReplica {
	w.t.Helper()
	var out []*syncpb.ToReplica
	for {
		ctx, cancel := context.WithTimeout(w.ctx, 300*time.Millisecond)
		msg, ok, err := w.s.Endpoint().Next(ctx, replica, server.Applied{})
		cancel()
		if err != nil {
			w.t.Fatal(err)
		}
		if !ok {
			return out
		}
		m, err := wire.DecodeToReplica(msg.Body)
		if err != nil {
			w.t.Fatal(err)
		}
		out = append(out, m)
		w.applied[replica] = msg.ID
		if err := w.s.Endpoint().Ack(w.ctx, replica, msg.ID); err != nil {
			w.t.Fatal(err)
		}
	}
}

// wishesIn lists the wishes the messages carried.
func wishesIn(msgs []*syncpb.ToReplica) []*syncpb.Wish {
	var out []*syncpb.Wish
	for _, m := range msgs {
		out = append(out, m.GetDown().GetWishes()...)
	}
	return out
}

// setting files a register's setting as the register would send it.
func (w *wishShop) setting(replica uuid.UUID, name, value string, at time.Time) shoptest.Setting {
	w.t.Helper()
	row := shoptest.Setting{RegisterID: replica, Name: name, Value: value, ChangedAt: at.UTC().Truncate(time.Microsecond)}
	w.upload(replica, &syncpb.Up{Tables: []*syncpb.TableChanges{shoptest.Changes(w.t, w.codecs, row)}})
	return row
}

// upload sends an Up in the register's main lane.
func (w *wishShop) upload(replica uuid.UUID, up *syncpb.Up) {
	w.t.Helper()
	w.seq[replica]++
	if err := w.s.Endpoint().Receive(w.ctx, replica, "main", shoptest.Upload(w.t, replica, "main", w.seq[replica], up)); err != nil {
		w.t.Fatal(err)
	}
}

// desire wishes row in a transaction of its own.
func (w *wishShop) desire(row shoptest.Setting, note string) server.Wished {
	w.t.Helper()
	tx, err := w.s.Begin(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	defer tx.Rollback(w.ctx) //nolint:errcheck // after Commit, a no-op
	wished, err := server.Desire(w.ctx, w.s, tx, row, note)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := tx.Commit(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	return wished
}

// answer sends a register's answer to a wish.
func (w *wishShop) answer(replica uuid.UUID, wished server.Wished, state syncpb.WishState, reason string) {
	w.t.Helper()
	w.upload(replica, &syncpb.Up{Answers: []*syncpb.Answer{{Table: wished.Table, Key: []byte(wished.Key),
		Wish: wished.Number, State: state, Reason: reason, AnsweredAt: time.Now().UnixMicro()}}})
}

func (w *wishShop) wishOf(row shoptest.Setting) server.Wish[shoptest.Setting] {
	w.t.Helper()
	key := w.key(row)
	ws, err := server.WishesOf[shoptest.Setting](w.ctx, w.s, w.pool, []magicsync.Key{key})
	if err != nil {
		w.t.Fatal(err)
	}
	if len(ws) != 1 {
		w.t.Fatalf("WishesOf found %d wishes of %v, want 1", len(ws), key)
	}
	return ws[0]
}

func (w *wishShop) key(row shoptest.Setting) magicsync.Key {
	w.t.Helper()
	tc, err := codec.TableOf[shoptest.Setting](w.codecs)
	if err != nil {
		w.t.Fatal(err)
	}
	k, err := tc.KeyOf(row)
	if err != nil {
		w.t.Fatal(err)
	}
	return magicsync.Key(k)
}

// A wish is written in the host's transaction, and the next pass sends it
// to the register that owns the setting, and to no other: its desired
// columns and the values wanted, the version it is based on (IfUnchanged)
// and the host's note.
func TestAWishGoesToTheReplicaThatOwnsTheSetting(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r1, r2 := w.register(), w.register()
	seen := w.setting(r1, "footer", "Thank you", time.Now().Add(-time.Hour))
	wanted := seen
	wanted.Value = "Merci"
	wished := w.desire(wanted, "ann at the office")
	if wished.Replica != r1 || wished.Table != "settings" || wished.Number == 0 {
		t.Fatalf("Desire returned %+v", wished)
	}
	w.pass()
	if got := wishesIn(w.drain(r2)); len(got) != 0 {
		t.Errorf("register 2 was sent %d wishes of register 1's setting", len(got))
	}
	got := wishesIn(w.drain(r1))
	if len(got) != 1 {
		t.Fatalf("register 1 was sent %d wishes, want 1", len(got))
	}
	g := got[0]
	want, _ := codec.DecodeTuple(g.Wanted, nil)
	based, _ := codec.DecodeTuple(g.BasedOn, nil)
	if g.Table != "settings" || string(g.Key) != string(wished.Key) || g.Wish != wished.Number ||
		len(g.Columns) != 1 || g.Columns[0] != "value" || len(want) != 1 || want[0].S != "Merci" ||
		len(based) != 1 || based[0].I != seen.ChangedAt.UnixMicro() || g.Note != "ann at the office" || g.WishedAt == 0 || g.Withdrawn {
		t.Errorf("the wish sent: %v", g)
	}
	if st := w.wishOf(wanted); st.State != server.WishPending || st.Wanted.Value != "Merci" || st.Note != "ann at the office" {
		t.Errorf("WishesOf: %+v", st)
	}
}

// A wish rolled back with the host's transaction was never made.
func TestADesireRolledBackWithTheHostsTransactionIsNoWish(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := w.setting(r, "footer", "Thank you", time.Now())
	tx, err := w.s.Begin(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	row.Value = "Merci"
	if _, err := server.Desire(w.ctx, w.s, tx, row, ""); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(w.ctx); err != nil {
		t.Fatal(err)
	}
	w.pass()
	if got := wishesIn(w.drain(r)); len(got) != 0 {
		t.Errorf("a wish rolled back was sent: %v", got)
	}
	ws, err := server.WishesOf[shoptest.Setting](w.ctx, w.s, w.pool, []magicsync.Key{w.key(row)})
	if err != nil || len(ws) != 0 {
		t.Errorf("WishesOf after a rollback: %v, %v", ws, err)
	}
}

// The register's answer is filed and shown: its state, its reason and
// when it was given.
func TestAnAnswerIsFiledAndShownWithItsReason(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := w.setting(r, "footer", "Thank you", time.Now())
	row.Value = "the printer's new footer"
	wished := w.desire(row, "")
	w.pass()
	w.drain(r)
	w.answer(r, wished, syncpb.WishState_WISH_STATE_WAITING, "the printer is off")
	if st := w.wishOf(row); st.State != server.WishWaiting || st.Reason != "the printer is off" || st.AnsweredAt.IsZero() {
		t.Errorf("after a Later: %+v", st)
	}
	w.answer(r, wished, syncpb.WishState_WISH_STATE_APPLIED, "")
	if st := w.wishOf(row); st.State != server.WishApplied || st.Reason != "" {
		t.Errorf("after Applied: %+v", st)
	}
	// Another register's answer to it is not taken.
	other := w.register()
	w.answer(other, wished, syncpb.WishState_WISH_STATE_REFUSED, "not mine")
	if st := w.wishOf(row); st.State != server.WishApplied {
		t.Errorf("another register's answer was taken: %+v", st)
	}
}

// Wishing the row again replaces its wish, which is carried out again;
// an answer to the older wish never overwrites the newer one.
func TestAnAnswerToAnOlderWishNeverOverwritesANewerOne(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := w.setting(r, "footer", "Thank you", time.Now())
	row.Value = "first"
	first := w.desire(row, "")
	row.Value = "second"
	second := w.desire(row, "")
	if second.Number <= first.Number {
		t.Fatalf("the second wish is numbered %d, the first %d", second.Number, first.Number)
	}
	w.pass()
	got := wishesIn(w.drain(r))
	if len(got) != 1 || got[0].Wish != second.Number {
		t.Fatalf("sent %v, want the second wish alone", got)
	}
	w.answer(r, first, syncpb.WishState_WISH_STATE_REFUSED, "too late")
	if st := w.wishOf(row); st.State != server.WishPending || st.Number != second.Number || st.Wanted.Value != "second" {
		t.Errorf("an answer to the older wish changed the newer: %+v", st)
	}
	if list, err := w.s.Wishes(w.ctx, server.WishScope{Replica: r}); err != nil || list.Counts[server.WishRefused] != 0 || list.Counts[server.WishPending] != 1 {
		t.Errorf("after an answer to the older wish, Wishes counts %v (%v); want the newer pending", list.Counts, err)
	}
	// The same values wished again are a new wish, carried out again.
	w.answer(r, second, syncpb.WishState_WISH_STATE_APPLIED, "")
	third := w.desire(row, "")
	w.pass()
	if got := wishesIn(w.drain(r)); len(got) != 1 || got[0].Wish != third.Number {
		t.Errorf("the same values wished again were sent as %v", got)
	}
	if st := w.wishOf(row); st.State != server.WishPending {
		t.Errorf("a new wish shows the older's answer: %+v", st)
	}
}

// Withdrawing a wish takes it back: the register is told, and the
// server's lists show it withdrawn.
func TestAWithdrawnWishIsTakenBack(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := w.setting(r, "footer", "Thank you", time.Now())
	row.Value = "Merci"
	w.desire(row, "")
	w.pass()
	w.drain(r)
	tx, err := w.s.Begin(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Withdraw[shoptest.Setting](w.ctx, w.s, tx, w.key(row)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(w.ctx); err != nil {
		t.Fatal(err)
	}
	w.pass()
	got := wishesIn(w.drain(r))
	if len(got) != 1 || !got[0].Withdrawn || string(got[0].Key) != string(w.key(row)) || got[0].Table != "settings" {
		t.Fatalf("after Withdraw the register was sent %v, want the wish withdrawn", got)
	}
	list, err := w.s.Wishes(w.ctx, server.WishScope{Replica: r})
	if err != nil || len(list.Wishes) != 1 || list.Wishes[0].State != server.WishWithdrawn || list.Counts[server.WishWithdrawn] != 1 {
		t.Errorf("Wishes after Withdraw: %+v, %v", list, err)
	}
}

// Wishes lists a scope's wishes, those needing attention first, and
// counts them by state.
func TestWishesListsThoseNeedingAttentionFirst(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r1, r2 := w.register(), w.register()
	states := map[string]syncpb.WishState{
		"a": syncpb.WishState_WISH_STATE_APPLIED, "b": syncpb.WishState_WISH_STATE_REFUSED,
		"c": syncpb.WishState_WISH_STATE_WAITING, "d": 0, "e": syncpb.WishState_WISH_STATE_SUPERSEDED,
	}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		row := w.setting(r1, name, "old", time.Now())
		row.Value = "new"
		wished := w.desire(row, "")
		if st := states[name]; st != 0 {
			w.answer(r1, wished, st, "because "+name)
		}
	}
	other := w.setting(r2, "z", "old", time.Now())
	other.Value = "new"
	w.desire(other, "")

	list, err := w.s.Wishes(w.ctx, server.WishScope{Replica: r1})
	if err != nil {
		t.Fatal(err)
	}
	var order []server.WishState
	for _, ws := range list.Wishes {
		order = append(order, ws.State)
		if ws.Replica != r1 || ws.Wanted["value"] != "new" {
			t.Errorf("listed %+v", ws)
		}
	}
	want := []server.WishState{server.WishRefused, server.WishWaiting, server.WishSuperseded, server.WishPending, server.WishApplied}
	if len(order) != len(want) {
		t.Fatalf("listed %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("listed %v, want %v", order, want)
		}
	}
	for _, s := range want {
		if list.Counts[s] != 1 {
			t.Errorf("counts %v, want one of each", list.Counts)
		}
	}
	// Status counts each replica's wishes, and shows no table of the
	// engine's among the replica's tables.
	w.pass()
	w.drain(r1)
	all, err := w.s.Status(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range all {
		want := map[uuid.UUID]map[server.WishState]int{
			r1: {server.WishRefused: 1, server.WishWaiting: 1, server.WishSuperseded: 1, server.WishPending: 1, server.WishApplied: 1},
			r2: {server.WishPending: 1},
		}[st.ID]
		if len(st.Wishes) != len(want) {
			t.Errorf("Status counts %v wishes of %v, want %v", st.Wishes, st.ID, want)
		}
		for k, n := range want {
			if st.Wishes[k] != n {
				t.Errorf("Status counts %v wishes of %v, want %v", st.Wishes, st.ID, want)
			}
		}
		for _, tbl := range st.Tables {
			if tbl.Table == "sync_wishes" {
				t.Errorf("Status shows the engine's table of wishes among %v's tables: %+v", st.ID, st.Tables)
			}
		}
	}
	fleet, err := w.s.Wishes(w.ctx, server.WishScope{})
	if err != nil || len(fleet.Wishes) != 6 || fleet.Counts[server.WishPending] != 2 {
		t.Errorf("the fleet's wishes: %d listed, counts %v, %v", len(fleet.Wishes), fleet.Counts, err)
	}
}

// A register provisioned again is sent its wishes with the rest, and the
// end of its provisioning names the wishes whose answers the server
// records, so that it sends the others again.
func TestAProvisioningCarriesTheWishesAndNamesTheAnswersRecorded(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	answered := w.setting(r, "footer", "Thank you", time.Now())
	answered.Value = "Merci"
	a := w.desire(answered, "")
	pending := w.setting(r, "brightness", "5", time.Now())
	pending.Value = "7"
	p := w.desire(pending, "")
	w.pass()
	w.drain(r)
	w.answer(r, a, syncpb.WishState_WISH_STATE_APPLIED, "")

	w.exec(`UPDATE sync_replicas SET provision_needed = true, provision_reason = 'test' WHERE id = $1`, r)
	msgs := w.drain(r)
	got := map[uint64]bool{}
	for _, m := range msgs {
		for _, ws := range m.GetDown().GetWishes() {
			if ws.Withdrawn {
				t.Errorf("a provisioning sent a withdrawn wish: %v", ws)
			}
			if m.GetDown().GetSnapshot() == 0 {
				t.Errorf("wish %d came in a message that is no part of a provisioning", ws.Wish)
			}
			got[ws.Wish] = true
		}
	}
	if !got[a.Number] || !got[p.Number] || len(got) != 2 {
		t.Errorf("the provisioning carried wishes %v, want %d and %d", got, a.Number, p.Number)
	}
	end := msgs[len(msgs)-1].GetEndSnapshot()
	if end == nil {
		t.Fatalf("the provisioning did not end: last message %v", msgs[len(msgs)-1])
	}
	if len(end.Answers) != 1 || end.Answers[0].Wish != a.Number || end.Answers[0].Table != "settings" {
		t.Errorf("EndSnapshot names answers %v, want the footer's alone", end.Answers)
	}
	for _, tbl := range end.Tables {
		if tbl == "sync_wishes" {
			t.Errorf("EndSnapshot lists the engine's table of wishes among the tables to replace: %v", end.Tables)
		}
	}
}

// Only a declared setting can be wished other values: Desire of another
// row type says so.
func TestDesireOfARowThatIsNoSettingIsRefused(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	tx, err := w.s.Begin(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(w.ctx) //nolint:errcheck // a test's
	_, err = server.Desire(w.ctx, w.s, tx, shoptest.Currency{Code: "EUR", Rate: 1}, "")
	if !errors.Is(err, server.ErrNotASetting) {
		t.Errorf("Desire of a catalog row: %v, want ErrNotASetting", err)
	}
}

// provisionReason reads why a register is to be provisioned; "" if not.
func (w *wishShop) provisionReason(replica uuid.UUID) string {
	w.t.Helper()
	var reason *string
	if err := w.pool.QueryRow(w.ctx, `SELECT CASE WHEN provision_needed THEN coalesce(provision_reason, '?') END FROM sync_replicas WHERE id = $1`, replica).Scan(&reason); err != nil {
		w.t.Fatal(err)
	}
	if reason == nil {
		return ""
	}
	return *reason
}

// settingsDigest is the digest a register sends of the settings it holds.
func (w *wishShop) settingsDigest(rows ...shoptest.Setting) *syncpb.Digest {
	w.t.Helper()
	tc, err := codec.TableOf[shoptest.Setting](w.codecs)
	if err != nil {
		w.t.Fatal(err)
	}
	all := []int{0, 1, 2, 3}
	var sum digest.Sum
	for _, r := range rows {
		vals, err := tc.Values(r, nil)
		if err != nil {
			w.t.Fatal(err)
		}
		sum.Add(tc.EncodeRow(nil, vals, all))
	}
	return &syncpb.Digest{Table: "settings", Sum: sum.Bytes(), Rows: sum.Rows()}
}

// Digests cover settings: a register's digest of its settings that
// disagrees with what the server records of them (the server restored
// from an older copy, say) has it provisioned again; one that agrees
// changes nothing.
func TestASettingsDigestThatDisagreesProvisionsAgain(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	footer := w.setting(r, "footer", "Thank you", time.Now())
	w.drain(r)
	w.upload(r, &syncpb.Up{LastApplied: w.applied[r], Digests: []*syncpb.Digest{w.settingsDigest(footer)}})
	if why := w.provisionReason(r); why != "" {
		t.Fatalf("a digest that agrees provisioned the register: %s", why)
	}
	held := footer
	held.Value = "Merci"
	w.upload(r, &syncpb.Up{LastApplied: w.applied[r], Digests: []*syncpb.Digest{w.settingsDigest(held)}})
	if why := w.provisionReason(r); why == "" || !strings.Contains(why, "digest of settings disagrees") {
		t.Fatalf("a digest of settings that disagrees: provisioning reason %q", why)
	}
}

// Digests cover answers: a register's digest of the answers it holds
// that disagrees with the answers the server records has it provisioned
// again; one that agrees changes nothing.
func TestAnAnswersDigestThatDisagreesProvisionsAgain(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := w.setting(r, "footer", "Thank you", time.Now())
	row.Value = "Merci"
	wished := w.desire(row, "")
	w.pass()
	w.drain(r)
	w.answer(r, wished, syncpb.WishState_WISH_STATE_APPLIED, "")
	w.drain(r)
	answers := func(state syncpb.WishState) *syncpb.Digest {
		var sum digest.Sum
		sum.Add(codec.AnswerTuple("settings", []byte(wished.Key), wished.Number, int(state)))
		return &syncpb.Digest{Table: "sync_wishes", Sum: sum.Bytes(), Rows: sum.Rows(), AsOf: w.applied[r]}
	}
	w.upload(r, &syncpb.Up{LastApplied: w.applied[r], Digests: []*syncpb.Digest{answers(syncpb.WishState_WISH_STATE_APPLIED)}})
	if why := w.provisionReason(r); why != "" {
		t.Fatalf("a digest of answers that agrees provisioned the register: %s", why)
	}
	w.upload(r, &syncpb.Up{LastApplied: w.applied[r], Digests: []*syncpb.Digest{answers(syncpb.WishState_WISH_STATE_REFUSED)}})
	if why := w.provisionReason(r); !strings.Contains(why, "digest of answers disagrees") {
		t.Fatalf("a digest of answers that disagrees: provisioning reason %q", why)
	}
}

// Wishes narrows to a group: the wishes of the registers of one shop.
func TestWishesOfAGroupAreThoseOfItsReplicas(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	other := uuid.New()
	w.exec(`INSERT INTO shop.shops VALUES ($1, 'B')`, other)
	inA := w.register()
	inB := uuid.New()
	w.exec(`INSERT INTO shop.registers VALUES ($1, $2)`, inB, other)
	w.pass()
	w.drain(inB)
	for _, r := range []uuid.UUID{inA, inB} {
		row := w.setting(r, "footer", "old", time.Now())
		row.Value = "new"
		w.desire(row, "")
	}
	list, err := w.s.Wishes(w.ctx, server.WishScope{Group: w.shop.String()})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Wishes) != 1 || list.Wishes[0].Replica != inA || list.Counts[server.WishPending] != 1 {
		t.Errorf("the wishes of shop A's group: %+v", list)
	}
}

// One upload's digests are all compared: a settings digest that agrees
// does not keep the answers' digest from being compared.
func TestEveryDigestOfAnUploadIsCompared(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := w.setting(r, "footer", "Thank you", time.Now())
	footer := row
	row.Value = "Merci"
	wished := w.desire(row, "")
	w.pass()
	w.drain(r)
	w.answer(r, wished, syncpb.WishState_WISH_STATE_REFUSED, "no")
	w.drain(r)
	var wrong digest.Sum
	wrong.Add(codec.AnswerTuple("settings", []byte(wished.Key), wished.Number, int(syncpb.WishState_WISH_STATE_APPLIED)))
	w.upload(r, &syncpb.Up{LastApplied: w.applied[r], Digests: []*syncpb.Digest{
		w.settingsDigest(footer),
		{Table: "sync_wishes", Sum: wrong.Bytes(), Rows: wrong.Rows(), AsOf: w.applied[r]},
	}})
	if why := w.provisionReason(r); !strings.Contains(why, "digest of answers disagrees") {
		t.Fatalf("after an agreeing settings digest, a disagreeing answers digest: provisioning reason %q", why)
	}
}

// Answers to the same wish filed out of order (an upload given up on
// arriving after the next): the later answer stands. A replica saying a
// wish is pending changes nothing.
func TestAnOlderAnswerToTheSameWishArrivingLateChangesNothing(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := w.setting(r, "footer", "Thank you", time.Now())
	row.Value = "Merci"
	wished := w.desire(row, "")
	w.pass()
	w.drain(r)
	now := time.Now()
	answer := func(state syncpb.WishState, at time.Time) *syncpb.Up {
		return &syncpb.Up{Answers: []*syncpb.Answer{{Table: wished.Table, Key: []byte(wished.Key), Wish: wished.Number,
			State: state, Reason: state.String(), AnsweredAt: at.UnixMicro()}}}
	}
	w.upload(r, answer(syncpb.WishState_WISH_STATE_APPLIED, now))
	w.upload(r, answer(syncpb.WishState_WISH_STATE_WAITING, now.Add(-time.Second)))
	w.upload(r, answer(syncpb.WishState_WISH_STATE_PENDING, now.Add(time.Second)))
	if st := w.wishOf(row); st.State != server.WishApplied {
		t.Errorf("after a late, older answer and a pending one: %+v; want applied", st)
	}
}

// Settings lists what every replica filed of a setting table, its desired
// values by column, for a page to show beside the values wished; a table
// that is no setting is refused.
func TestSettingsListsWhatEveryReplicaFiled(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r1, r2 := w.register(), w.register()
	w.setting(r1, "footer", "Thank you", time.Now())
	w.setting(r2, "footer", "Merci", time.Now())
	w.setting(r2, "volume", "7", time.Now())
	rows, err := w.s.Settings(w.ctx, "settings")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, row := range rows {
		name, _ := row.Values["value"].(string)
		got[row.Replica.String()+" "+name] = true
	}
	for _, want := range []string{r1.String() + " Thank you", r2.String() + " Merci", r2.String() + " 7"} {
		if !got[want] {
			t.Errorf("Settings lists %v; want %q among them", got, want)
		}
	}
	if len(rows) != 3 {
		t.Errorf("%d rows; want 3", len(rows))
	}
	if _, err := w.s.Settings(w.ctx, "products"); err == nil || !strings.Contains(err.Error(), "no setting table") {
		t.Errorf("Settings of a catalog: %v", err)
	}
}

// A register provisioned again sends its answers again, and the server
// takes them whatever their time: they are what the register holds now.
// An answer sent again that is older in time than the one recorded (the
// register's clock stepped back between a Waiting and its final answer)
// is filed all the same; a late answer that is not sent again still
// changes nothing.
func TestAnAnswerSentAgainAfterAProvisioningIsTakenWhateverItsTime(t *testing.T) {
	t.Parallel()
	w := newWishShop(t)
	r := w.register()
	row := w.setting(r, "footer", "Thank you", time.Now())
	row.Value = "Merci"
	wished := w.desire(row, "")
	w.pass()
	w.drain(r)
	now := time.Now()
	answer := func(state syncpb.WishState, at time.Time, resent bool) *syncpb.Up {
		return &syncpb.Up{Resent: resent, Answers: []*syncpb.Answer{{Table: wished.Table, Key: []byte(wished.Key), Wish: wished.Number,
			State: state, Reason: state.String(), AnsweredAt: at.UnixMicro()}}}
	}
	w.upload(r, answer(syncpb.WishState_WISH_STATE_WAITING, now, false))
	w.upload(r, answer(syncpb.WishState_WISH_STATE_APPLIED, now.Add(-time.Hour), true))
	if st := w.wishOf(row); st.State != server.WishApplied {
		t.Fatalf("an answer sent again after a provisioning, older in time: %v %q; want applied", st.State, st.Reason)
	}
	w.upload(r, answer(syncpb.WishState_WISH_STATE_WAITING, now.Add(-2*time.Hour), false))
	if st := w.wishOf(row); st.State != server.WishApplied {
		t.Errorf("a late answer, not sent again, older in time: %v; want applied", st.State)
	}
}
