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
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// wishes.go holds the server's half of the device twin: Desire, Withdraw,
// WishesOf and Wishes, the wishes' way down (the planner routes a row of
// sync_wishes to the replica owning the setting, as it routes a catalog
// row assigned to it) and the answers' way up.

// WishState is where a wish stands: magicsync.WishState, whose values
// are documented there.
type WishState = magicsync.WishState

// The states of a wish (magicsync's).
const (
	WishPending    = magicsync.WishPending
	WishWaiting    = magicsync.WishWaiting
	WishApplied    = magicsync.WishApplied
	WishRefused    = magicsync.WishRefused
	WishSuperseded = magicsync.WishSuperseded
	WishWithdrawn  = magicsync.WishWithdrawn
	WishExpired    = magicsync.WishExpired
)

// ErrNotASetting is wrapped by the errors of Desire, Withdraw and WishesOf
// for a row type that is not a declared setting: only settings can be
// wished other values.
var ErrNotASetting = errors.New("magicsync/server: not a setting")

// Wished is a wish Desire wrote.
type Wished struct {
	// Replica is the replica the setting row belongs to, which carries the
	// wish out.
	Replica uuid.UUID
	// Table and Key name the setting row.
	Table string
	Key   magicsync.Key
	// Number numbers the wish: it grows with every new wish of the row.
	Number uint64
}

// wishRow is a row of sync_wishes as it travels down: the wish, never the
// answer. The planner treats the table as a catalog assigned to the
// replica column, so that a wish goes where the setting's replica is, is
// logged, confirmed and provisioned again as catalog rows are.
type wishRow struct {
	Table      string     `db:"tbl"`
	Key        string     `db:"key"`
	Replica    uuid.UUID  `db:"replica"`
	Number     int64      `db:"wish"`
	Wanted     []byte     `db:"wanted"`
	BasedOn    []byte     `db:"based_on"`
	Note       string     `db:"note"`
	WishedAt   time.Time  `db:"wished_at"`
	Deadline   *time.Time `db:"deadline"`
	WindowFrom int16      `db:"window_from"`
	WindowTo   int16      `db:"window_to"`
}

// wishesTableName is the engine's table of wishes, on both sides.
const wishesTableName = "sync_wishes"

// wishesTable returns the planner's view of sync_wishes in the engine's
// schema: a catalog assigned to its replica column.
func wishesTable(engine engineSchema) (*table, error) {
	set, problems := codec.Compile([]any{wishRow{}}, func(any) codec.Table {
		// Declared under another name: the declarations refuse names
		// beginning sync_, which are the engine's, and this one is.
		return codec.Table{Schema: engine.name, Name: "wishes", Mirror: codec.Catalog,
			Key: []string{"tbl", "key"}, Sync: codec.NewRoute(codec.RouteAssigned, "replica", "")}
	})
	if len(problems) > 0 {
		return nil, fmt.Errorf("magicsync/server: the wishes table: %v", problems)
	}
	tc := set.Tables()[0]
	tc.Name = wishesTableName
	t := &table{tc: tc, name: tc.Name, qname: tc.QualifiedName(), catalog: true,
		route: codec.RouteAssigned, routeCol: "replica"}
	for i, c := range tc.Columns {
		t.up = append(t.up, i)
		t.down = append(t.down, i)
		t.downNames = append(t.downNames, c.Name)
	}
	t.shape = tupleShape(tc, t.down)
	return t, nil
}

// setting returns the codec of a declared setting's row type.
func (s *Server) setting(rowType reflect.Type, row any) (*codec.TableCodec, error) {
	tc, err := s.m.codecs.Of(row)
	if err != nil {
		return nil, fmt.Errorf("%w: %v: %w", ErrNotASetting, rowType, err)
	}
	if tc.Mirror != codec.Setting {
		return nil, fmt.Errorf("%w: %v declares the %v %q; declare it Mirror: magicsync.Setting, with desired columns, to wish it other values", ErrNotASetting, rowType, tc.Mirror, tc.Name)
	}
	return tc, nil
}

// MaxNoteBytes bounds the note of a wish or a rollout, in bytes: a
// longer one is kept cut, on a character, and marked "…". A note says
// who asked or why; it goes to the replica with every wish.
const MaxNoteBytes = safetext.MaxReason

// Desire wishes a setting row's desired columns the values row holds, in
// the host's transaction tx: the wish is written beside whatever else tx
// writes, and is sent once tx commits (the next pass routes it to the
// replica that owns the row, named by its Origin column). Pass the row as
// it was seen — its key, its origin, and for an IfUnchanged setting the
// version the wish is based on — with the values wanted in its desired
// columns; its other columns are not sent. note is the host's (who asked,
// or why), shown beside the wish's state and sent with the wish; it is
// kept made safe, as every text from outside the engine: bytes that are
// not UTF-8 and a NUL (which PostgreSQL refuses) become U+FFFD, and a note
// longer than 1 KiB is cut, marked "…" (MaxNoteBytes).
//
// Wishing a row again replaces its wish, which is carried out again (even
// with the same values); an answer to the older wish is then ignored.
// Rolled back with tx, the wish was never made.
func Desire[T any](ctx context.Context, s *Server, tx pgx.Tx, row T, note string) (Wished, error) {
	return DesireWith(ctx, s, tx, row, DesireOptions{Note: note})
}

// DesireOptions tunes a wish DesireWith makes; the zero value is Desire's.
type DesireOptions struct {
	// Note is the host's (who asked, or why), as Desire's note.
	Note string
	// Deadline, when not zero, is the time by which the replica must have
	// carried the wish out: past it, the wish stands expired
	// (WishExpired), and the replica, which is sent the deadline, does
	// not carry it out later. The server finds it expired by its clock
	// (Run looks every PassEvery, ExpireWishes does it at once); the
	// replica by its own.
	Deadline time.Time
	// Window, when set, holds the wish to a window of the replica's local
	// day: outside it, the replica does not carry the wish out, and
	// answers waiting until it is in it.
	Window DayWindow
}

// DayWindow is a window of a replica's local day (the shop's quiet
// hours): From and To are times after the replica's midnight, to the
// minute, From included and To not; a window past midnight has From
// after To (22:00 to 06:00). The zero DayWindow is the whole day.
type DayWindow struct {
	From, To time.Duration
}

// IsZero reports whether the window is the whole day.
func (w DayWindow) IsZero() bool { return w.From == 0 && w.To == 0 }

// minutes is the window in minutes after midnight, for the protocol, or
// an error naming what is wrong with it.
func (w DayWindow) minutes() (from, to int16, err error) {
	if w.IsZero() {
		return 0, 0, nil
	}
	for _, d := range []time.Duration{w.From, w.To} {
		if d < 0 || d >= 24*time.Hour || d%time.Minute != 0 {
			return 0, 0, fmt.Errorf("magicsync/server: a window from %v to %v: give times of the day, to the minute, from 0 to 23h59m", w.From, w.To)
		}
	}
	if w.From == w.To {
		return 0, 0, fmt.Errorf("magicsync/server: a window from %v to %v is empty: leave it zero for the whole day", w.From, w.To)
	}
	return int16(w.From / time.Minute), int16(w.To / time.Minute), nil
}

// DesireWith is Desire with options: a note and a deadline.
func DesireWith[T any](ctx context.Context, s *Server, tx pgx.Tx, row T, opts DesireOptions) (Wished, error) {
	note := opts.Note
	from, to, err := opts.Window.minutes()
	if err != nil {
		return Wished{}, err
	}
	tc, err := s.setting(reflect.TypeFor[T](), row)
	if err != nil {
		return Wished{}, err
	}
	vals, err := tc.Values(row, nil)
	if err != nil {
		return Wished{}, fmt.Errorf("magicsync/server: desire: %w", err)
	}
	origin := vals[tc.OriginIndex]
	if origin.Kind != wire.UUID {
		return Wished{}, fmt.Errorf("magicsync/server: desire: %s's origin column %q holds no replica id (%v)", tc.Name, tc.Columns[tc.OriginIndex].Name, origin.Kind)
	}
	key := tc.KeyOfRow(vals)
	wanted := tc.EncodeRow(nil, vals, tc.DesiredIndex)
	var basedOn []byte
	if tc.Apply == codec.IfUnchanged && tc.VersionIndex >= 0 {
		basedOn = tc.EncodeRow(nil, vals, []int{tc.VersionIndex})
	}
	w := Wished{Replica: uuid.UUID(origin.U), Table: tc.Name, Key: magicsync.Key(key)}
	var n int64
	// A note PostgreSQL refuses would fail the host's whole transaction.
	note = safetext.Text(note, MaxNoteBytes)
	err = tx.QueryRow(ctx, s.sql.of(qDesire), tc.Name, hex.EncodeToString([]byte(key)), w.Replica, wanted, basedOn, note, deadlineArg(opts.Deadline), from, to).Scan(&n)
	if err != nil {
		return Wished{}, fmt.Errorf("magicsync/server: desire: %w", err)
	}
	w.Number = uint64(n)
	return w, nil
}

// ExpireWishes marks expired (WishExpired) every wish whose deadline
// passed before its replica answered it for good. Run calls it every
// PassEvery; a host that does not Run may call it itself.
func (s *Server) ExpireWishes(ctx context.Context) error {
	if s.m.wishes == nil {
		return nil
	}
	if _, err := s.pool.Exec(ctx, s.sql.of(qExpireWishes)); err != nil {
		return fmt.Errorf("magicsync/server: expiring wishes: %w", err)
	}
	return nil
}

// Withdraw takes back the wish of the setting row of type T with key, in
// the host's transaction tx. A wish the replica has carried out stays
// carried out; one it has not is not carried out. Withdrawing a row that
// has no wish does nothing. The wish stays visible, as WishWithdrawn
// (WishesOf, Wishes), until a new wish of the row replaces it.
// WithdrawRow names the row by the row itself.
func Withdraw[T any](ctx context.Context, s *Server, tx pgx.Tx, key magicsync.Key) error {
	var zero T
	tc, err := s.setting(reflect.TypeFor[T](), zero)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, s.sql.of(qWithdraw), tc.Name, hex.EncodeToString([]byte(key))); err != nil {
		return fmt.Errorf("magicsync/server: withdraw: %w", err)
	}
	return nil
}

// WithdrawRow is Withdraw of the setting row that row names by its key
// columns (its other columns are not read): the row as a page read it,
// without its key kept beside.
func WithdrawRow[T any](ctx context.Context, s *Server, tx pgx.Tx, row T) error {
	key, err := keyOfRow(s, row)
	if err != nil {
		return fmt.Errorf("magicsync/server: withdraw: %w", err)
	}
	return Withdraw[T](ctx, s, tx, key)
}

// keyOfRow is the key of a setting row of type T.
func keyOfRow[T any](s *Server, row T) (magicsync.Key, error) {
	tc, err := s.setting(reflect.TypeFor[T](), row)
	if err != nil {
		return "", err
	}
	k, err := tc.KeyOf(row)
	if err != nil {
		return "", err
	}
	return magicsync.Key(k), nil
}

// Wish is a wish of a setting row of type T, with where it stands:
// magicsync.Wish, whose fields are documented there. WishesOf and
// WishesOfRows fill every field.
type Wish[T any] = magicsync.Wish[T]

// WishesOf reads the wishes of the setting rows of type T with the given
// keys (magicsync.KeyOf names a row), through q (a pool, a connection or
// a transaction): one per key that has a wish, held or withdrawn, in the
// order of keys. WishesOfRows names the rows by the rows themselves.
func WishesOf[T any](ctx context.Context, s *Server, q Querier, keys []magicsync.Key) ([]Wish[T], error) {
	var zero T
	tc, err := s.setting(reflect.TypeFor[T](), zero)
	if err != nil {
		return nil, err
	}
	hexes := make([]string, len(keys))
	for i, k := range keys {
		hexes[i] = hex.EncodeToString([]byte(k))
	}
	rows, err := q.Query(ctx, s.sql.of(qWishesOf), tc.Name, hexes)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: wishes of %s: %w", tc.Name, err)
	}
	byKey := map[string]*Wish[T]{}
	wanted := map[string][]byte{}
	for rows.Next() {
		var w Wish[T]
		var keyHex string
		var number, answered int64
		var state, before int16
		var want []byte
		var answeredAt, withdrawnAt, deadline *time.Time
		if err := rows.Scan(&keyHex, &w.Replica, &number, &want, &w.Note, &w.WishedAt, &state, &w.Reason, &answeredAt, &answered, &withdrawnAt, &before, &deadline); err != nil {
			rows.Close()
			return nil, fmt.Errorf("magicsync/server: wishes of %s: %w", tc.Name, err)
		}
		w.Number = uint64(number)
		st := standing(number, answered, state, before, answeredAt, withdrawnAt)
		w.State, w.Before, w.AnsweredAt, w.WithdrawnAt = st.state, st.before, st.answeredAt, st.withdrawnAt
		if st.stale {
			w.Reason = ""
		}
		w.Deadline = timeOrZero(deadline)
		byKey[keyHex] = &w
		wanted[keyHex] = want
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("magicsync/server: wishes of %s: %w", tc.Name, err)
	}
	held, err := s.settingRows(ctx, q, tc, keys)
	if err != nil {
		return nil, err
	}
	out := make([]Wish[T], 0, len(byKey))
	for i, k := range keys {
		w := byKey[hexes[i]]
		if w == nil {
			continue
		}
		w.Key = k
		vals := held[string(k)]
		w.Filed = vals != nil
		if vals == nil {
			// Not filed yet: its key and origin, as the wish names them.
			vals = make([]codec.Value, len(tc.Columns))
			kv, err := codec.DecodeTuple([]byte(k), nil)
			if err != nil {
				return nil, fmt.Errorf("magicsync/server: wishes of %s: key %v: %w", tc.Name, k, err)
			}
			for j, idx := range tc.KeyIndex {
				if j < len(kv) {
					vals[idx] = kv[j]
				}
			}
			for j := range vals {
				if vals[j].Kind == 0 && j != tc.OriginIndex {
					vals[j] = codec.Value{Kind: wire.Null}
				}
			}
		}
		want, err := codec.DecodeTuple(wanted[hexes[i]], nil)
		if err != nil || len(want) != len(tc.DesiredIndex) {
			return nil, fmt.Errorf("magicsync/server: wishes of %s: the wish of %v holds %d wanted values for %d desired columns (%v)", tc.Name, k, len(want), len(tc.DesiredIndex), err)
		}
		for j, idx := range tc.DesiredIndex {
			vals[idx] = want[j]
		}
		if err := fillLenient(tc, &w.Wanted, vals); err != nil {
			return nil, fmt.Errorf("magicsync/server: wishes of %s: %w", tc.Name, err)
		}
		out = append(out, *w)
	}
	return out, nil
}

// WishesOfRows is WishesOf of the setting rows rows name by their key
// columns (their other columns are not read): the rows as a page read
// them, without their keys kept beside.
func WishesOfRows[T any](ctx context.Context, s *Server, q Querier, rows []T) ([]Wish[T], error) {
	keys := make([]magicsync.Key, len(rows))
	for i, row := range rows {
		k, err := keyOfRow(s, row)
		if err != nil {
			return nil, fmt.Errorf("magicsync/server: wishes of rows: %w", err)
		}
		keys[i] = k
	}
	return WishesOf[T](ctx, s, q, keys)
}

// wishStanding is where a wish read from allWishes stands.
type wishStanding struct {
	state, before           WishState
	answeredAt, withdrawnAt time.Time
	// stale is set for a wish held whose recorded answer is to an older
	// number: its reason is not this wish's.
	stale bool
}

// standing reads where a wish stands from its row of allWishes: number,
// the number answered, the state recorded and, for a withdrawn one, where
// it stood before, and the times known.
func standing(number, answered int64, state, before int16, answeredAt, withdrawnAt *time.Time) wishStanding {
	var st wishStanding
	switch {
	case withdrawnAt != nil:
		st.state, st.before, st.withdrawnAt = WishWithdrawn, WishState(before), *withdrawnAt
	case answered != number:
		return wishStanding{state: WishPending, stale: true}
	default:
		st.state = WishState(state)
	}
	if answeredAt != nil {
		st.answeredAt = *answeredAt
	}
	return st
}

// fillLenient fills dst from vals, leaving the fields of NULL values
// their zero value when the field cannot hold NULL (a wish of a row the
// server has not filed yet knows only its key and wanted values).
func fillLenient(tc *codec.TableCodec, dst any, vals []codec.Value) error {
	if err := tc.Fill(dst, vals); err == nil {
		return nil
	}
	for i := range vals {
		if vals[i].Kind == wire.Null || vals[i].Kind == 0 {
			vals[i] = zeroValue(tc.Columns[i].Kind)
		}
	}
	return tc.Fill(dst, vals)
}

// zeroValue is a canonical value of kind standing for a Go zero value.
func zeroValue(kind codec.ValueKind) codec.Value {
	switch kind {
	case wire.Bool, wire.True, wire.False:
		return codec.Value{Kind: wire.Bool}
	case wire.Time:
		return codec.Value{Kind: wire.Time, I: time.Time{}.UnixMicro()}
	}
	return codec.Value{Kind: kind}
}

// settingRows reads the setting rows of keys from the host's table, as
// canonical values by key.
func (s *Server) settingRows(ctx context.Context, q Querier, tc *codec.TableCodec, keys []magicsync.Key) (map[string][]codec.Value, error) {
	t := s.m.byName[tc.Name]
	if t == nil || len(keys) == 0 {
		return nil, nil
	}
	raw := make([][]byte, len(keys))
	for i, k := range keys {
		raw[i] = []byte(k)
	}
	return t.readValuesByKeys(ctx, q, raw)
}

// Querier is what a pool, a connection and a transaction have in common:
// WishesOf reads through any of them.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// WishScope narrows Wishes; the zero scope is the whole fleet, and each
// field set narrows it further.
type WishScope struct {
	// Replica narrows to one replica's wishes.
	Replica uuid.UUID
	// Group narrows to the wishes of the replicas in a group: those a
	// Grouped route's members table puts in the group of this value (as
	// text, e.g. a shop's id).
	Group string
	// Table narrows to one setting table's wishes: named as its replicas
	// name it ("settings") or with its schema ("shop.settings"). Wishes
	// refuses the name of no declared setting table (see Settings).
	Table string
}

// WishSummary is one wish as Wishes lists it.
type WishSummary struct {
	Replica uuid.UUID
	// Table is the setting table's name as declared, never qualified.
	Table string
	Key   magicsync.Key
	// Wanted is the wanted values of the desired columns, by column.
	Wanted     map[string]any
	Number     uint64
	State      WishState
	Reason     string
	Note       string
	WishedAt   time.Time
	AnsweredAt time.Time
	// WithdrawnAt and Before are, for a wish withdrawn, when and where it
	// stood then (see Wish).
	WithdrawnAt time.Time
	Before      WishState
	// Deadline is the wish's, zero for none.
	Deadline time.Time
}

// WishList is a scope's wishes, those needing attention first (refused,
// waiting, superseded, pending, applied, then withdrawn; the oldest first
// within each), and how many stand in each state.
type WishList struct {
	Wishes []WishSummary
	Counts map[WishState]int
	// More is true when the scope holds more wishes than listed: Wishes
	// lists at most maxWishesListed.
	More bool
}

// maxWishesListed bounds the wishes one call of Wishes lists.
const maxWishesListed = 1000

// Wishes lists the wishes of a scope, those needing attention first, with
// how many stand in each state.
func (s *Server) Wishes(ctx context.Context, scope WishScope) (WishList, error) {
	if scope.Table != "" {
		t, err := s.settingNamed(scope.Table)
		if err != nil {
			return WishList{}, fmt.Errorf("magicsync/server: wishes: %w", err)
		}
		scope.Table = t.name
	}
	var replica any
	if scope.Replica != uuid.Nil {
		replica = scope.Replica
	}
	var groups []string // nil: every group
	if scope.Group != "" {
		groups = []string{}
		for _, m := range s.m.members {
			groups = append(groups, groupGrouped(m, scope.Group))
		}
	}
	list := WishList{Counts: map[WishState]int{}}
	rows, err := s.pool.Query(ctx, s.sql.of(qWishes), replica, scope.Table, maxWishesListed+1, groups)
	if err != nil {
		return WishList{}, fmt.Errorf("magicsync/server: wishes: %w", err)
	}
	for rows.Next() {
		var w WishSummary
		var keyHex string
		var number, answered int64
		var state, before int16
		var want []byte
		var answeredAt, withdrawnAt, deadline *time.Time
		if err := rows.Scan(&w.Table, &keyHex, &w.Replica, &number, &want, &w.Note, &w.WishedAt, &state, &w.Reason, &answeredAt, &answered, &withdrawnAt, &before, &deadline); err != nil {
			rows.Close()
			return WishList{}, fmt.Errorf("magicsync/server: wishes: %w", err)
		}
		if len(list.Wishes) == maxWishesListed {
			list.More = true
			continue
		}
		key, _ := hex.DecodeString(keyHex)
		w.Key = magicsync.Key(key)
		w.Number = uint64(number)
		st := standing(number, answered, state, before, answeredAt, withdrawnAt)
		w.State, w.Before, w.AnsweredAt, w.WithdrawnAt = st.state, st.before, st.answeredAt, st.withdrawnAt
		if st.stale {
			w.Reason = ""
		}
		w.Wanted = s.wantedByColumn(w.Table, want)
		w.Deadline = timeOrZero(deadline)
		list.Wishes = append(list.Wishes, w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return WishList{}, fmt.Errorf("magicsync/server: wishes: %w", err)
	}
	counts, err := s.pool.Query(ctx, s.sql.of(qWishCounts), replica, scope.Table, groups)
	if err != nil {
		return WishList{}, fmt.Errorf("magicsync/server: wishes: %w", err)
	}
	var state int16
	var n int
	if _, err := pgx.ForEachRow(counts, []any{&state, &n}, func() error {
		list.Counts[WishState(state)] += n
		return nil
	}); err != nil {
		return WishList{}, fmt.Errorf("magicsync/server: wishes: %w", err)
	}
	return list, nil
}

// wantedByColumn decodes a wish's wanted tuple by desired column name.
func (s *Server) wantedByColumn(tbl string, want []byte) map[string]any {
	t := s.m.byName[tbl]
	vals, err := codec.DecodeTuple(want, nil)
	if t == nil || err != nil || len(vals) != len(t.tc.DesiredIndex) {
		return nil
	}
	out := make(map[string]any, len(vals))
	for i, idx := range t.tc.DesiredIndex {
		out[t.tc.Columns[idx].Name] = codec.Arg(vals[i])
	}
	return out
}

// wishesDown turns the wishes table's part of a message into the Wish
// messages the protocol carries: an upsert is a wish, a delete a wish
// withdrawn.
func (s *Server) wishesDown(tc *syncpb.TableChanges) ([]*syncpb.Wish, error) {
	out := make([]*syncpb.Wish, 0, len(tc.Upserts)+len(tc.Deletes))
	var vals []codec.Value
	for _, tuple := range tc.Upserts {
		var err error
		if vals, err = codec.DecodeTuple(tuple, vals); err != nil || len(vals) != 11 {
			return nil, fmt.Errorf("a wish of %d values (%v)", len(vals), err)
		}
		key, err := hex.DecodeString(vals[1].S)
		if err != nil {
			return nil, fmt.Errorf("a wish's key %q: %w", vals[1].S, err)
		}
		w := &syncpb.Wish{Table: vals[0].S, Key: key, Wish: uint64(vals[3].I), Wanted: vals[4].B,
			BasedOn: vals[5].B, Note: vals[6].S, WishedAt: vals[7].I}
		if vals[8].Kind != wire.Null {
			w.Deadline = max(vals[8].I, 1)
		}
		w.WindowFrom, w.WindowTo = uint32(vals[9].I), uint32(vals[10].I)
		if t := s.m.byName[w.Table]; t != nil {
			w.Columns = t.tc.ColumnNames(t.tc.DesiredIndex)
		}
		out = append(out, w)
	}
	for _, k := range tc.Deletes {
		var err error
		if vals, err = codec.DecodeTuple(k, vals); err != nil || len(vals) != 2 {
			return nil, fmt.Errorf("a wish's key of %d values (%v)", len(vals), err)
		}
		key, err := hex.DecodeString(vals[1].S)
		if err != nil {
			return nil, fmt.Errorf("a wish's key %q: %w", vals[1].S, err)
		}
		out = append(out, &syncpb.Wish{Table: vals[0].S, Key: key, Withdrawn: true})
	}
	return out, nil
}

// fileAnswers records a replica's answers: each is taken only when it
// answers the wish the server holds now, so that an answer to an older
// wish never overwrites that of a newer one (or a wish withdrawn since).
// Of two answers to the same wish, the later in time stands (uploads of
// different lanes may arrive out of order), unless resent: answers a
// replica sends again after a provisioning are what it holds now, and are
// taken whatever their time — its clock may have stepped back since the
// answer the server recorded.
func (s *Server) fileAnswers(ctx context.Context, tx pgx.Tx, replica uuid.UUID, answers []*syncpb.Answer, resent bool) error {
	if len(answers) == 0 {
		return nil
	}
	n := len(answers)
	tbls, keys := make([]string, 0, n), make([]string, 0, n)
	nums, states := make([]int64, 0, n), make([]int16, 0, n)
	reasons, ats := make([]string, 0, n), make([]time.Time, 0, n)
	for _, a := range answers {
		if a.GetState() <= syncpb.WishState_WISH_STATE_PENDING || (a.GetState() > syncpb.WishState_WISH_STATE_SUPERSEDED && a.GetState() != syncpb.WishState_WISH_STATE_EXPIRED) {
			// Pending is no answer (and the decoder refuses the others): a
			// replica saying it has not answered yet changes nothing.
			continue
		}
		if t := s.m.byName[a.GetTable()]; t == nil || t.tc.Mirror != codec.Setting {
			// No wish of it is held: it changes nothing (and its name may
			// be text PostgreSQL refuses).
			continue
		}
		tbls = append(tbls, a.GetTable())
		keys = append(keys, hex.EncodeToString(a.GetKey()))
		nums = append(nums, int64(min(a.GetWish(), maxID)))
		states = append(states, int16(a.GetState()))
		reasons = append(reasons, clip(a.GetReason(), safetext.MaxReason))
		ats = append(ats, pgTime(a.GetAnsweredAt()))
	}
	if _, err := tx.Exec(ctx, s.sql.of(qFileAnswersEvents), replica, tbls, keys, nums, states, reasons, ats, resent); err != nil {
		return fmt.Errorf("magicsync/server: filing answers: %w", err)
	}
	return nil
}

// answersHeld names the wishes of a replica whose answers the server
// records, for its provisioning's EndSnapshot.
func (s *Server) answersHeld(ctx context.Context, q querier, replica uuid.UUID) ([]*syncpb.WishRef, error) {
	if s.m.wishes == nil {
		return nil, nil
	}
	rows, err := q.Query(ctx, s.sql.of(qAnswersHeld), replica)
	if err != nil {
		return nil, fmt.Errorf("reading the answers held: %w", err)
	}
	var out []*syncpb.WishRef
	var tbl, keyHex string
	var number int64
	if _, err := pgx.ForEachRow(rows, []any{&tbl, &keyHex, &number}, func() error {
		key, err := hex.DecodeString(keyHex)
		if err != nil {
			return err
		}
		out = append(out, &syncpb.WishRef{Table: tbl, Key: key, Wish: uint64(number)})
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading the answers held: %w", err)
	}
	return out, nil
}

// SettingRow is one row of a setting table as its replica last filed it:
// the values of its desired columns, by column.
type SettingRow struct {
	Replica uuid.UUID
	Key     magicsync.Key
	Values  map[string]any
}

// maxSettingsListed bounds the rows one call of Settings lists.
const maxSettingsListed = 10000

// Settings lists the rows of a setting table as the replicas last filed
// them (at most 10,000, by replica): what a page shows beside the values
// wished, so that an operator sees what every replica reports. A row that
// does not read is left out. The table is named as its replicas name it
// ("settings") or with its schema ("shop.settings"); a name of no declared
// table is refused with an error wrapping magicsync.ErrNotDeclared, one of
// a table that is no setting with one wrapping ErrNotASetting.
func (s *Server) Settings(ctx context.Context, table string) ([]SettingRow, error) {
	t, err := s.settingNamed(table)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: settings: %w", err)
	}
	all := make([]int, len(t.tc.Columns))
	for i := range all {
		all[i] = i
	}
	rows, err := s.pool.Query(ctx, t.selectFirstRows(all, maxSettingsListed))
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: settings of %s: %w", t.qname, err)
	}
	defer rows.Close()
	var out []SettingRow
	vals := make([]codec.Value, len(t.tc.Columns))
	for rows.Next() {
		if err := t.scanRow(rows, all, vals); err != nil {
			if errors.Is(err, codec.ErrBadValue) {
				continue
			}
			return nil, fmt.Errorf("magicsync/server: settings of %s: %w", t.qname, err)
		}
		r := SettingRow{Key: magicsync.Key(t.tc.KeyOfRow(vals)), Values: make(map[string]any, len(t.tc.DesiredIndex))}
		if o := vals[t.tc.OriginIndex]; o.Kind == wire.UUID {
			r.Replica = uuid.UUID(o.U)
		}
		for _, i := range t.tc.DesiredIndex {
			r.Values[t.tc.Columns[i].Name] = codec.Arg(vals[i])
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
