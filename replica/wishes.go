// Wishes, the replica's half of a device twin: the handlers that carry
// them out (Handle, CarryOut, Outcome), recording the server's wishes as a
// message applies (and staging a provisioning's), and the answers that go
// up. Offering a wish to its handler, after the commit, lives in offer.go.

package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Wish is the server's wish that a setting row's desired columns take
// other values, as a handler is offered it: magicsync.Wish, whose fields
// are documented there. A replica fills Wanted (the row as the replica
// holds it, with the wanted values), Number, Note and WishedAt; the other
// fields are the server's record of the wish, and are zero.
type Wish[T any] = magicsync.Wish[T]

// WishState is where a wish stands: magicsync.WishState, whose values
// are documented there. A replica's wishes are never WishWithdrawn: a
// wish the server takes back is dropped.
type WishState = magicsync.WishState

// The states of a wish a replica holds (magicsync's).
const (
	WishPending    = magicsync.WishPending
	WishWaiting    = magicsync.WishWaiting
	WishApplied    = magicsync.WishApplied
	WishRefused    = magicsync.WishRefused
	WishSuperseded = magicsync.WishSuperseded
	WishExpired    = magicsync.WishExpired
)

// Outcome is a handler's answer to a wish: Applied, Refused or Later. The
// zero Outcome is no answer, and leaves the wish waiting.
type Outcome struct {
	state WishState
	why   string
}

// Applied answers that the wish was carried out: the engine writes the
// wanted values onto the row, moves its version on and records the
// answer, in one transaction.
func Applied() Outcome { return Outcome{state: WishApplied} }

// Refused answers that the wish will not be carried out, and why. The
// answer is final for this wish; the row stays as it is.
//
// The reason is kept and sent made safe: bytes that are not UTF-8, and
// NUL, become U+FFFD, and a reason longer than 1 KiB is cut, on a
// character boundary, ending "…". Text a device returned can go into it
// as it is.
func Refused(why string) Outcome { return Outcome{state: WishRefused, why: safetext.Reason(why)} }

// Later answers that the wish cannot be carried out now, and why (the
// device is off). The wish waits, and is offered again: when the host
// calls OfferWishes, after the next message that changes a wish, when Run
// starts, and every WishesEvery. The reason is made safe as Refused's is.
func Later(why string) Outcome { return Outcome{state: WishWaiting, why: safetext.Reason(why)} }

// State is where the outcome leaves the wish: WishApplied, WishRefused or
// WishWaiting; 0 for the zero Outcome.
func (o Outcome) State() WishState { return o.state }

// Reason is why the wish was refused or waits, made safe (see Refused).
func (o Outcome) Reason() string { return o.why }

// String writes the outcome as it reads: "applied", "refused: why".
func (o Outcome) String() string {
	if o.state == 0 {
		return "no outcome"
	}
	if o.why == "" {
		return o.state.String()
	}
	return o.state.String() + ": " + o.why
}

// CarryOut carries out the wishes of one setting table, whose Go row type
// is T. CarryOut is called once the message that brought the wish is
// committed, with no transaction open, in a goroutine of its own: it may
// take its time and talk to hardware, up to Settings.WishesTimeout, after
// which its context ends and the wish waits. At most 64 handlers run at
// once (a handler given up on no longer counts); further offers wait their
// turn. It must not write the wish's row itself: on Applied the engine
// does, recording many answers to a transaction.
//
// A wish may be offered again after it was carried out: a replica that
// stops after the handler ran and before the answer was recorded, or one
// restored from an older copy, offers it again. Carrying the same wish out
// twice must leave things as carrying it out once does.
type CarryOut[T any] interface {
	CarryOut(ctx context.Context, w Wish[T]) Outcome
}

// Handler carries out the wishes of one setting table. Build one with
// Handle.
type Handler struct {
	// rowType is the handler's T.
	rowType reflect.Type
	// carry offers a wish, its Wanted row being a T.
	carry func(ctx context.Context, wanted any, number uint64, note string, at, deadline time.Time) Outcome
}

// Handle makes h the handler of the setting table whose Go row type is T,
// as declared with magicsync.NewCodecs (T may also be a pointer to it).
func Handle[T any](h CarryOut[T]) Handler {
	hd := Handler{rowType: reflect.TypeFor[T]()}
	if h == nil {
		return hd
	}
	hd.carry = func(ctx context.Context, wanted any, number uint64, note string, at, deadline time.Time) Outcome {
		return h.CarryOut(ctx, Wish[T]{Wanted: wanted.(T), Number: number, Note: note, WishedAt: at, Deadline: deadline})
	}
	return hd
}

// Direct carries out every wish of a setting that lives only in the
// database: it answers Applied, and the engine writes the values.
type Direct[T any] struct{}

// CarryOut answers Applied.
func (Direct[T]) CarryOut(context.Context, Wish[T]) Outcome { return Applied() }

// Wishes lists the handlers of a replica's setting tables, one per
// setting table:
//
//	settings.Wishes = replica.Wishes{
//		replica.Handle[Footer](printer),
//		replica.Handle(replica.Direct[RegisterSetting]{}),
//	}
type Wishes []Handler

// wishHandler is a handler checked against its table.
type wishHandler struct {
	tc *codec.TableCodec
	// pointer is true when the handler's T is a pointer to the row type.
	pointer bool
	h       Handler
}

// setHandlers checks the handlers against the declared tables: one per
// setting table, and none for any other table.
func (r *Replica) setHandlers() error {
	r.offers.init()
	r.commands.init()
	var problems []string
	for i, h := range r.settings.Wishes {
		if h.rowType == nil {
			problems = append(problems, fmt.Sprintf("Wishes[%d] is the zero Handler: build it with replica.Handle", i))
			continue
		}
		t, pointer := h.rowType, false
		if t.Kind() == reflect.Pointer {
			t, pointer = t.Elem(), true
		}
		tc, err := r.codecs.Of(reflect.New(t).Interface())
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("Wishes[%d] handles %v, which is not a declared row type: pass it to magicsync.NewCodecs, or drop the handler", i, h.rowType))
			continue
		case tc.Mirror != codec.Setting:
			problems = append(problems, fmt.Sprintf("Wishes[%d] handles table %q, a %v: only settings take wishes; drop the handler, or make the table a magicsync.Setting", i, tc.Name, tc.Mirror))
			continue
		case h.carry == nil:
			problems = append(problems, fmt.Sprintf("Wishes[%d] handles table %q with a nil CarryOut: pass a handler (replica.Direct[%v]{} for a setting that lives only in the database)", i, tc.Name, tc.Type))
			continue
		case r.offers.handlers[tc.Name] != nil:
			problems = append(problems, fmt.Sprintf("table %q has two handlers in Wishes: keep one", tc.Name))
			continue
		}
		if k := tc.Columns[tc.VersionIndex].Kind; k != wire.Int && k != wire.Float && k != wire.Time {
			problems = append(problems, fmt.Sprintf("setting %q has a version column %q of kind %v: the engine moves a setting's version on when it writes a wish, and can move an integer, a float or a time; make %v.%s one of those",
				tc.Name, tc.Columns[tc.VersionIndex].Name, k, tc.Type, tc.Columns[tc.VersionIndex].Field))
			continue
		}
		r.offers.handlers[tc.Name] = &wishHandler{tc: tc, pointer: pointer, h: h}
	}
	for _, tc := range r.codecs.Tables() {
		if tc.Mirror == codec.Setting && r.offers.handlers[tc.Name] == nil && !slicesContainsTable(r.settings.Wishes, tc) {
			problems = append(problems, fmt.Sprintf("setting table %q has no wish handler: add replica.Handle[%v](h) to Settings.Wishes, with h your CarryOut[%v] — or replica.Direct[%v]{} for a setting that lives only in the database",
				tc.Name, tc.Type, tc.Type, tc.Type))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("magicsync/replica: replica settings: %s", joinProblems(problems))
	}
	return nil
}

// slicesContainsTable says whether a handler of ws names tc's row type
// (one already refused for another reason).
func slicesContainsTable(ws Wishes, tc *codec.TableCodec) bool {
	for _, h := range ws {
		if h.rowType == tc.Type || (h.rowType != nil && h.rowType.Kind() == reflect.Pointer && h.rowType.Elem() == tc.Type) {
			return true
		}
	}
	return false
}

// recordWishes records a message's wishes in its transaction, or, for a
// provisioning's part (snapshot not zero), stages them. A wish of a table
// this build carries out no wishes of (not a setting here, or a setting
// without a handler) is recorded all the same, and set aside: answered
// waiting, saying why, until a build that carries it out runs.
func (a *applier) recordWishes(ctx context.Context, ws []*syncpb.Wish, snapshot uint64) error {
	var aside []string // the tables of the wishes to set aside, once recorded
	for _, w := range ws {
		if w.GetWithdrawn() {
			q, args := withdrawWish, []any{w.GetTable(), w.GetKey(), w.GetWish()}
			if snapshot != 0 {
				q, args = unstageWish, []any{snapshot, w.GetTable(), w.GetKey(), w.GetWish()}
			}
			res, err := a.exec(ctx, q, args...)
			if err != nil {
				return fmt.Errorf("withdrawing a wish of %q: %w", w.GetTable(), err)
			}
			if n, _ := res.RowsAffected(); n > 0 {
				a.wishesChanged = true
			}
			continue
		}
		args := []any{w.GetTable(), w.GetKey(), int64(min(w.GetWish(), 1<<63-1)), strings.Join(w.GetColumns(), "\x1f"), nonNil(w.GetWanted()),
			nullBytes(w.GetBasedOn()), w.GetNote(), w.GetWishedAt(), a.msg, w.GetDeadline(), w.GetWindowFrom(), w.GetWindowTo()}
		q := recordWish
		if snapshot != 0 {
			q, args = stageWish, append([]any{snapshot}, args...)
		}
		res, err := a.exec(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("recording a wish of %q: %w", w.GetTable(), err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			a.wishesChanged = true
		}
		if snapshot == 0 && !slices.Contains(aside, w.GetTable()) && a.r.notCarriedOut(w.GetTable()) != "" {
			aside = append(aside, w.GetTable())
		}
	}
	if len(aside) == 0 {
		return nil
	}
	return a.r.setAsideWishes(ctx, a.tx, aside...)
}

// notCarriedOut says why this build carries out no wish of table, or ""
// when it does.
func (r *Replica) notCarriedOut(table string) string {
	tc, err := r.codecs.Table(table)
	switch {
	case err != nil:
		return fmt.Sprintf("a wish of table %q, which this build of the replica does not declare: it waits for a build that carries it out", table)
	case tc.Mirror != codec.Setting:
		return fmt.Sprintf("a wish of table %q, a %v in this build of the replica, where only settings take wishes: it waits for a build that carries it out", table, tc.Mirror)
	case r.offers.handlers[tc.Name] == nil:
		return fmt.Sprintf("a wish of table %q, which this build of the replica has no handler for: it waits for a build that carries it out", table)
	}
	return ""
}

// setAsideWishes answers waiting, saying why, the wishes not answered yet
// of the given tables, or of every table this build carries out no wish
// of when none is given, through q (the message's transaction, or the
// database): they wait for a build that carries them out, which offers
// them as it starts.
func (r *Replica) setAsideWishes(ctx context.Context, q execQuerier, tables ...string) error {
	if len(tables) == 0 {
		held, err := unansweredWishTables(ctx, q)
		if err != nil {
			return err
		}
		tables = held
	}
	for _, tbl := range tables {
		why := r.notCarriedOut(tbl)
		if why == "" {
			continue
		}
		res, err := q.ExecContext(ctx, setAsideWishesOf, tbl, why, r.clock.Now().UnixMicro())
		if err != nil {
			return fmt.Errorf("setting aside the wishes of %q: %w", tbl, err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			r.log.Warn("magicsync/replica: wishes set aside", "table", tbl, "wishes", n, "reason", why)
		}
	}
	return nil
}

// execQuerier is what *sql.DB and *sql.Tx have in common.
type execQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// unansweredWishTables lists the tables of the wishes not answered yet.
func unansweredWishTables(ctx context.Context, q execQuerier) ([]string, error) {
	tables, err := queryAll(ctx, q, scanText, selectUnansweredWishTables)
	if err != nil {
		return nil, fmt.Errorf("reading the wishes not answered: %w", err)
	}
	return tables, nil
}

// switchInWishes replaces the wishes held with those a provisioning staged,
// and marks every answer held to go up again.
func (a *applier) switchInWishes(ctx context.Context, snapshot uint64) error {
	for _, q := range []string{dropWishesNotStaged, switchInWishes} {
		if _, err := a.exec(ctx, q, snapshot); err != nil {
			return fmt.Errorf("provisioning the wishes: %w", err)
		}
	}
	if _, err := a.exec(ctx, resendAnswers); err != nil {
		return fmt.Errorf("sending the answers again: %w", err)
	}
	a.wishesChanged = true
	return a.r.setAsideWishes(ctx, a.tx)
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// answersDue lists the answers due to go up, at most limit. Beside rows,
// the answers sent again after a provisioning (resent) go only with rows
// sent again, the others only with the others; alone, the answers sent
// again go first.
func (r *Replica) answersDue(ctx context.Context, conn *sql.Conn, withRows, rowsResent bool, stale int64, limit int) ([]*syncpb.Answer, bool, error) {
	flags := []bool{true, false}
	if withRows {
		flags = []bool{rowsResent}
	}
	for _, resent := range flags {
		rows, err := conn.QueryContext(ctx, selectAnswersDue, resent, stale, limit)
		if err != nil {
			return nil, false, err
		}
		var out []*syncpb.Answer
		for rows.Next() {
			a := &syncpb.Answer{}
			var state int32
			var at sql.NullInt64
			if err := rows.Scan(&a.Table, &a.Key, &a.Wish, &state, &a.Reason, &at); err != nil {
				rows.Close()
				return nil, false, err
			}
			a.State, a.AnsweredAt = syncpb.WishState(state), at.Int64
			// An older build recorded reasons as handlers gave them.
			a.Reason = safetext.Reason(a.Reason)
			out = append(out, a)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, false, err
		}
		if len(out) > 0 {
			return out, resent, nil
		}
	}
	return nil, false, nil
}

// WishCounts counts a replica's wishes by where they stand.
type WishCounts struct {
	// Pending counts wishes not answered yet.
	Pending int
	// Waiting counts wishes that wait to be offered again.
	Waiting int
	// Applied, Refused and Superseded count the wishes answered for good.
	Applied, Refused, Superseded int
	// Expired counts the wishes whose deadline passed before they were
	// carried out.
	Expired int
}

// countWishes reads the wishes' counts by state.
func countWishes(ctx context.Context, conn *sql.Conn) (WishCounts, error) {
	var c WishCounts
	rows, err := conn.QueryContext(ctx, countWishStates)
	if err != nil {
		return c, err
	}
	defer rows.Close()
	for rows.Next() {
		var state WishState
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			return c, err
		}
		switch state {
		case WishPending:
			c.Pending += n
		case WishWaiting:
			c.Waiting += n
		case WishApplied:
			c.Applied += n
		case WishRefused:
			c.Refused += n
		case WishSuperseded:
			c.Superseded += n
		case WishExpired:
			c.Expired += n
		}
	}
	return c, rows.Err()
}

// errNoRow is why a wish waits for its row.
var errNoRow = errors.New("the replica holds no such row yet: the wish waits for it")
