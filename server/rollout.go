package server

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/wire"
)

// rollout.go holds rollouts: one wish of many replicas' setting rows (Roll),
// wished in stages and stopped when too many refuse (AdvanceRollouts, which
// Run calls), and their counts (RolloutStatus, Rollouts).

// RolloutScope names the replicas a rollout wishes: set exactly one field.
type RolloutScope struct {
	// Group is a group's value (as text, e.g. a shop's id): the replicas a
	// Grouped route's members table puts in that group, as WishScope.Group
	// names them. A replica is in the group once the planner placed it
	// there (its provisioning began since it joined).
	Group string
	// All is every replica the server knows.
	All bool
	// Replicas lists replicas by id; with FirstStage, the first stage is
	// the first of them, in this order.
	Replicas []uuid.UUID
}

// RolloutOptions tunes a rollout; the zero value wishes every replica of
// the scope at once and never aborts.
type RolloutOptions struct {
	// Note is the host's (who asked, or why), written on every wish. It is
	// kept made safe, as Desire's note is (MaxNoteBytes).
	Note string
	// FirstStage, when above zero, wishes only that many replicas in
	// Roll's transaction (the first of Replicas, or of the scope in id
	// order); the rest are wished once every wish of the first stage has
	// been answered for good (applied, refused or superseded) and the
	// rollout was not aborted.
	FirstStage int
	// AbortAbovePercent, when above zero, aborts the rollout once more
	// than this percentage of the replicas that answered for good
	// (applied, refused or superseded) refused: see AbortRollout for
	// what aborting does.
	AbortAbovePercent float64
	// AbortAfter is how many replicas must have answered for good before
	// AbortAbovePercent is judged (0: from the first answer, when one
	// refusal is 100 %).
	AbortAfter int
	// By names columns of the setting whose values, as Roll's row holds
	// them, find each replica's row among the rows it filed — a setting
	// keyed by an id of each replica's own is found by its name column.
	// Empty, the row's key columns but the origin name it. A replica that
	// has filed no such row, or several, is not wished (Unmatched) until
	// it files exactly one: AdvanceRollouts looks again.
	By []string
	// Deadline, when not zero, is the time by which each replica must
	// have carried the rollout's wish out (see DesireOptions.Deadline);
	// a replica of a later stage wished after it has its wish expire at
	// once. A command rollout's commands take RollCommand's request's
	// deadline instead.
	Deadline time.Time
	// StartAt, when after now, schedules the rollout: Roll records it and
	// wishes nothing; Run wishes its first stage once StartAt has come
	// (AdvanceRollouts), as it would have in Roll's transaction.
	StartAt time.Time
	// Window holds each of the rollout's wishes to a window of its
	// replica's local day (see DesireOptions.Window): the shop's quiet
	// hours. A command rollout takes no window.
	Window DayWindow
}

// RolloutState is where a rollout stands.
type RolloutState string

// The states of a rollout.
const (
	// RolloutRunning: replicas remain to be wished, or its wishes to be
	// answered for good.
	RolloutRunning RolloutState = "running"
	// RolloutDone: every replica in scope was wished and every wish
	// answered for good (or replaced by a newer wish of its row).
	RolloutDone RolloutState = "done"
	// RolloutAborted: stopped by its threshold or by AbortRollout; Reason
	// says why.
	RolloutAborted RolloutState = "aborted"
)

// Rollout is a rollout Roll made.
type Rollout struct {
	// ID names it to RolloutStatus and AbortRollout.
	ID    int64
	Table string
	// Replicas is how many replicas the scope held; Wished how many of
	// them Roll wished (the first stage).
	Replicas int
	Wished   int
}

// RolloutStatus is a rollout with its counts, read in one query.
type RolloutStatus struct {
	ID    int64
	Table string
	// Wanted is the wanted values of the desired columns, by column.
	Wanted map[string]any
	// Scope and Options are as Roll was given them, except that Scope
	// does not list the replicas of a rollout to a list of replicas.
	Scope   RolloutScope
	Options RolloutOptions
	State   RolloutState
	// Reason says why it was aborted.
	Reason string
	// Replicas is how many replicas are in scope; Wished how many of them
	// were wished so far (Replicas - Wished wait for a later stage, or
	// never will after an abort). Unmatched counts, of a rollout By
	// columns, the replicas not wished because the server holds no row of
	// theirs with those values, or several: the rollout stays running
	// while there are some (AbortRollout ends it).
	Replicas  int
	Wished    int
	Unmatched int
	// Counts counts the rollout's wishes still held, by state.
	Counts map[WishState]int
	// Withdrawn counts its wishes no longer held as it made them: taken
	// back (by an abort, or Withdraw) or replaced by a newer wish of the
	// row (Desire, another rollout).
	Withdrawn int
	// Refusal is the most frequent reason of its refusals ("" if none).
	Refusal   string
	CreatedAt time.Time
	EndedAt   time.Time
	// Scheduled is true while its StartAt has not come: nothing of it is
	// wished yet.
	Scheduled bool
	// firstOpen counts the first stage's wishes not answered for good.
	firstOpen int
}

// ErrRolloutNotFound is wrapped by the errors of RolloutStatus and
// AbortRollout for an id that names no rollout.
var ErrRolloutNotFound = errors.New("magicsync/server: no such rollout")

// maxRolloutsListed bounds the rollouts one call of Rollouts lists.
const maxRolloutsListed = 100

// Roll wishes a setting row's desired columns the values row holds on
// every replica of scope, in the host's transaction tx, as Desire would
// wish each replica's row: row's origin column is ignored (each replica's
// row has the replica's id there), its other key columns name the row —
// or, with opts.By, the columns it names, whose values find each
// replica's row among those it filed — and its desired columns hold the
// values wanted. With
// opts.FirstStage, only the first stage is wished here; Run wishes the
// rest (see AdvanceRollouts). Rolled back with tx, no rollout and no wish
// was made.
//
// An IfUnchanged setting's wish of a replica is based on the version the
// replica last filed of its row; of a replica that never filed the row, on
// no version: once it holds the row, it carries the wish out whatever the
// row's version (the server saw no version to base the wish on).
//
// The scope is read in tx, when Roll is called: replicas joining the group
// later are not wished. A scope of no replica is an error.
func Roll[T any](ctx context.Context, s *Server, tx pgx.Tx, row T, scope RolloutScope, opts RolloutOptions) (Rollout, error) {
	tc, err := s.setting(reflect.TypeFor[T](), row)
	if err != nil {
		return Rollout{}, err
	}
	vals, err := tc.Values(row, nil)
	if err != nil {
		return Rollout{}, fmt.Errorf("magicsync/server: roll: %w", err)
	}
	return s.roll(ctx, tx, tc, vals, scope, opts)
}

// roll is Roll of a setting row's canonical values, whichever way they
// were given.
func (s *Server) roll(ctx context.Context, tx pgx.Tx, tc *codec.TableCodec, vals []codec.Value, scope RolloutScope, opts RolloutOptions) (Rollout, error) {
	if err := opts.check(); err != nil {
		return Rollout{}, err
	}
	// A note PostgreSQL refuses would fail the host's whole transaction.
	opts.Note = safetext.Text(opts.Note, MaxNoteBytes)
	if _, err := byColumns(tc, opts.By); err != nil {
		return Rollout{}, err
	}
	from, to, err := opts.Window.minutes()
	if err != nil {
		return Rollout{}, err
	}
	vals[tc.OriginIndex] = codec.Value{Kind: wire.UUID}
	template := tc.EncodeRow(nil, vals, nil)
	wanted := tc.EncodeRow(nil, vals, tc.DesiredIndex)
	replicas, err := s.rolloutScope(ctx, tx, scope)
	if err != nil {
		return Rollout{}, err
	}
	first := len(replicas)
	if opts.FirstStage > 0 && opts.FirstStage < first {
		first = opts.FirstStage
	}
	stages := make([]int16, len(replicas))
	keys := make([]string, len(replicas))
	for i, r := range replicas {
		stages[i] = 1
		if i >= first {
			stages[i] = 2
		}
		if len(opts.By) > 0 {
			continue // found as the stage is wished (matchRows)
		}
		vals[tc.OriginIndex] = codec.Value{Kind: wire.UUID, U: r}
		keys[i] = hex.EncodeToString([]byte(tc.KeyOfRow(vals)))
	}
	ro := Rollout{Table: tc.Name, Replicas: len(replicas)}
	by := opts.By
	if by == nil {
		by = []string{}
	}
	if err := tx.QueryRow(ctx, s.sql.of(qRolloutInsert), tc.Name, template, wanted, opts.Note, scope.Group, scope.All,
		opts.FirstStage, opts.AbortAbovePercent, opts.AbortAfter, by, deadlineArg(opts.Deadline),
		deadlineArg(opts.StartAt), from, to).Scan(&ro.ID); err != nil {
		return Rollout{}, fmt.Errorf("magicsync/server: roll: %w", err)
	}
	if _, err := tx.Exec(ctx, s.sql.of(qRolloutReplicas), ro.ID, replicas, stages, keys); err != nil {
		return Rollout{}, fmt.Errorf("magicsync/server: roll: %w", err)
	}
	if opts.StartAt.After(time.Now()) {
		return ro, nil // scheduled: Run wishes its first stage when it comes
	}
	if ro.Wished, err = s.wishStage(ctx, tx, ro.ID, tc, template, opts.Note, 1, opts.By); err != nil {
		return Rollout{}, err
	}
	return ro, nil
}

// check refuses options that make no sense.
func (o RolloutOptions) check() error {
	switch {
	case o.FirstStage < 0:
		return fmt.Errorf("magicsync/server: roll: FirstStage %d: give a count of replicas, or 0 to wish them all at once", o.FirstStage)
	case o.AbortAbovePercent < 0 || o.AbortAbovePercent > 100:
		return fmt.Errorf("magicsync/server: roll: AbortAbovePercent %v: give a percentage from 0 (never abort) to 100", o.AbortAbovePercent)
	case o.AbortAfter < 0:
		return fmt.Errorf("magicsync/server: roll: AbortAfter %d: give a count of answers, or 0", o.AbortAfter)
	}
	return nil
}

// rolloutScope reads the replicas of scope in tx: those given, in their
// order, or the group's or all, in id order.
func (s *Server) rolloutScope(ctx context.Context, tx pgx.Tx, scope RolloutScope) ([]uuid.UUID, error) {
	set := 0
	for _, b := range []bool{scope.Group != "", scope.All, len(scope.Replicas) > 0} {
		if b {
			set++
		}
	}
	if set != 1 {
		return nil, fmt.Errorf("magicsync/server: roll: the scope names %d kinds of scope; set exactly one of Group, All and Replicas", set)
	}
	var rows pgx.Rows
	var err error
	switch {
	case scope.All:
		rows, err = tx.Query(ctx, s.sql.of(qRolloutScopeAll))
	case scope.Group != "":
		if len(s.m.members) == 0 {
			return nil, fmt.Errorf("magicsync/server: roll: group %q: no table is routed Grouped, so there are no groups; scope the rollout by Replicas or All", scope.Group)
		}
		groups := make([]string, 0, len(s.m.members))
		for _, m := range s.m.members {
			groups = append(groups, groupGrouped(m, scope.Group))
		}
		rows, err = tx.Query(ctx, s.sql.of(qRolloutScopeGroup), groups)
	default:
		rows, err = tx.Query(ctx, s.sql.of(qRolloutKnown), scope.Replicas)
	}
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: roll: reading the scope: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: roll: reading the scope: %w", err)
	}
	if len(scope.Replicas) > 0 {
		known := make(map[uuid.UUID]bool, len(found))
		for _, id := range found {
			known[id] = true
		}
		found = found[:0]
		seen := map[uuid.UUID]bool{}
		for _, id := range scope.Replicas {
			if !known[id] {
				return nil, fmt.Errorf("magicsync/server: roll: replica %v is not known to the server: is it in Options.Replicas' table, and has a pass run since it was added?", id)
			}
			if !seen[id] {
				seen[id] = true
				found = append(found, id)
			}
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("magicsync/server: roll: the scope %+v holds no replica", scope)
	}
	return found, nil
}

// wishStage wishes the replicas of a rollout's stage not wished yet (and
// those of an earlier stage it found no row of before), in tx, each based
// on the version it last filed of its row (IfUnchanged), and returns how
// many it wished. A rollout by columns (by) first finds each replica's
// row by their values.
func (s *Server) wishStage(ctx context.Context, tx pgx.Tx, id int64, tc *codec.TableCodec, template []byte, note string, stage int, by []string) (int, error) {
	rows, err := tx.Query(ctx, s.sql.of(qRolloutUnwished), id, stage)
	if err != nil {
		return 0, fmt.Errorf("magicsync/server: rollout %d: %w", id, err)
	}
	var replicas []uuid.UUID
	var hexes []string
	var replica uuid.UUID
	var keyHex string
	if _, err := pgx.ForEachRow(rows, []any{&replica, &keyHex}, func() error {
		replicas, hexes = append(replicas, replica), append(hexes, keyHex)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("magicsync/server: rollout %d: %w", id, err)
	}
	if len(replicas) == 0 {
		return 0, nil
	}
	vals, err := codec.DecodeTuple(template, nil)
	if err != nil || len(vals) != len(tc.Columns) {
		return 0, fmt.Errorf("magicsync/server: rollout %d: its row holds %d values for the %d columns of %s (%v): was the setting's declaration changed since?", id, len(vals), len(tc.Columns), tc.Name, err)
	}
	if len(by) > 0 {
		if replicas, hexes, err = s.matchRows(ctx, tx, id, tc, by, vals, replicas); err != nil {
			return 0, err
		}
		if len(replicas) == 0 {
			return 0, nil
		}
	}
	wanted := tc.EncodeRow(nil, vals, tc.DesiredIndex)
	basedOn := make([][]byte, len(replicas))
	if tc.Apply == codec.IfUnchanged && tc.VersionIndex >= 0 {
		keys := make([]magicsync.Key, len(hexes))
		for i, h := range hexes {
			k, err := hex.DecodeString(h)
			if err != nil {
				return 0, fmt.Errorf("magicsync/server: rollout %d: the key %q: %w", id, h, err)
			}
			keys[i] = magicsync.Key(k)
		}
		held, err := s.settingRows(ctx, tx, tc, keys)
		if err != nil {
			return 0, fmt.Errorf("magicsync/server: rollout %d: reading the rows filed: %w", id, err)
		}
		for i, k := range keys {
			if h := held[string(k)]; h != nil {
				basedOn[i] = tc.EncodeRow(nil, h, []int{tc.VersionIndex})
			}
		}
	}
	tag, err := tx.Exec(ctx, s.sql.of(qRolloutWish), id, tc.Name, hexes, replicas, basedOn, wanted, note)
	if err != nil {
		return 0, fmt.Errorf("magicsync/server: rollout %d: wishing stage %d: %w", id, stage, err)
	}
	return int(tag.RowsAffected()), nil
}

// RolloutStatus reads a rollout with its counts, in one query.
func (s *Server) RolloutStatus(ctx context.Context, id int64) (RolloutStatus, error) {
	got, err := s.readRollouts(ctx, s.pool, &id, 1)
	if err != nil {
		return RolloutStatus{}, err
	}
	if len(got) == 0 {
		return RolloutStatus{}, fmt.Errorf("%w: %d", ErrRolloutNotFound, id)
	}
	return got[0], nil
}

// Rollouts lists the newest rollouts (at most 100), newest first, each
// with its counts, in one query.
func (s *Server) Rollouts(ctx context.Context) ([]RolloutStatus, error) {
	return s.readRollouts(ctx, s.pool, nil, maxRolloutsListed)
}

// readRollouts runs qRolloutStatus through q: rollout id, or the newest
// limit when id is nil.
func (s *Server) readRollouts(ctx context.Context, q Querier, id *int64, limit int) ([]RolloutStatus, error) {
	rows, err := q.Query(ctx, s.sql.of(qRolloutStatus), id, limit)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: rollouts: %w", err)
	}
	var out []RolloutStatus
	for rows.Next() {
		var st RolloutStatus
		var wanted []byte
		var state string
		var endedAt, deadline, startAt *time.Time
		var pending, waiting, applied, refused, superseded, firstOpen, expired int
		var windowFrom, windowTo int16
		if err := rows.Scan(&st.ID, &st.Table, &wanted, &st.Options.Note, &st.Scope.Group, &st.Scope.All,
			&st.Options.FirstStage, &st.Options.AbortAbovePercent, &st.Options.AbortAfter, &st.Options.By, &state, &st.Reason,
			&st.CreatedAt, &endedAt, &st.Replicas, &st.Wished, &st.Unmatched, &st.Withdrawn,
			&pending, &waiting, &applied, &refused, &superseded, &firstOpen, &st.Refusal, &expired, &deadline,
			&startAt, &windowFrom, &windowTo, &st.Scheduled); err != nil {
			rows.Close()
			return nil, fmt.Errorf("magicsync/server: rollouts: %w", err)
		}
		st.State = RolloutState(state)
		if len(st.Options.By) == 0 {
			st.Options.By = nil
		}
		if endedAt != nil {
			st.EndedAt = *endedAt
		}
		st.Wanted = s.wantedByColumn(st.Table, wanted)
		st.Counts = map[WishState]int{WishPending: pending, WishWaiting: waiting, WishApplied: applied,
			WishRefused: refused, WishSuperseded: superseded, WishExpired: expired}
		st.Options.Deadline, st.Options.StartAt = timeOrZero(deadline), timeOrZero(startAt)
		st.Options.Window = DayWindow{From: time.Duration(windowFrom) * time.Minute, To: time.Duration(windowTo) * time.Minute}
		st.firstOpen = firstOpen
		out = append(out, st)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("magicsync/server: rollouts: %w", err)
	}
	return out, nil
}

// AbortRollout stops a running rollout: it wishes no further replica, and
// takes back those of its wishes the replicas have not carried out yet
// (pending or waiting; the replicas are told, as by Withdraw). What was
// applied stays applied, and the answers given stay shown. reason (who,
// or why) is shown as the rollout's Reason. A rollout that ended already
// is an error.
func (s *Server) AbortRollout(ctx context.Context, id int64, reason string) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("magicsync/server: aborting rollout %d: %w", id, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var state, tbl string
	var template []byte
	if err := tx.QueryRow(ctx, s.sql.of(qRolloutLock), id).Scan(&state, &tbl, &template); errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %d", ErrRolloutNotFound, id)
	} else if err != nil {
		return fmt.Errorf("magicsync/server: aborting rollout %d: %w", id, err)
	}
	if RolloutState(state) != RolloutRunning {
		return fmt.Errorf("magicsync/server: aborting rollout %d: it is %s already", id, state)
	}
	if err := s.endRollout(ctx, tx, id, RolloutAborted, "aborted by the host: "+reason); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("magicsync/server: aborting rollout %d: %w", id, err)
	}
	return nil
}

// endRollout records a rollout's end; an abort takes back its wishes not
// carried out yet.
func (s *Server) endRollout(ctx context.Context, tx pgx.Tx, id int64, state RolloutState, reason string) error {
	if _, err := tx.Exec(ctx, s.sql.of(qRolloutEnd), id, string(state), reason); err != nil {
		return fmt.Errorf("magicsync/server: ending rollout %d: %w", id, err)
	}
	if state != RolloutAborted {
		return nil
	}
	if _, err := tx.Exec(ctx, s.sql.of(qRolloutWithdraw), id); err != nil {
		return fmt.Errorf("magicsync/server: rollout %d: taking back its wishes: %w", id, err)
	}
	return nil
}

// advanceRolloutsEvery is Run's service of the rollouts: AdvanceRollouts
// at once, then every PassEvery.
func (s *Server) advanceRolloutsEvery(ctx context.Context) {
	s.every(ctx, s.opts.PassEvery, s.AdvanceRollouts,
		"magicsync/server: advancing the rollouts fails; trying again until it works", "magicsync/server: advancing the rollouts works again")
}

// AdvanceRollouts moves the running rollouts on, each in a transaction of
// its own: it aborts one whose refusals exceed its threshold (naming the
// counts and the most frequent reason), wishes the rest of a staged one
// whose first stage was answered for good, wishes the replicas of a
// rollout By columns that have filed their row since (Unmatched), and
// ends one whose every replica was wished and answered for good. Run
// calls it every PassEvery (a look that reads an index of the running
// rollouts, mostly none, and costs nothing more when none runs); call it
// yourself only where no Run runs. Rollouts another process is advancing
// are skipped.
func (s *Server) AdvanceRollouts(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, s.sql.of(qRolloutsRunning))
	if err != nil {
		return fmt.Errorf("magicsync/server: advancing rollouts: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("magicsync/server: advancing rollouts: %w", err)
	}
	var errs []error
	for _, id := range ids {
		if err := s.advanceRollout(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// advanceRollout is AdvanceRollouts of one rollout.
func (s *Server) advanceRollout(ctx context.Context, id int64) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("magicsync/server: rollout %d: %w", id, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var state, tbl string
	var template []byte
	var by []string
	if err := tx.QueryRow(ctx, s.sql.of(qRolloutTryLock), id).Scan(&state, &tbl, &template, &by); errors.Is(err, pgx.ErrNoRows) {
		return nil // ended, or another process holds it
	} else if err != nil {
		return fmt.Errorf("magicsync/server: rollout %d: %w", id, err)
	}
	got, err := s.readRollouts(ctx, tx, &id, 1)
	if err != nil || len(got) == 0 {
		return err
	}
	st := got[0]
	if st.Scheduled {
		return nil
	}
	refused := st.Counts[WishRefused]
	final := st.Counts[WishApplied] + refused + st.Counts[WishSuperseded]
	switch {
	case st.Options.AbortAbovePercent > 0 && final > 0 && final >= st.Options.AbortAfter &&
		float64(refused)*100 > st.Options.AbortAbovePercent*float64(final):
		why := fmt.Sprintf("%d of the %d replicas that answered refused (%.1f %%, above the %v %% allowed)",
			refused, final, float64(refused)*100/float64(final), st.Options.AbortAbovePercent)
		if st.Refusal != "" {
			why += "; most often: " + st.Refusal
		}
		err = s.endRollout(ctx, tx, id, RolloutAborted, why)
	case st.Wished == 0 && !st.Options.StartAt.IsZero() && st.Unmatched == 0:
		// Its start came: the first stage, as Roll would have wished it.
		t := s.m.byName[tbl]
		if t == nil {
			return fmt.Errorf("magicsync/server: rollout %d: %s is no table this server syncs; abort the rollout, or declare the setting again", id, tbl)
		}
		_, err = s.wishStage(ctx, tx, id, t.tc, template, st.Options.Note, 1, by)
	case len(by) > 0 && st.Unmatched > 0 && st.firstOpen > 0:
		// The first stage's replicas of no row may have filed one since.
		t := s.m.byName[tbl]
		if t == nil {
			return fmt.Errorf("magicsync/server: rollout %d: %s is no table this server syncs; abort the rollout, or declare the setting again", id, tbl)
		}
		_, err = s.wishStage(ctx, tx, id, t.tc, template, st.Options.Note, 1, by)
	case st.Wished < st.Replicas && st.firstOpen == 0:
		t := s.m.byName[tbl]
		if t == nil {
			return fmt.Errorf("magicsync/server: rollout %d: %s is no table this server syncs; abort the rollout, or declare the setting again", id, tbl)
		}
		_, err = s.wishStage(ctx, tx, id, t.tc, template, st.Options.Note, 2, by)
	case st.Wished == st.Replicas && st.Counts[WishPending]+st.Counts[WishWaiting] == 0:
		err = s.endRollout(ctx, tx, id, RolloutDone, "")
	default:
		return nil
	}
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("magicsync/server: rollout %d: %w", id, err)
	}
	return nil
}

// SettingTable names a setting table and the columns a rollout of it
// takes, for a page or a command that rolls values out without the
// setting's Go type (RollValues).
type SettingTable struct {
	Name string
	// Key names the key columns but the origin (the replica's id), which
	// the rollout fills for each replica: e.g. a setting's name.
	Key []string
	// Desired names the columns a wish sets.
	Desired []string
}

// SettingTables lists the setting tables the declarations name, in the
// order declared.
func (s *Server) SettingTables() []SettingTable {
	var out []SettingTable
	for _, t := range s.m.tables {
		if t.tc.Mirror != codec.Setting {
			continue
		}
		st := SettingTable{Name: t.name, Desired: t.tc.ColumnNames(t.tc.DesiredIndex)}
		for _, i := range t.tc.KeyIndex {
			if i != t.tc.OriginIndex {
				st.Key = append(st.Key, t.tc.Columns[i].Name)
			}
		}
		out = append(out, st)
	}
	return out
}

// RollValues is Roll for a caller without the setting's Go type — a
// page's form, a command line — in a transaction of its own: the setting
// table by name (as declared, or qualified by its schema), its key
// columns but the origin (SettingTable.Key) — or, with opts.By, the
// columns By names — and its desired columns, each value given as text
// and read as its column's kind reads text ("42", "true", a UUID, an RFC
// 3339 time). A column missing, unknown or of a value its kind cannot
// read is refused, naming it.
func (s *Server) RollValues(ctx context.Context, table string, key, values map[string]string, scope RolloutScope, opts RolloutOptions) (Rollout, error) {
	t, err := s.settingNamed(table)
	if err != nil {
		return Rollout{}, fmt.Errorf("magicsync/server: roll: %w", err)
	}
	table = t.name
	tc := t.tc
	vals := make([]codec.Value, len(tc.Columns))
	for i, c := range tc.Columns {
		vals[i] = zeroValue(c.Kind)
	}
	given := map[string]bool{}
	set := func(from map[string]string, cols []int, what string) error {
		for _, i := range cols {
			c := &tc.Columns[i]
			text, ok := from[c.Name]
			if !ok {
				return fmt.Errorf("magicsync/server: roll: %s: no value for the %s column %q", table, what, c.Name)
			}
			v, err := c.Canonical(text)
			if err != nil {
				return fmt.Errorf("magicsync/server: roll: %s: %w", table, err)
			}
			vals[i], given[c.Name] = v, true
		}
		return nil
	}
	var keyCols []int
	for _, i := range tc.KeyIndex {
		if i != tc.OriginIndex {
			keyCols = append(keyCols, i)
		}
	}
	if len(opts.By) > 0 {
		if keyCols, err = byColumns(tc, opts.By); err != nil {
			return Rollout{}, err
		}
	}
	if err := set(key, keyCols, "key"); err != nil {
		return Rollout{}, err
	}
	if err := set(values, tc.DesiredIndex, "desired"); err != nil {
		return Rollout{}, err
	}
	for _, m := range []map[string]string{key, values} {
		for name := range m {
			if !given[name] {
				return Rollout{}, fmt.Errorf("magicsync/server: roll: %s has no key or desired column %q (key %v, desired %v)",
					table, name, tc.ColumnNames(keyCols), tc.ColumnNames(tc.DesiredIndex))
			}
		}
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Rollout{}, fmt.Errorf("magicsync/server: roll: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	ro, err := s.roll(ctx, tx, tc, vals, scope, opts)
	if err != nil {
		return Rollout{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Rollout{}, fmt.Errorf("magicsync/server: roll: %w", err)
	}
	return ro, nil
}
