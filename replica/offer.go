// Offering wishes to their handlers: the loop Run owns, which offers a wish
// once the message that brought it committed, again when asked
// (OfferWishes), at start and every WishesEvery while one waits; each
// offer in a goroutine of its own, bounded by WishesTimeout; and the
// answer recorded — with the row written, its version moved on, when the
// handler applied it.

package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
)

// offers is what carrying wishes out keeps: the handlers by table, what
// asks the loop for a pass, and the rows whose handler runs.
type offers struct {
	handlers map[string]*wishHandler
	// nudge wakes the loop; all says the pass offers every wish that
	// waits, not only those that wait for their row.
	nudge chan struct{}

	mu  sync.Mutex
	all bool
	// busy holds the rows whose handler runs (until it returns, even
	// after its offer gave up on it); skipped, those a pass left for it.
	busy, skipped map[wishRow]bool

	// answered, set by tests, sees every answer recorded or dropped.
	answered func(wishAnswer)
}

// wishRow names a setting row.
type wishRow struct {
	tbl string
	key string
}

// wishAnswer is an answer as it was recorded (or dropped: recorded false).
type wishAnswer struct {
	row      wishRow
	wish     uint64
	state    WishState
	reason   string
	recorded bool
}

func (o *offers) init() {
	o.handlers = map[string]*wishHandler{}
	o.nudge = make(chan struct{}, 1)
	o.busy = map[wishRow]bool{}
	o.skipped = map[wishRow]bool{}
}

// ask asks the loop for a pass: of every wish not answered or waiting when
// all, else of the wishes waiting for their row.
func (o *offers) ask(all bool) {
	if len(o.handlers) == 0 {
		return
	}
	if all {
		o.mu.Lock()
		o.all = true
		o.mu.Unlock()
	}
	select {
	case o.nudge <- struct{}{}:
	default:
	}
}

// OfferWishes offers again, now, every wish that waits: call it when what
// a handler waited for is back (the device answers again). It returns at
// once; the offers run in Run's goroutines, and only while Run runs.
func (r *Replica) OfferWishes() { r.offers.ask(true) }

// heldWish is a wish as sync_wishes holds it.
type heldWish struct {
	row      wishRow
	wish     uint64
	columns  []string
	wanted   []byte
	basedOn  []byte
	note     string
	wishedAt int64
}

// runWishes is the loop of the offers, until ctx ends; it then waits for
// the offers under way: their handlers' context ends with ctx, and each is
// waited for until WishesTimeout.
func (r *Replica) runWishes(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	o := &r.offers
	o.mu.Lock()
	o.all = true // at start
	o.mu.Unlock()
	for {
		o.mu.Lock()
		all := o.all
		o.all = false
		o.mu.Unlock()
		if err := r.offerPass(ctx, &wg, all); err != nil && ctx.Err() == nil {
			r.log.Error("magicsync/replica: reading the wishes to offer", "err", err)
		}
		var every <-chan time.Time
		var waiting bool
		if err := r.db.QueryRowContext(ctx, anyWishWaiting).Scan(&waiting); err != nil && ctx.Err() == nil {
			r.log.Error("magicsync/replica: reading whether a wish waits", "err", err)
			waiting = true
		}
		if waiting {
			every = r.clock.After(r.settings.WishesEvery)
		}
		select {
		case <-ctx.Done():
			return
		case <-o.nudge:
		case <-every:
			o.mu.Lock()
			o.all = true
			o.mu.Unlock()
		}
	}
}

// offerPass starts an offer of each wish to offer: every one not answered
// or waiting when all, else those waiting for their row. A row whose
// handler still runs is left until it returns.
func (r *Replica) offerPass(ctx context.Context, wg *sync.WaitGroup, all bool) error {
	cond := ""
	if !all {
		cond = "AND needs_row = 1"
	}
	rows, err := r.db.QueryContext(ctx, fmt.Sprintf(selectWishesToOfferFormat, cond))
	if err != nil {
		return err
	}
	var ws []heldWish
	for rows.Next() {
		var w heldWish
		var cols string
		var key []byte
		if err := rows.Scan(&w.row.tbl, &key, &w.wish, &cols, &w.wanted, &w.basedOn, &w.note, &w.wishedAt); err != nil {
			rows.Close()
			return err
		}
		w.row.key = string(key)
		if cols != "" {
			w.columns = strings.Split(cols, "\x1f")
		}
		ws = append(ws, w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	o := &r.offers
	for _, w := range ws {
		h := o.handlers[w.row.tbl]
		if h == nil {
			continue // a wish an earlier build recorded, of a table this one does not handle
		}
		o.mu.Lock()
		busy := o.busy[w.row]
		if busy {
			o.skipped[w.row] = true
		} else {
			o.busy[w.row] = true
		}
		o.mu.Unlock()
		if busy {
			continue
		}
		wg.Go(func() { r.offer(ctx, h, w) })
	}
	return nil
}

// release marks the row's handler as returned; a pass that left the row
// for it is made again.
func (o *offers) release(row wishRow) {
	o.mu.Lock()
	delete(o.busy, row)
	again := o.skipped[row]
	delete(o.skipped, row)
	o.mu.Unlock()
	if again {
		o.ask(true)
	}
}

// offer offers one wish to its handler — unless the replica does not hold
// its row (it waits), or, under IfUnchanged, holds it at another version
// than the wish was based on (superseded) — and records the answer.
func (r *Replica) offer(ctx context.Context, h *wishHandler, w heldWish) {
	released := false
	defer func() {
		if !released {
			r.offers.release(w.row)
		}
	}()
	wanted, own := r.prepareWish(ctx, h, w)
	if ctx.Err() != nil {
		return
	}
	if own.state != 0 {
		r.record(ctx, w, own, errors.Is(own.err, errNoRow))
		return
	}
	// The handler runs in a goroutine of its own, under a context that
	// ends at WishesTimeout or when Run stops. The offer waits for it until
	// WishesTimeout, whatever happens: a handler that honours its context
	// returns at once when Run stops, and its answer is recorded. One that
	// has not returned by then is given up on; its goroutine releases the
	// row when it returns at last, so that the row is never offered twice
	// at once.
	type call struct {
		mu                  sync.Mutex
		returned, abandoned bool
	}
	c := &call{}
	result := make(chan Outcome, 1)
	hctx, cancel := context.WithTimeout(ctx, r.settings.WishesTimeout)
	defer cancel()
	timer := time.NewTimer(r.settings.WishesTimeout)
	defer timer.Stop()
	go func() {
		result <- r.carry(hctx, h, w, wanted)
		c.mu.Lock()
		c.returned = true
		abandoned := c.abandoned
		c.mu.Unlock()
		if abandoned {
			r.offers.release(w.row)
		}
	}()
	// Once the handler answered, its answer is recorded even if Run stops
	// meanwhile.
	rctx := context.WithoutCancel(ctx)
	var out Outcome
	select {
	case out = <-result:
	case <-timer.C:
		c.mu.Lock()
		if !c.returned {
			c.abandoned, released = true, true
		}
		c.mu.Unlock()
		if !released {
			out = <-result
			break
		}
		r.log.Warn("magicsync/replica: a wish handler did not answer in time; the wish waits", "table", w.row.tbl, "key", codec.Key(w.row.key), "wish", w.wish, "timeout", r.settings.WishesTimeout)
		out = Later(fmt.Sprintf("the handler did not answer within %v", r.settings.WishesTimeout))
	}
	switch out.state {
	case WishApplied:
		r.applyWish(rctx, h, w)
	case WishRefused:
		if out.why == "" {
			out.why = "the handler refused it"
		}
		r.record(rctx, w, answer{state: WishRefused, why: out.why}, false)
	case WishWaiting:
		if out.why == "" {
			out.why = "the handler answered Later"
		}
		r.record(rctx, w, answer{state: WishWaiting, why: out.why}, false)
	default:
		r.record(rctx, w, answer{state: WishWaiting, why: "the handler returned no outcome (the zero Outcome): it should return Applied(), Refused(why) or Later(why)"}, false)
	}
}

// carry calls the handler, turning a panic into a wait.
func (r *Replica) carry(ctx context.Context, h *wishHandler, w heldWish, wanted any) (out Outcome) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("magicsync/replica: a wish handler panicked; the wish waits", "table", w.row.tbl, "key", codec.Key(w.row.key), "wish", w.wish, "panic", p, "stack", string(debug.Stack()))
			out = Later(fmt.Sprintf("the handler panicked: %v", p))
		}
	}()
	return h.h.carry(ctx, wanted, w.wish, w.note, time.UnixMicro(w.wishedAt).UTC())
}

// answer is an answer the engine gives itself, without the handler; err
// says why, when there is a cause to tell apart.
type answer struct {
	state WishState
	why   string
	err   error
}

// prepareWish builds the row the handler is offered — the row held, with
// the wanted values in its desired columns — or the answer the wish gets
// without it.
func (r *Replica) prepareWish(ctx context.Context, h *wishHandler, w heldWish) (any, answer) {
	if _, err := keyArgs(h.tc, []byte(w.row.key)); err != nil {
		return nil, answer{state: WishRefused, why: "the wish's key is no key of " + h.tc.Name + ": " + err.Error()}
	}
	vals, err := r.readSetting(ctx, r.db, h.tc, w.row.key)
	if err != nil {
		if errors.Is(err, errNoRow) {
			return nil, answer{state: WishWaiting, why: errNoRow.Error(), err: errNoRow}
		}
		return nil, answer{state: WishWaiting, why: err.Error()}
	}
	if a := superseded(h.tc, w, vals); a.state != 0 {
		return nil, a
	}
	vals, a := wantedRow(h.tc, w, vals)
	if a.state != 0 {
		return nil, a
	}
	row := reflect.New(h.tc.Type)
	if err := h.tc.Fill(row.Interface(), vals); err != nil {
		return nil, answer{state: WishRefused, why: "the wanted values do not fit the row: " + err.Error()}
	}
	if h.pointer {
		return row.Interface(), answer{}
	}
	return row.Elem().Interface(), answer{}
}

// readSetting reads the setting row of key as canonical values, one per
// column; errNoRow when the replica does not hold it.
func (r *Replica) readSetting(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, tc *codec.TableCodec, key string) ([]codec.Value, error) {
	args, err := keyArgs(tc, []byte(key))
	if err != nil {
		return nil, fmt.Errorf("the wish's key does not read: %w", err)
	}
	row := q.QueryRowContext(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE %s",
		strings.Join(quoteAll(tc.ColumnNames(nil)), ", "), codec.QuoteIdent(tc.Name), keyWhere(tc)), args...)
	vals, err := tc.ScanValues(row, nil, nil)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoRow
	}
	if err != nil {
		return nil, fmt.Errorf("the row does not read: %w", err)
	}
	return vals, nil
}

// superseded answers a wish of a setting applied IfUnchanged whose row is
// no longer at the version the wish was based on.
func superseded(tc *codec.TableCodec, w heldWish, vals []codec.Value) answer {
	if tc.Apply != codec.IfUnchanged || len(w.basedOn) == 0 {
		return answer{}
	}
	base, err := codec.DecodeTuple(w.basedOn, nil)
	if err != nil || len(base) != 1 {
		return answer{state: WishRefused, why: "the version the wish is based on does not read"}
	}
	have := vals[tc.VersionIndex]
	if base[0].Equal(have) {
		return answer{}
	}
	return answer{state: WishSuperseded, why: fmt.Sprintf("the row changed since the wish was made: its version is %s, the wish was based on %s",
		codec.KeyOfValues(have), codec.KeyOfValues(base[0]))}
}

// wantedRow is the row's values with the wanted values in its desired
// columns, or the refusal of a wish whose values do not fit.
func wantedRow(tc *codec.TableCodec, w heldWish, vals []codec.Value) ([]codec.Value, answer) {
	wanted, err := codec.DecodeTuple(w.wanted, nil)
	if err != nil || len(wanted) != len(w.columns) {
		return nil, answer{state: WishRefused, why: "the wanted values do not read"}
	}
	out := make([]codec.Value, len(vals))
	copy(out, vals)
	for i, name := range w.columns {
		j := -1
		for k := range tc.Columns {
			if tc.Columns[k].Name == name {
				j = k
			}
		}
		if j < 0 || !tc.Columns[j].Desired {
			return nil, answer{state: WishRefused, why: fmt.Sprintf("column %q is no desired column of %q in this build of the replica", name, tc.Name)}
		}
		if err := tc.Columns[j].CheckValue(wanted[i]); err != nil {
			return nil, answer{state: WishRefused, why: "the wanted value does not fit: " + err.Error()}
		}
		out[j] = wanted[i]
	}
	return out, answer{}
}

// movedOn is the version after v: one more, or for a time, now unless
// that is not later.
func movedOn(v codec.Value, now time.Time) codec.Value {
	switch v.Kind {
	case wire.Int:
		return wire.IntValue(v.I + 1)
	case wire.Float:
		return wire.FloatValue(v.F + 1)
	case wire.Time:
		return wire.TimeValue(max(now.UnixMicro(), v.I+1))
	}
	return v
}

// applyWish writes a wish the handler applied onto its row, its version
// moved on, and records the answer, in one transaction — unless the wish
// was replaced or withdrawn since (the answer is dropped), the row is gone
// (the wish waits for it), or, under IfUnchanged, the row changed while
// the handler ran (superseded). A write the database refuses answers the
// wish refused, with the database's reason.
func (r *Replica) applyWish(ctx context.Context, h *wishHandler, w heldWish) {
	a, err := r.applyWishTx(ctx, h, w)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		r.log.Error("magicsync/replica: writing a wish carried out failed; the wish waits", "table", w.row.tbl, "key", codec.Key(w.row.key), "wish", w.wish, "err", err)
		r.record(ctx, w, answer{state: WishWaiting, why: "the engine could not write it: " + err.Error()}, false)
		return
	}
	if a.state != 0 {
		r.record(ctx, w, a, errors.Is(a.err, errNoRow))
	}
}

// applyWishTx is applyWish's transaction. It returns the answer still to
// record when it recorded none.
func (r *Replica) applyWishTx(ctx context.Context, h *wishHandler, w heldWish) (a answer, err error) {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return answer{}, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return answer{}, err
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	var held uint64
	var state WishState
	err = conn.QueryRowContext(ctx, selectWishNumber, w.row.tbl, []byte(w.row.key)).Scan(&held, &state)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && (held != w.wish || (state != WishPending && state != WishWaiting))) {
		r.dropped(w, WishApplied)
		return answer{}, nil
	}
	if err != nil {
		return answer{}, err
	}
	tc := h.tc
	vals, err := r.readSetting(ctx, conn, tc, w.row.key)
	if err != nil {
		if errors.Is(err, errNoRow) {
			return answer{state: WishWaiting, why: errNoRow.Error(), err: errNoRow}, nil
		}
		return answer{}, err
	}
	if s := superseded(tc, w, vals); s.state != 0 {
		return s, nil
	}
	next, s := wantedRow(tc, w, vals)
	if s.state != 0 {
		return s, nil
	}
	next[tc.VersionIndex] = movedOn(vals[tc.VersionIndex], r.clock.Now())
	var set []string
	var args []any
	for i := range tc.Columns {
		if tc.Columns[i].Desired || i == tc.VersionIndex {
			set = append(set, codec.QuoteIdent(tc.Columns[i].Name)+" = ?")
			args = append(args, codec.Arg(next[i]))
		}
	}
	keys, err := keyArgs(tc, []byte(w.row.key))
	if err != nil {
		return answer{}, err
	}
	_, werr := conn.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET %s WHERE %s", codec.QuoteIdent(tc.Name), strings.Join(set, ", "), keyWhere(tc)), append(args, keys...)...)
	if werr != nil {
		if !refusal(werr) {
			return answer{}, werr
		}
		// The ROLLBACK undoes whatever the refused statement began; the
		// answer goes in a transaction of its own.
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			return answer{}, err
		}
		committed = true
		return answer{state: WishRefused, why: "the database refused the values: " + werr.Error()}, nil
	}
	if _, err := r.recordIn(ctx, conn, w, answer{state: WishApplied}, false); err != nil {
		return answer{}, err
	}
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		return answer{}, err
	}
	committed = true
	r.answered(w, WishApplied, "", true)
	return answer{}, nil
}

// record records an answer to a wish, unless the wish was replaced or
// withdrawn since: an answer to an older wish never overwrites that of a
// newer one.
func (r *Replica) record(ctx context.Context, w heldWish, a answer, needsRow bool) {
	changed, err := r.recordIn(ctx, r.db, w, a, needsRow)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Error("magicsync/replica: recording the answer to a wish failed; the wish is offered again", "table", w.row.tbl, "key", codec.Key(w.row.key), "wish", w.wish, "err", err)
		}
		return
	}
	r.answered(w, a.state, a.why, changed)
}

// recordIn records an answer through q; changed is false when the wish was
// replaced or withdrawn since, or holds that answer already.
func (r *Replica) recordIn(ctx context.Context, q interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, w heldWish, a answer, needsRow bool) (bool, error) {
	res, err := q.ExecContext(ctx, recordAnswer, w.row.tbl, []byte(w.row.key), w.wish, int(a.state), a.why, r.clock.Now().UnixMicro(), needsRow)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// answered logs an answer recorded, and has it go up at once.
func (r *Replica) answered(w heldWish, state WishState, why string, recorded bool) {
	if recorded {
		r.log.Info("magicsync/replica: a wish was answered", "table", w.row.tbl, "key", codec.Key(w.row.key), "wish", w.wish, "state", state, "reason", why)
		r.lane("main").poke()
	}
	if f := r.offers.answered; f != nil {
		f(wishAnswer{row: w.row, wish: w.wish, state: state, reason: why, recorded: recorded})
	}
}

// dropped notes the answer to a wish replaced or withdrawn while its
// handler ran.
func (r *Replica) dropped(w heldWish, state WishState) {
	r.log.Info("magicsync/replica: a wish was replaced or withdrawn while its handler ran; its answer is dropped", "table", w.row.tbl, "key", codec.Key(w.row.key), "wish", w.wish, "state", state)
	if f := r.offers.answered; f != nil {
		f(wishAnswer{row: w.row, wish: w.wish, state: state, recorded: false})
	}
}
