// Offering wishes to their handlers: the loop Run owns, which offers a wish
// once the message that brought it committed, again when asked
// (OfferWishes), at start, every WishesEvery while one waits, and after a
// backoff when an answer failed to record; each offer in a goroutine of its
// own, at most maxHandlers handlers running at once, each bounded by
// WishesTimeout; and the answers recorded by one writer, many to a
// transaction — with the row written, its version moved on, when the
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
	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/wire"
)

const (
	// maxHandlers bounds the handlers running at once. Every offer has a
	// goroutine of its own, so that a slow handler holds back no other;
	// beyond maxHandlers an offer waits for a handler to return, or to be
	// given up on at WishesTimeout, before it reads its row and calls its
	// own. A handler given up on no longer counts.
	maxHandlers = 64
	// maxBatch bounds the answers one transaction records.
	maxBatch = 256
	// keyVarsPerRead bounds the values one read of the rows that wishes
	// wait for binds (SQLite allowed 999 before 3.32).
	keyVarsPerRead = 900
)

// offers is what carrying wishes out keeps: the handlers by table, what
// asks the loop for a pass, the rows whose handler runs, and what the
// writer of the answers tells the loop.
type offers struct {
	handlers map[string]*wishHandler
	// nudge wakes the loop; all says the pass offers every wish that
	// waits, not only those that wait for their row.
	nudge chan struct{}
	// slots holds a token per handler running: maxHandlers at most.
	slots chan struct{}
	// waited tells the loop that an answer left a wish waiting; retry,
	// that an answer failed to record.
	waited, retry chan struct{}

	mu  sync.Mutex
	all bool
	// busy holds the rows whose handler runs (until it returns, even
	// after its offer gave up on it); skipped, those a pass left for it.
	busy, skipped map[wishRow]bool
	// failures counts the writes of answers that failed in a row.
	failures int

	// answered, set by tests, sees every answer recorded or dropped;
	// batched, the number of answers of each transaction committed.
	answered func(wishAnswer)
	batched  func(int)
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
	o.slots = make(chan struct{}, maxHandlers)
	o.waited = make(chan struct{}, 1)
	o.retry = make(chan struct{}, 1)
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
	signal(o.nudge)
}

// signal wakes whoever waits on c, unless it is woken already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// wrote notes how a write of answers went: a failure counts, and has the
// loop offer the wishes again after a backoff; a success starts the count
// again.
func (o *offers) wrote(failed bool) {
	o.mu.Lock()
	if failed {
		o.failures++
	} else {
		o.failures = 0
	}
	o.mu.Unlock()
	if failed {
		signal(o.retry)
	}
}

// failuresInARow is the number of writes of answers that failed in a row.
func (o *offers) failuresInARow() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failures
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
	// deadline is the wish's, UTC microseconds; 0: none.
	deadline int64
	// windowFrom and windowTo are the window of the replica's local day
	// the wish holds to, in minutes after midnight; both 0: none.
	windowFrom, windowTo int
	// vals is the row as the pass read it, when read: nil when the
	// replica does not hold it. An offer reads the row of a wish not read.
	vals []codec.Value
	read bool
}

// outcome is an answer on its way to the writer: a handler's Applied
// (apply: the row is written with the answer), or an answer to record.
type outcome struct {
	h        *wishHandler
	w        heldWish
	apply    bool
	a        answer
	needsRow bool
	// done is closed once the writer recorded the answer, or failed to.
	done chan struct{}
}

// runWishes is the loop of the offers, until ctx ends; it then waits for
// the offers under way — their handlers' context ends with ctx, and each is
// waited for until WishesTimeout — and for their answers to be recorded.
//
// A pass offers every wish not answered or waiting at start, when asked
// (OfferWishes, a message that changed a wish), every WishesEvery while a
// wish waits — whenever it came to wait — and after a backoff once an
// answer failed to record; after a message that changed none, it offers
// the wishes whose row the replica now holds.
func (r *Replica) runWishes(ctx context.Context) {
	o := &r.offers
	answers := make(chan *outcome, maxBatch)
	var writer, offers sync.WaitGroup
	writer.Go(func() { r.writeAnswers(ctx, answers) })
	defer func() {
		offers.Wait()
		close(answers)
		writer.Wait()
	}()
	pass, all := true, true // at start
	// every fires WishesEvery after a wish came to wait (or after the
	// last pass of all, when one waited then); retry, a backoff after an
	// answer failed to record.
	var every, retry <-chan time.Time
	for {
		if pass {
			o.mu.Lock()
			all = all || o.all
			o.all = false
			o.mu.Unlock()
			if err := r.offerPassTo(ctx, &offers, all, answers); err != nil && ctx.Err() == nil {
				r.log.Error("magicsync/replica: reading the wishes to offer", "err", err)
			}
			if all {
				every, retry = nil, nil
			}
			if every == nil {
				var waiting bool
				if err := r.db.QueryRowContext(ctx, anyWishWaiting).Scan(&waiting); err != nil && ctx.Err() == nil {
					r.log.Error("magicsync/replica: reading whether a wish waits", "err", err)
					waiting = true
				}
				if waiting {
					every = r.clock.After(r.settings.WishesEvery)
				}
			}
			pass, all = false, false
		}
		select {
		case <-ctx.Done():
			return
		case <-o.nudge:
			pass = true
		case <-o.waited:
			if every == nil {
				every = r.clock.After(r.settings.WishesEvery)
			}
		case <-o.retry:
			if retry == nil {
				retry = r.clock.After(r.backoff(o.failuresInARow()))
			}
		case <-every:
			pass, all = true, true
		case <-retry:
			pass, all = true, true
		}
	}
}

// offerPass makes one pass outside Run's loop, with a writer of its own
// that stops once the pass's offers are done: wg waits for both.
func (r *Replica) offerPass(ctx context.Context, wg *sync.WaitGroup, all bool) error {
	answers := make(chan *outcome, maxBatch)
	var offers sync.WaitGroup
	err := r.offerPassTo(ctx, &offers, all, answers)
	wg.Go(func() { r.writeAnswers(ctx, answers) })
	wg.Go(func() {
		offers.Wait()
		close(answers)
	})
	return err
}

// offerPassTo starts an offer of each wish to offer — every one not
// answered or waiting when all, else those waiting for a row the replica
// now holds — in wg, each sending its answer to answers. A row whose
// handler still runs is left until it returns.
func (r *Replica) offerPassTo(ctx context.Context, wg *sync.WaitGroup, all bool, answers chan<- *outcome) error {
	ws, err := r.wishesToOffer(ctx, all)
	if err != nil {
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
		wg.Go(func() { r.offer(ctx, h, w, answers) })
	}
	return nil
}

// wishesToOffer reads the wishes to offer: every one not answered or
// waiting when all, else those waiting for a row the replica now holds.
func (r *Replica) wishesToOffer(ctx context.Context, all bool) ([]heldWish, error) {
	cond := ""
	if !all {
		cond = "AND needs_row = 1"
	}
	rows, err := r.db.QueryContext(ctx, fmt.Sprintf(selectWishesToOfferFormat, cond))
	if err != nil {
		return nil, err
	}
	var ws []heldWish
	for rows.Next() {
		var w heldWish
		var cols string
		var key []byte
		if err := rows.Scan(&w.row.tbl, &key, &w.wish, &cols, &w.wanted, &w.basedOn, &w.note, &w.wishedAt, &w.deadline, &w.windowFrom, &w.windowTo); err != nil {
			rows.Close()
			return nil, err
		}
		w.row.key = string(key)
		if cols != "" {
			w.columns = strings.Split(cols, "\x1f")
		}
		ws = append(ws, w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	r.readWishRows(ctx, ws)
	if all {
		return ws, nil
	}
	kept := ws[:0]
	for _, w := range ws {
		if !w.read || w.vals != nil {
			kept = append(kept, w)
		}
	}
	return kept, nil
}

// readWishRows reads the rows of the wishes, each table's once for all its
// wishes (in reads of at most keyVarsPerRead values), so that an offer
// need not read its own. A wish whose key does not read, or whose row a
// read failed to read, is left for its offer to read.
func (r *Replica) readWishRows(ctx context.Context, ws []heldWish) {
	byTable := map[string][]int{}
	var tables []string
	for i, w := range ws {
		h := r.offers.handlers[w.row.tbl]
		if h == nil {
			continue
		}
		if _, err := keyArgs(h.tc, []byte(w.row.key)); err != nil {
			continue
		}
		if byTable[w.row.tbl] == nil {
			tables = append(tables, w.row.tbl)
		}
		byTable[w.row.tbl] = append(byTable[w.row.tbl], i)
	}
	for _, tbl := range tables {
		tc := r.offers.handlers[tbl].tc
		per := max(1, keyVarsPerRead/(1+len(tc.KeyIndex)))
		for idx := byTable[tbl]; len(idx) > 0; {
			n := min(per, len(idx))
			if err := r.readRowsOf(ctx, tc, ws, idx[:n]); err != nil {
				if ctx.Err() == nil {
					r.log.Warn("magicsync/replica: reading the rows of the wishes to offer failed; each offer reads its own", "table", tbl, "err", err)
				}
				for _, i := range idx[:n] {
					ws[i].vals, ws[i].read = nil, false
				}
			}
			idx = idx[n:]
		}
	}
}

// readRowsOf reads, in one read of table tc, the rows of ws[i] for each i
// of idx: ws[i].vals is nil when the replica does not hold it.
func (r *Replica) readRowsOf(ctx context.Context, tc *codec.TableCodec, ws []heldWish, idx []int) error {
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", 1+len(tc.KeyIndex)), ", ") + ")"
	tuples := make([]string, len(idx))
	args := make([]any, 0, len(idx)*(1+len(tc.KeyIndex)))
	for j, i := range idx {
		keys, err := keyArgs(tc, []byte(ws[i].row.key))
		if err != nil {
			return err
		}
		tuples[j] = tuple
		args = append(append(args, i), keys...)
		ws[i].vals, ws[i].read = nil, true
	}
	cols := tc.ColumnNames(nil)
	for j, c := range cols {
		cols[j] = "t." + codec.QuoteIdent(c)
	}
	match := make([]string, len(tc.KeyIndex))
	for j, k := range tc.KeyIndex {
		match[j] = fmt.Sprintf("t.%s = v.column%d", codec.QuoteIdent(tc.Columns[k].Name), j+2)
	}
	rows, err := r.db.QueryContext(ctx, fmt.Sprintf(selectRowsOfWishesFormat, strings.Join(cols, ", "), strings.Join(tuples, ", "),
		codec.QuoteIdent(tc.Name), strings.Join(match, " AND ")), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var i int
		vals, err := tc.ScanValues(indexedScanner{rows, &i}, nil, nil)
		if err != nil {
			return err
		}
		if i < 0 || i >= len(ws) {
			return fmt.Errorf("the read of the rows of the wishes returned index %d of %d", i, len(ws))
		}
		ws[i].vals = vals
	}
	return rows.Err()
}

// indexedScanner scans a row whose first column is an index into i, and
// the rest into what Scan is given.
type indexedScanner struct {
	rows *sql.Rows
	i    *int
}

func (s indexedScanner) Scan(dest ...any) error {
	return s.rows.Scan(append([]any{s.i}, dest...)...)
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
// than the wish was based on (superseded) — and sends the answer to
// answers, waiting until it is recorded. It waits for a slot first: at
// most maxHandlers handlers run at once.
func (r *Replica) offer(ctx context.Context, h *wishHandler, w heldWish, answers chan<- *outcome) {
	o := &r.offers
	released := false
	defer func() {
		if !released {
			o.release(w.row)
		}
	}()
	select {
	case o.slots <- struct{}{}:
	case <-ctx.Done():
		return
	}
	free := sync.OnceFunc(func() { <-o.slots })
	defer free()
	wanted, own := r.prepareWish(ctx, h, w)
	if ctx.Err() != nil {
		return
	}
	if own.state != 0 {
		free()
		submit(answers, &outcome{h: h, w: w, a: own, needsRow: errors.Is(own.err, errNoRow)})
		return
	}
	// The handler runs in a goroutine of its own, under a context that
	// ends at WishesTimeout or when Run stops. The offer waits for it until
	// WishesTimeout (on the replica's clock), whatever happens: a handler
	// that honours its context returns at once when Run stops, and its
	// answer is recorded. One that has not returned by then is given up on,
	// and its slot freed; its goroutine releases the row when it returns at
	// last, so that the row is never offered twice at once.
	type call struct {
		mu                  sync.Mutex
		returned, abandoned bool
	}
	c := &call{}
	result := make(chan Outcome, 1)
	hctx, cancel := context.WithTimeout(ctx, r.settings.WishesTimeout)
	defer cancel()
	timeout := r.clock.After(r.settings.WishesTimeout)
	go func() {
		result <- r.carry(hctx, h, w, wanted)
		c.mu.Lock()
		c.returned = true
		abandoned := c.abandoned
		c.mu.Unlock()
		if abandoned {
			o.release(w.row)
		}
	}()
	var out Outcome
	select {
	case out = <-result:
	case <-timeout:
		c.mu.Lock()
		if !c.returned {
			c.abandoned, released = true, true
		}
		c.mu.Unlock()
		if !released {
			out = <-result
			break
		}
		cancel() // the replica's clock may run ahead of the context's
		r.log.Warn("magicsync/replica: a wish handler did not answer in time; the wish waits", "table", w.row.tbl, "key", codec.Key(w.row.key), "wish", w.wish, "timeout", r.settings.WishesTimeout)
		out = Later(fmt.Sprintf("the handler did not answer within %v", r.settings.WishesTimeout))
	}
	free()
	// Once the handler answered, its answer is recorded even if Run stops
	// meanwhile: the writer outlives the offers.
	oc := &outcome{h: h, w: w}
	switch out.state {
	case WishApplied:
		oc.apply = true
	case WishRefused:
		if out.why == "" {
			out.why = "the handler refused it"
		}
		oc.a = answer{state: WishRefused, why: out.why}
	case WishWaiting:
		if out.why == "" {
			out.why = "the handler answered Later"
		}
		oc.a = answer{state: WishWaiting, why: out.why}
	default:
		oc.a = answer{state: WishWaiting, why: "the handler returned no outcome (the zero Outcome): it should return Applied(), Refused(why) or Later(why)"}
	}
	submit(answers, oc)
}

// submit hands an answer to the writer and waits until it is recorded (or
// failed to be).
func submit(answers chan<- *outcome, oc *outcome) {
	oc.done = make(chan struct{})
	answers <- oc
	<-oc.done
}

// carry calls the handler, turning a panic into a wait.
func (r *Replica) carry(ctx context.Context, h *wishHandler, w heldWish, wanted any) (out Outcome) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("magicsync/replica: a wish handler panicked; the wish waits", "table", w.row.tbl, "key", codec.Key(w.row.key), "wish", w.wish, "panic", p, "stack", string(debug.Stack()))
			out = Later(fmt.Sprintf("the handler panicked: %v", p))
		}
	}()
	var deadline time.Time
	if w.deadline > 0 {
		deadline = time.UnixMicro(w.deadline).UTC()
	}
	return h.h.carry(ctx, wanted, w.wish, w.note, time.UnixMicro(w.wishedAt).UTC(), deadline)
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
	now := r.clock.Now()
	if w.deadline > 0 && now.UnixMicro() > w.deadline {
		return nil, answer{state: WishExpired, why: "its deadline passed before it was carried out (by the replica's clock)"}
	}
	if !inWindow(now, w.windowFrom, w.windowTo) {
		return nil, answer{state: WishWaiting, why: fmt.Sprintf("it is held to %02d:%02d–%02d:%02d of the replica's day: it waits for it",
			w.windowFrom/60, w.windowFrom%60, w.windowTo/60, w.windowTo%60)}
	}
	if _, err := keyArgs(h.tc, []byte(w.row.key)); err != nil {
		return nil, answer{state: WishRefused, why: "the wish's key is no key of " + h.tc.Name + ": " + err.Error()}
	}
	vals := w.vals
	if !w.read {
		var err error
		if vals, err = r.readSetting(ctx, r.db, h.tc, w.row.key); err != nil && !errors.Is(err, errNoRow) {
			return nil, answer{state: WishWaiting, why: err.Error()}
		}
	}
	if vals == nil {
		return nil, answer{state: WishWaiting, why: errNoRow.Error(), err: errNoRow}
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
	row := q.QueryRowContext(ctx, selectByKey(tc), args...)
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

// writeAnswers is the writer of the answers: it takes them from answers as
// they come and records as many as wait, up to maxBatch, per transaction,
// until answers is closed and drained. Its writes outlive ctx: an answer
// given is recorded even as Run stops.
func (r *Replica) writeAnswers(ctx context.Context, answers <-chan *outcome) {
	ctx = context.WithoutCancel(ctx)
	batch := make([]*outcome, 0, maxBatch)
	for first := range answers {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < maxBatch {
			select {
			case oc, ok := <-answers:
				if !ok {
					break fill
				}
				batch = append(batch, oc)
			default:
				break fill
			}
		}
		r.writeBatch(ctx, batch)
		for _, oc := range batch {
			close(oc.done)
		}
	}
}

// written is what the writer did with one answer: recorded it (changed
// false when the wish held that answer already), dropped it (the wish was
// replaced or withdrawn since), or failed to write it (err; a wish whose
// row could not be written may still have been recorded waiting, with
// why). refused is the database's refusal of a wish's row write.
type written struct {
	a                 answer
	recorded, changed bool
	dropped           bool
	refused, err      error
}

// writeBatch records a batch of answers in one transaction, then tells
// what became of each. A batch, or an answer, that fails to record has the
// loop offer the wishes again after a backoff: a wish never stays pending
// for want of a write.
func (r *Replica) writeBatch(ctx context.Context, batch []*outcome) {
	o := &r.offers
	res, err := r.writeBatchTx(ctx, batch)
	if err != nil {
		r.log.Error("magicsync/replica: recording the answers to wishes failed; the wishes are offered again", "answers", len(batch), "err", err)
		o.wrote(true)
		return
	}
	if f := o.batched; f != nil {
		f(len(batch))
	}
	failed, waiting, changed := false, false, false
	for i, oc := range batch {
		wr := res[i]
		if wr.err != nil {
			failed = true
			r.log.Error("magicsync/replica: writing a wish carried out failed; the wish is offered again", "table", oc.w.row.tbl, "key", codec.Key(oc.w.row.key), "wish", oc.w.wish, "err", wr.err)
		}
		switch {
		case wr.dropped:
			r.dropped(oc.w, WishApplied)
		case wr.recorded:
			r.answered(oc.w, wr.a.state, wr.a.why, wr.changed)
			waiting = waiting || wr.a.state == WishWaiting
			changed = changed || wr.changed
		}
	}
	if changed {
		r.lane("main").poke()
	}
	o.wrote(failed)
	if waiting {
		signal(o.waited)
	}
}

// writeBatchTx is writeBatch's transaction: each answer in a savepoint of
// its own, so that a write the database refuses answers that wish refused
// (with the database's reason) and leaves the others be. It fails as a
// whole only when the transaction does.
func (r *Replica) writeBatchTx(ctx context.Context, batch []*outcome) ([]written, error) {
	var res []written
	err := r.engineWrite(ctx, func(conn *sql.Conn) (bool, error) {
		q := &stmtCache{conn: conn}
		defer q.close()
		res = make([]written, len(batch))
		for i, oc := range batch {
			if _, err := q.ExecContext(ctx, savepointWish); err != nil {
				return false, err
			}
			wr, err := r.writeAnswer(ctx, q, oc)
			if wr.refused != nil || err != nil {
				// Undo what the answer began, and record what became of it.
				if _, uerr := q.ExecContext(ctx, rollbackToWish); uerr != nil {
					return false, fmt.Errorf("%w; undoing it: %w", errors.Join(wr.refused, err), uerr)
				}
				var a answer
				if err != nil {
					a = answer{state: WishWaiting, why: "the engine could not write it: " + err.Error()}
				} else {
					a = answer{state: WishRefused, why: "the database refused the values: " + wr.refused.Error()}
				}
				// The database's message may quote what a host's trigger said.
				a.why = safetext.Reason(a.why)
				changed, rerr := r.recordIn(ctx, q, oc.w, a, false)
				if rerr != nil {
					if _, uerr := q.ExecContext(ctx, rollbackToWish); uerr != nil {
						return false, fmt.Errorf("%w; undoing it: %w", rerr, uerr)
					}
					wr = written{err: errors.Join(err, rerr)}
				} else {
					wr = written{a: a, recorded: true, changed: changed, err: err}
				}
			}
			if _, err := q.ExecContext(ctx, releaseWish); err != nil {
				return false, err
			}
			res[i] = wr
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// writeAnswer records one answer in the transaction of conn. An Applied
// answer writes the wish onto its row, its version moved on, with the
// answer — unless the wish was replaced or withdrawn since (the answer is
// dropped), the row is gone (the wish waits for it), or, under
// IfUnchanged, the row changed while the handler ran (superseded).
// A write the database refuses comes back as refused, the answer not
// recorded.
func (r *Replica) writeAnswer(ctx context.Context, conn *stmtCache, oc *outcome) (written, error) {
	record := func(a answer, needsRow bool) (written, error) {
		a.why = safetext.Reason(a.why)
		changed, err := r.recordIn(ctx, conn, oc.w, a, needsRow)
		if err != nil {
			return written{}, err
		}
		return written{a: a, recorded: true, changed: changed}, nil
	}
	if !oc.apply {
		return record(oc.a, oc.needsRow)
	}
	w, tc := oc.w, oc.h.tc
	var held uint64
	var state WishState
	err := conn.QueryRowContext(ctx, selectWishNumber, w.row.tbl, []byte(w.row.key)).Scan(&held, &state)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && (held != w.wish || (state != WishPending && state != WishWaiting))) {
		return written{dropped: true}, nil
	}
	if err != nil {
		return written{}, err
	}
	vals, err := r.readSetting(ctx, conn, tc, w.row.key)
	if err != nil {
		if errors.Is(err, errNoRow) {
			return record(answer{state: WishWaiting, why: errNoRow.Error(), err: errNoRow}, true)
		}
		return written{}, err
	}
	if s := superseded(tc, w, vals); s.state != 0 {
		return record(s, false)
	}
	next, s := wantedRow(tc, w, vals)
	if s.state != 0 {
		return record(s, false)
	}
	next[tc.VersionIndex] = movedOn(vals[tc.VersionIndex], r.clock.Now())
	var set []int
	var args []any
	for i := range tc.Columns {
		if tc.Columns[i].Desired || i == tc.VersionIndex {
			set = append(set, i)
			args = append(args, codec.Arg(next[i]))
		}
	}
	keys, err := keyArgs(tc, []byte(w.row.key))
	if err != nil {
		return written{}, err
	}
	if _, err := conn.ExecContext(ctx, updateByKey(tc, set), append(args, keys...)...); err != nil {
		if refusal(err) {
			return written{refused: err}, nil
		}
		return written{}, err
	}
	return record(answer{state: WishApplied}, false)
}

// stmtCache runs the statements of a batch of answers on its connection,
// each prepared once for the batch.
type stmtCache struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
}

func (c *stmtCache) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if s := c.stmts[query]; s != nil {
		return s, nil
	}
	s, err := c.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if c.stmts == nil {
		c.stmts = map[string]*sql.Stmt{}
	}
	c.stmts[query] = s
	return s, nil
}

// ExecContext runs query's statement.
func (c *stmtCache) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	s, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return s.ExecContext(ctx, args...)
}

// QueryRowContext runs query's statement for one row; a statement that
// does not prepare runs unprepared, to return its error.
func (c *stmtCache) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	s, err := c.stmt(ctx, query)
	if err != nil {
		return c.conn.QueryRowContext(ctx, query, args...)
	}
	return s.QueryRowContext(ctx, args...)
}

// close closes the statements prepared.
func (c *stmtCache) close() {
	for _, s := range c.stmts {
		_ = s.Close()
	}
}

// recordIn records an answer through q, unless the wish was replaced or
// withdrawn since: an answer to an older wish never overwrites that of a
// newer one. changed is false then, or when the wish holds that answer
// already. Its reason is recorded made safe (safetext.Reason); a caller
// that tells of the answer makes it safe first, to tell what was recorded.
func (r *Replica) recordIn(ctx context.Context, q interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, w heldWish, a answer, needsRow bool) (bool, error) {
	res, err := q.ExecContext(ctx, recordAnswer, w.row.tbl, []byte(w.row.key), w.wish, int(a.state), safetext.Reason(a.why), r.clock.Now().UnixMicro(), needsRow)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// answered logs an answer recorded; the writer has it go up.
func (r *Replica) answered(w heldWish, state WishState, why string, recorded bool) {
	if recorded {
		r.log.Info("magicsync/replica: a wish was answered", "table", w.row.tbl, "key", codec.Key(w.row.key), "wish", w.wish, "state", state, "reason", why)
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

// inWindow reports whether now, on the replica's local clock, falls in
// the window of its day from and to (minutes after midnight, from
// included, to not; past midnight when from is after to); both 0 is the
// whole day.
func inWindow(now time.Time, from, to int) bool {
	if from == 0 && to == 0 {
		return true
	}
	local := now.Local()
	m := local.Hour()*60 + local.Minute()
	if from < to {
		return m >= from && m < to
	}
	return m >= from || m < to
}
