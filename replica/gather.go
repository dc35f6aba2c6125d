// Gathering an Up: whether a lane has anything to say, the rows due to go
// up read as they are now, own rows that do not read set aside, the rows
// this replica could not take reported, the counts of what waits, and the
// digests of the catalogs, of the settings and of the answers to wishes.

package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// pendingRow is a noted write due to go up.
type pendingRow struct {
	tbl    string
	key    string
	change int64
	// unreadable is true when the row was set aside before, the engine
	// unable to read it, and has been written again or deleted since.
	unreadable bool
}

// gather builds the lane's next message and records it as sent in flight,
// or returns nil when the lane has nothing to say.
func (r *Replica) gather(ctx context.Context, l *lane, id uuid.UUID) (*outgoing, error) {
	now := r.clock.Now()
	// Most turns find nothing: they read, and leave the write lock to the
	// host.
	if say, err := r.anythingToSay(ctx, l, now); err != nil || !say {
		return nil, err
	}
	var out *outgoing
	err := r.engineWrite(ctx, func(conn *sql.Conn) (bool, error) {
		var commit bool
		var err error
		out, commit, err = r.gatherTx(ctx, conn, l, id, now)
		return commit, err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// gatherTx is gather's transaction: it returns the message, or nil when
// the lane has nothing to say, and whether to commit — not when nothing
// changed.
func (r *Replica) gatherTx(ctx context.Context, conn *sql.Conn, l *lane, id uuid.UUID, now time.Time) (*outgoing, bool, error) {
	// The host's writes gathered now may have let go of the last row
	// pointing at a retired one: it goes without waiting for the server.
	swept, err := r.sweepAfterHost(ctx, conn)
	if err != nil {
		return nil, false, err
	}
	stale := now.Add(-r.settings.ResendAfter).UnixMicro()
	due, resent, err := r.dueRows(ctx, conn, l, stale)
	if err != nil {
		return nil, false, err
	}
	up := &syncpb.Up{Resent: resent, Build: r.build}
	read, err := r.readRows(ctx, conn, due)
	if err != nil {
		return nil, false, err
	}
	if err := r.setAside(ctx, conn, read, now); err != nil {
		return nil, false, err
	}
	due = read.sent
	up.Tables = read.tables
	out := &outgoing{rows: len(due), setAside: len(read.unreadable) + len(read.dropped)}
	say := len(due) > 0
	if l.name == "main" {
		news, err := r.gatherReports(ctx, conn, l, up, out, stale, now)
		if err != nil {
			return nil, false, err
		}
		say = say || news
	}
	if !say {
		if out.setAside > 0 || swept > 0 {
			// Nothing to send, but rows were set aside (news for the
			// record, and the lane looks again at once) or swept.
			if out.setAside > 0 {
				return &outgoing{setAside: out.setAside}, true, nil
			}
			return nil, true, nil
		}
		return nil, false, nil
	}
	seq, err := r.recordSent(ctx, conn, l, up, out, due, stale, now)
	if err != nil {
		return nil, false, err
	}
	body, err := wire.EncodeToServer(&syncpb.ToServer{Replica: id[:], Lane: l.name, Sequence: seq, Up: up})
	if err != nil {
		return nil, false, fmt.Errorf("magicsync/replica: encoding lane %q's message: %w", l.name, err)
	}
	out.body = body
	// The commit is not cut short by ctx (immediate): were it reported
	// failed though it went through, the rows would stay recorded as sent
	// in a message no uplink was given, unconfirmed until ResendAfter.
	// Once committed, sendOnce sends the message or undoes its record.
	return out, true, nil
}

// gatherReports adds to up what the main lane says besides rows: the last
// message applied, the rows it could not take, the answers to wishes and,
// when due, its digests. news is true when any of it is to be said.
func (r *Replica) gatherReports(ctx context.Context, conn *sql.Conn, l *lane, up *syncpb.Up, out *outgoing, stale int64, now time.Time) (news bool, err error) {
	var last, reported, digestsAt int64
	if err := conn.QueryRowContext(ctx, selectReplicaProgress).Scan(&last, &reported, &digestsAt); err != nil {
		return false, err
	}
	up.LastApplied = uint64(last)
	out.applied = uint64(last)
	say := last > reported
	rejected, cleared, undecodable, err := r.unreported(ctx, conn, stale, l.rowCap(r.settings.MaxRows))
	if err != nil {
		return false, err
	}
	up.Rejected, up.Cleared, up.Undecodable = rejected, cleared, undecodable
	out.rejected = len(rejected) + len(cleared) + len(undecodable)
	say = say || out.rejected > 0
	// Answers to wishes share the reports' cap.
	if room := l.rowCap(r.settings.MaxRows) - out.rejected; room > 0 {
		if up.Answers, out.answersResent, err = r.answersDue(ctx, conn, out.rows > 0, up.Resent, stale, room); err != nil {
			return false, err
		}
		out.answers = len(up.Answers)
		if out.answers > 0 && out.rows == 0 {
			up.Resent = out.answersResent
		}
		say = say || out.answers > 0
	}
	if r.digestsDue(now, digestsAt) {
		if up.Digests, err = r.digests(ctx, conn, uint64(last)); err != nil {
			return false, err
		}
		out.digests = true
		say = true
	}
	return say, nil
}

// recordSent records the message gathered as sent in flight under the
// lane's next sequence, which it returns: its rows, its reports and its
// answers; and counts what is left to send.
func (r *Replica) recordSent(ctx context.Context, conn *sql.Conn, l *lane, up *syncpb.Up, out *outgoing, due []pendingRow, stale int64, now time.Time) (uint64, error) {
	var seq uint64
	if err := conn.QueryRowContext(ctx, nextLaneSeq, l.name).Scan(&seq); err != nil {
		return 0, err
	}
	out.seq = seq
	if err := markSent(ctx, conn, l.name, seq, now.UnixMicro(), due); err != nil {
		return 0, err
	}
	if out.rejected > 0 {
		// The same rows unreported read, in the same transaction.
		if _, err := conn.ExecContext(ctx, markReported,
			seq, now.UnixMicro(), stale, l.rowCap(r.settings.MaxRows)); err != nil {
			return 0, err
		}
	}
	if out.answers > 0 {
		// The same answers answersDue read, in the same transaction.
		if _, err := conn.ExecContext(ctx, markAnswersSent,
			seq, now.UnixMicro(), out.answersResent, stale, out.answers); err != nil {
			return 0, err
		}
	}
	// Counted once the message's rows are recorded as sent.
	if err := r.counts(ctx, conn, l, up); err != nil {
		return 0, err
	}
	return seq, nil
}

// sweepAfterHost sweeps the retained rows (see Replica.sweep) in gather's
// transaction, and returns how many it deleted or forgot. A replica
// without a catalog declaring Retired reads nothing; one keeping no
// retained row reads one empty table. A delete the database refuses
// leaves the row to the sweeps of the server's messages (r.unswept); one
// that undid the whole transaction fails gather, which tries again
// without that row.
func (r *Replica) sweepAfterHost(ctx context.Context, conn *sql.Conn) (int, error) {
	if len(r.retiring) == 0 {
		return 0, nil
	}
	marked := false
	n, err := r.sweep(ctx, conn, func(ctx context.Context, tc *codec.TableCodec, key []byte, args []any) (bool, error) {
		id := tc.Name + "\x00" + string(key)
		if _, skip := r.unswept.Load(id); skip {
			return false, nil
		}
		if !marked {
			if _, err := conn.ExecContext(ctx, markSweeping); err != nil {
				return false, err
			}
			marked = true
		}
		if _, err := conn.ExecContext(ctx, savepointRow); err != nil {
			return false, err
		}
		_, delErr := conn.ExecContext(ctx, deleteByKey(tc), args...)
		if delErr == nil {
			_, err := conn.ExecContext(ctx, releaseRow)
			return err == nil, err
		}
		r.unswept.Store(id, true)
		r.log.Warn("magicsync/replica: a retired row nothing points at stays: the database refused its delete",
			"table", tc.Name, "key", codec.Key(key), "reason", delErr)
		var applying int
		if err := conn.QueryRowContext(ctx, selectApplying).Scan(&applying); err != nil || applying != 1 {
			return false, fmt.Errorf("magicsync/replica: deleting a retired row of %q undid gather's transaction: %w", tc.Name, delErr)
		}
		if _, err := conn.ExecContext(ctx, rollbackToRow); err != nil {
			return false, err
		}
		_, err := conn.ExecContext(ctx, releaseRow)
		return false, err
	})
	if err != nil {
		return 0, fmt.Errorf("magicsync/replica: sweeping the retired rows: %w", err)
	}
	if marked {
		if _, err := conn.ExecContext(ctx, unmarkSweeping); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// anythingToSay reads, without taking the write lock, whether the lane has
// something to send. gather takes the lock only then: a lock taken on
// every idle turn of every lane would make the host's own writes wait, or
// fail as "database is locked" without a busy timeout.
func (r *Replica) anythingToSay(ctx context.Context, l *lane, now time.Time) (bool, error) {
	stale := now.Add(-r.settings.ResendAfter).UnixMicro()
	var args []any
	pending := "0"
	if len(l.tables) > 0 {
		pending = fmt.Sprintf(anyPendingDueFormat, placeholders(len(l.tables)))
		for _, t := range l.tables {
			args = append(args, t)
		}
		args = append(args, stale)
	}
	if l.name != "main" {
		var say bool
		err := r.db.QueryRowContext(ctx, fmt.Sprintf(selectValueFormat, pending), args...).Scan(&say)
		return say, err
	}
	var say bool
	var digestsAt int64
	err := r.db.QueryRowContext(ctx, fmt.Sprintf(mainHasSayFormat, pending),
		append(args, stale, stale)...).Scan(&say, &digestsAt)
	if err != nil {
		return false, err
	}
	return say || r.digestsDue(now, digestsAt), nil
}

// digestsDue says whether the digests are due, last sent at digestsAt.
// They are due too when they were sent after now: the clock stepped back
// since, and waiting for it to catch up would switch the safety net off
// for as long as the step.
func (r *Replica) digestsDue(now time.Time, digestsAt int64) bool {
	since := now.Sub(time.UnixMicro(digestsAt))
	return r.settings.DigestsEvery > 0 && (since < 0 || since >= r.settings.DigestsEvery)
}

// dueRows lists the lane's rows to send: never sent, written again since
// they were sent, or sent too long ago without a confirmation. Rows sent
// again after a provisioning go in messages of their own.
func (r *Replica) dueRows(ctx context.Context, conn *sql.Conn, l *lane, stale int64) ([]pendingRow, bool, error) {
	if len(l.tables) == 0 {
		return nil, false, nil
	}
	in := placeholders(len(l.tables))
	for _, resent := range []int{1, 0} {
		args := make([]any, 0, len(l.tables)+3)
		for _, t := range l.tables {
			args = append(args, t)
		}
		args = append(args, resent, stale, l.rowCap(r.settings.MaxRows))
		rows, err := conn.QueryContext(ctx, fmt.Sprintf(selectDueFormat, in), args...)
		if err != nil {
			return nil, false, err
		}
		var due []pendingRow
		for rows.Next() {
			var p pendingRow
			if err := rows.Scan(&p.tbl, &p.key, &p.change, &p.unreadable); err != nil {
				rows.Close()
				return nil, false, err
			}
			due = append(due, p)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, false, err
		}
		if len(due) > 0 {
			return due, resent == 1, nil
		}
	}
	return nil, false, nil
}

// read is what gather read of the due rows: the tables' changes to send
// and the rows they carry, and what it set aside.
type read struct {
	tables []*syncpb.TableChanges
	// sent are the due rows the changes carry.
	sent []pendingRow
	// unreadable are own rows the engine cannot read, with why.
	unreadable []unreadableRow
	// dropped are deletes of rows whose key the engine cannot read: the
	// server never had such a row, so there is nothing to send.
	dropped []pendingRow
	// cleared are rows set aside before that are now sent or dropped.
	cleared []pendingRow
}

// unreadableRow is an own row whose values the engine cannot read: written
// behind its back (the sqlite3 CLI, another program) with a value its
// column's type cannot hold.
type unreadableRow struct {
	pendingRow
	// key is the row's canonical key, or, when the key itself does not
	// read, a tuple of its values as text, to name it.
	key    codec.Key
	reason string
}

// readRows reads the due rows as they are now: upserts of rows that exist,
// deletes of rows that do not; rows that do not read are set apart.
func (r *Replica) readRows(ctx context.Context, conn *sql.Conn, due []pendingRow) (*read, error) {
	out := &read{sent: make([]pendingRow, 0, len(due))}
	for start := 0; start < len(due); {
		end := start
		for end < len(due) && due[end].tbl == due[start].tbl {
			end++
		}
		tc, err := r.codecs.Table(due[start].tbl)
		if err != nil {
			return nil, err
		}
		if err := r.readTable(ctx, conn, tc, due[start:end], out); err != nil {
			return nil, fmt.Errorf("magicsync/replica: reading %q to send: %w", tc.Name, err)
		}
		start = end
	}
	for _, p := range append(out.sent, out.dropped...) {
		if p.unreadable {
			out.cleared = append(out.cleared, p)
		}
	}
	return out, nil
}

// upColumns are the columns of an own table that go up: all but generated.
func upColumns(tc *codec.TableCodec) []int {
	var idx []int
	for i, c := range tc.Columns {
		if !c.Generated {
			idx = append(idx, i)
		}
	}
	return idx
}

// readTable reads the due rows of one table by their noted keys, in
// batches, and matches each row found with its note by its canonical key.
// Rows are never looked up by the rowid a note kept: a table rebuilt the
// way SQLite recommends (create, copy, drop, rename) numbers its rows
// anew, and a rowid could then name another row. A row whose key or
// values do not read is set apart, never sent: one such row must not
// block the lane.
func (r *Replica) readTable(ctx context.Context, conn *sql.Conn, tc *codec.TableCodec, due []pendingRow, out *read) error {
	cols := upColumns(tc)
	ch := &syncpb.TableChanges{Table: tc.Name, Columns: tc.ColumnNames(cols)}
	nk := len(tc.KeyIndex)
	keys := make([]codec.Key, len(due))
	var readable []int
	for i, p := range due {
		key, raw, err := parseNotedKey(tc, p.key)
		if err != nil {
			bad, err := r.badKey(ctx, conn, tc, p, raw, err)
			if err != nil {
				return err
			}
			if bad == nil {
				out.dropped = append(out.dropped, p)
			} else {
				out.unreadable = append(out.unreadable, *bad)
			}
			continue
		}
		keys[i] = key
		readable = append(readable, i)
	}
	found := map[codec.Key][]codec.Value{}
	failed := map[codec.Key]string{}
	query := selectByKeys(tc, cols)
	full := make([]codec.Value, len(tc.Columns))
	raw := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	// Well below SQLite's smallest limit of bound parameters (999).
	per := max(1, 900/nk)
	for start := 0; start < len(readable); start += per {
		part := readable[start:min(start+per, len(readable))]
		args := make([]any, 0, len(part)*nk)
		for _, i := range part {
			vals, err := parseQuoted(due[i].key)
			if err != nil {
				return fmt.Errorf("the noted key %s: %w", due[i].key, err)
			}
			args = append(args, vals...)
		}
		rows, err := conn.QueryContext(ctx, query(len(part)), args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return err
			}
			vals := make([]codec.Value, len(cols))
			bad := ""
			for i, c := range cols {
				v, err := tc.Columns[c].Canonical(raw[i])
				if err != nil && bad == "" {
					bad = unreadableValue(tc, c, raw[i])
				}
				vals[i], full[c] = v, v
			}
			if bad != "" {
				// The key read (else parseNotedKey refused it), so it names
				// the row.
				key, err := keyOfRaw(tc, cols, raw)
				if err != nil {
					continue
				}
				failed[key] = bad
				continue
			}
			found[tc.KeyOfRow(full)] = vals
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	for _, i := range readable {
		p, key := due[i], keys[i]
		if why, bad := failed[key]; bad {
			out.unreadable = append(out.unreadable, unreadableRow{pendingRow: p, key: key, reason: why})
			continue
		}
		out.sent = append(out.sent, p)
		vals := found[key]
		if vals == nil {
			ch.Deletes = append(ch.Deletes, []byte(key))
			continue
		}
		ch.Upserts = append(ch.Upserts, tc.EncodeRow(nil, vals, nil))
		ch.UpsertKeys = append(ch.UpsertKeys, []byte(key))
	}
	if len(ch.Upserts)+len(ch.Deletes) > 0 {
		out.tables = append(out.tables, ch)
	}
	return nil
}

// keyOfRaw is the canonical key of a row read as raw values of cols.
func keyOfRaw(tc *codec.TableCodec, cols []int, raw []any) (codec.Key, error) {
	vals := make([]codec.Value, len(tc.KeyIndex))
	for i, k := range tc.KeyIndex {
		j := slices.Index(cols, k)
		if j < 0 {
			return "", fmt.Errorf("key column %q is not read", tc.Columns[k].Name)
		}
		v, err := tc.Columns[k].Canonical(raw[j])
		if err != nil {
			return "", err
		}
		vals[i] = v
	}
	return codec.KeyOfValues(vals...), nil
}

// badKey sets apart a noted row whose key does not read: it is unreadable
// while the row exists, and a delete with nothing to send once it is gone.
func (r *Replica) badKey(ctx context.Context, conn *sql.Conn, tc *codec.TableCodec, p pendingRow, raw []any, keyErr error) (*unreadableRow, error) {
	if raw == nil {
		// The note itself does not parse: no trigger of the engine writes
		// such a note.
		return nil, fmt.Errorf("the noted key %s: %w", p.key, keyErr)
	}
	var n int
	if err := conn.QueryRowContext(ctx, countByKey(tc), raw...).Scan(&n); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	named := make([]codec.Value, len(raw))
	reason := ""
	for i, v := range raw {
		// Text that is not UTF-8 would make a key no message can carry.
		named[i] = wire.TextValue(safetext.Text(fmt.Sprint(v), maxNamedKeyValue))
		if c := tc.Columns[tc.KeyIndex[i]]; reason == "" {
			if _, err := c.Canonical(v); err != nil {
				reason = unreadableValue(tc, tc.KeyIndex[i], v)
			}
		}
	}
	if reason == "" {
		reason = "its key does not read: " + keyErr.Error()
	}
	return &unreadableRow{pendingRow: p, key: codec.KeyOfValues(named...), reason: reason}, nil
}

// maxNamedKeyValue bounds each value of the key that names an own row
// whose key does not read.
const maxNamedKeyValue = 256

// unreadableValue says why an own row's value at column c cannot be read.
func unreadableValue(tc *codec.TableCodec, c int, v any) string {
	col := tc.Columns[c]
	shown := fmt.Sprintf("%v", v)
	if b, ok := v.([]byte); ok {
		shown = fmt.Sprintf("%q", b)
	} else if s, ok := v.(string); ok {
		shown = fmt.Sprintf("%q", s)
	}
	if len(shown) > 64 {
		shown = shown[:61] + "..."
	}
	return fmt.Sprintf("the engine cannot read this row: column %q holds %s (%T), which is no %v for %s.%s; write the row again with a value of its type, or delete it",
		col.Name, shown, v, col.Kind, tc.Type, col.Field)
}

// parseNotedKey reads a key as the note triggers wrote it into its
// canonical form. raw holds the note's values when they parse, even if
// they are no values of the key's columns.
func parseNotedKey(tc *codec.TableCodec, text string) (codec.Key, []any, error) {
	raw, err := parseQuoted(text)
	if err != nil {
		return "", nil, err
	}
	if len(raw) != len(tc.KeyIndex) {
		return "", nil, fmt.Errorf("%d values for a key of %d columns", len(raw), len(tc.KeyIndex))
	}
	vals := make([]codec.Value, len(raw))
	for i, src := range raw {
		v, err := tc.Columns[tc.KeyIndex[i]].Canonical(src)
		if err != nil {
			return "", raw, err
		}
		vals[i] = v
	}
	return codec.KeyOfValues(vals...), raw, nil
}

// parseQuoted reads values as notedValue writes them, separated by
// commas: as SQLite's quote() writes them (NULL, integers, reals, 'text'
// and X'blob'), and a text holding a NUL as TX'its bytes'.
func parseQuoted(s string) ([]any, error) {
	var out []any
	for {
		if s == "" {
			return nil, errors.New("an empty value")
		}
		var v any
		var rest string
		switch {
		case s[0] == '\'':
			var b strings.Builder
			i := 1
			for {
				j := strings.IndexByte(s[i:], '\'')
				if j < 0 {
					return nil, errors.New("an unterminated text")
				}
				b.WriteString(s[i : i+j])
				i += j + 1
				if i < len(s) && s[i] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				break
			}
			v, rest = b.String(), s[i:]
		case len(s) > 1 && (s[0] == 'X' || s[0] == 'x') && s[1] == '\'':
			b, r, err := parseQuotedBlob(s)
			if err != nil {
				return nil, err
			}
			v, rest = b, r
		case len(s) > 2 && s[0] == 'T' && s[1] == 'X' && s[2] == '\'':
			// A text holding a NUL, noted by its bytes (notedValue).
			b, r, err := parseQuotedBlob(s[1:])
			if err != nil {
				return nil, fmt.Errorf("a text holding a NUL: %w", err)
			}
			v, rest = string(b), r
		default:
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			tok := s[:end]
			rest = s[end:]
			switch {
			case tok == "NULL":
				v = nil
			case strings.ContainsAny(tok, ".eE") || tok == "Inf" || tok == "-Inf":
				// quote() writes an infinity as 9.0e+999, which ParseFloat
				// reads as one while it reports the range.
				f, err := strconv.ParseFloat(tok, 64)
				if err != nil && !errors.Is(err, strconv.ErrRange) {
					return nil, fmt.Errorf("a real %q: %w", tok, err)
				}
				v = f
			default:
				i, err := strconv.ParseInt(tok, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("an integer %q: %w", tok, err)
				}
				v = i
			}
		}
		out = append(out, v)
		if rest == "" {
			return out, nil
		}
		if rest[0] != ',' {
			return nil, fmt.Errorf("%q after a value", rest)
		}
		s = rest[1:]
	}
}

// parseQuotedBlob reads a blob as quote() writes it (X'0a1b') at the
// start of s, and returns its bytes and what follows it.
func parseQuotedBlob(s string) ([]byte, string, error) {
	end := strings.IndexByte(s[2:], '\'')
	if end < 0 {
		return nil, "", errors.New("an unterminated blob")
	}
	hex := s[2 : 2+end]
	if len(hex)%2 != 0 {
		return nil, "", fmt.Errorf("a blob of %d hex digits, not whole bytes", len(hex))
	}
	b := make([]byte, len(hex)/2)
	for i := range b {
		n, err := strconv.ParseUint(hex[2*i:2*i+2], 16, 8)
		if err != nil {
			return nil, "", fmt.Errorf("a blob: %w", err)
		}
		b[i] = byte(n)
	}
	return b, s[2+end+1:], nil
}

// setAside records, in gather's transaction, the rows read set apart:
// unreadable ones wait, reported, until they are written again or
// deleted; deletes of rows whose key never read are forgotten; rows set
// aside before and now sent or forgotten have their report cleared, which
// goes up in turn.
func (r *Replica) setAside(ctx context.Context, conn *sql.Conn, rd *read, now time.Time) error {
	if len(rd.unreadable)+len(rd.dropped)+len(rd.cleared) == 0 {
		return nil
	}
	for _, p := range rd.cleared {
		if _, err := conn.ExecContext(ctx, clearUnreadable, p.tbl, p.key); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, clearUnreadableReport,
			p.tbl, p.key); err != nil {
			return err
		}
	}
	for _, p := range rd.dropped {
		if _, err := conn.ExecContext(ctx, deleteDroppedNote, p.tbl, p.key, p.change); err != nil {
			return err
		}
	}
	// A report names the last message applied when it was made: a
	// provisioning that ends after it has the row read again, and
	// reported again if it still does not read, so the server forgets
	// reports older than the provisioning.
	var last int64
	if len(rd.unreadable) > 0 {
		if err := conn.QueryRowContext(ctx, selectLastApplied).Scan(&last); err != nil {
			return err
		}
	}
	for _, u := range rd.unreadable {
		r.log.Warn("magicsync/replica: an own row cannot be read; it is set aside until it is written again or deleted", "table", u.tbl, "key", u.key, "reason", u.reason)
		if _, err := conn.ExecContext(ctx, markUnreadable,
			u.tbl, u.pendingRow.key); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, deleteUnreadableReport, u.tbl, u.pendingRow.key); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, insertUnreadableReport,
			u.tbl, []byte(u.key), safetext.Reason(u.reason), last, now.UnixMicro(), u.pendingRow.key); err != nil {
			return err
		}
	}
	return nil
}

// unreported lists the rows this replica could not take that are due to be
// reported — never reported, or reported before stale and not confirmed —
// the reports of own rows set aside that it cleared since, and the
// messages it could not decode (ReportUndecodable: a report naming no
// table).
func (r *Replica) unreported(ctx context.Context, conn *sql.Conn, stale int64, limit int) (rejected, cleared []*syncpb.Rejected, undecodable []*syncpb.Undecodable, err error) {
	rows, err := conn.QueryContext(ctx, selectUnreported, stale, limit)
	if err != nil {
		return nil, nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		rj := &syncpb.Rejected{}
		var wasCleared bool
		if err := rows.Scan(&rj.Table, &rj.Key, &rj.Reason, &rj.Message, &wasCleared); err != nil {
			return nil, nil, nil, err
		}
		safeReport(rj)
		switch {
		case rj.Table == "":
			undecodable = append(undecodable, &syncpb.Undecodable{Message: rj.Message, Reason: rj.Reason})
		case wasCleared:
			rj.Reason = ""
			cleared = append(cleared, rj)
		default:
			rejected = append(rejected, rj)
		}
	}
	return rejected, cleared, undecodable, rows.Err()
}

// safeReport makes a report one a message can carry, whatever an older
// build recorded: its table and reason safe text, and its key left out
// when it is no tuple the wire takes. Such a key only named the row for
// people to see; its clearing leaves it out the same way, so the server
// still matches the two.
func safeReport(rj *syncpb.Rejected) {
	rj.Table = safetext.Text(rj.Table, safetext.MaxReason)
	rj.Reason = safetext.Reason(rj.Reason)
	if len(rj.Key) > 0 {
		if _, err := wire.ValidateTuple(rj.Key); err != nil {
			rj.Key = nil
		}
	}
}

// counts tells the server how many rows of each of the lane's tables wait
// to go up after this message, and how many wait in the backlog. It runs
// once the message's rows are recorded as sent: rows sent and not yet
// confirmed are not counted — they are on the server, or will be sent
// again and counted then — so the figure is exact, and is 0 when the
// message carries all there was to send: the server shows 0 from the last
// message on, with no message of its own once the rows are filed.
func (r *Replica) counts(ctx context.Context, conn *sql.Conn, l *lane, up *syncpb.Up) error {
	rows, err := conn.QueryContext(ctx, countUnsentAndHeld)
	if err != nil {
		return err
	}
	defer rows.Close()
	unsent := map[string]int{}
	for rows.Next() {
		var tbl string
		var n, held int
		if err := rows.Scan(&tbl, &n, &held); err != nil {
			return err
		}
		up.Backlog += uint64(held)
		unsent[tbl] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, tbl := range l.tables {
		up.Unsent = append(up.Unsent, &syncpb.Count{Table: tbl, Rows: uint64(unsent[tbl])})
	}
	return nil
}

// downColumns are the columns of a catalog the server sends, and that
// digests cover: all but generated and replica_owned.
func downColumns(tc *codec.TableCodec) []int {
	var idx []int
	for i, c := range tc.Columns {
		if !c.Generated && !c.ReplicaOwned {
			idx = append(idx, i)
		}
	}
	return idx
}

// digests fingerprints what the replica holds, as of message asOf: every
// catalog, less the rows it could not take (catalogDigest); every setting
// none of whose rows is on its way up, less the rows set aside
// (settingDigest); and the answers to wishes the server confirmed, while
// none is on its way up. It runs in gather's transaction, so that what it
// finds on its way up is what the digest leaves out.
func (r *Replica) digests(ctx context.Context, conn *sql.Conn, asOf uint64) ([]*syncpb.Digest, error) {
	var out []*syncpb.Digest
	without, wait, err := r.refusedCatalogRows(ctx, conn)
	if err != nil {
		return nil, err
	}
	for _, tc := range r.catalogs {
		if wait[tc.Name] {
			continue
		}
		d, err := tableDigest(ctx, conn, tc, downColumns(tc), asOf, without[tc.Name])
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	for _, tc := range r.own {
		if tc.Mirror != codec.Setting {
			continue
		}
		d, err := r.settingDigest(ctx, conn, tc, asOf)
		if err != nil {
			return nil, err
		}
		if d != nil {
			out = append(out, d)
		}
	}
	d, err := answersDigest(ctx, conn, asOf)
	if err != nil {
		return nil, err
	}
	if d != nil {
		out = append(out, d)
	}
	return out, nil
}

// tableDigest fingerprints the rows of a table: the tuples of its columns
// at cols, each as the engine sends it (down for a catalog, up for an own
// table), but those whose canonical key is in without. An own table's
// rows set aside (settingDigest) are left out by the query itself, for
// some may not read.
func tableDigest(ctx context.Context, conn *sql.Conn, tc *codec.TableCodec, cols []int, asOf uint64, without map[string]bool) (*syncpb.Digest, error) {
	q := selectColumns(tc, cols)
	var args []any
	switch {
	case tc.Mirror == codec.Catalog && tc.Retired != "":
		// The server counts no retired row: it sends none, and a row the
		// replica keeps retired (sync_retained) is not one the server
		// holds it to have.
		q += fmt.Sprintf(" WHERE coalesce(%s, 0) = 0", codec.QuoteIdent(tc.Retired))
	case tc.Mirror != codec.Catalog:
		q += fmt.Sprintf(" WHERE %s NOT IN (%s)", notedKey(tc, codec.QuoteIdent(tc.Name)), selectSetAsideKeys)
		args = append(args, tc.Name)
	}
	// Where the key's columns are among those read, for without.
	var keyAt []int
	if len(without) > 0 {
		for _, k := range tc.KeyIndex {
			keyAt = append(keyAt, slices.Index(cols, k))
		}
	}
	rows, err := conn.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var sum digest.Sum
	var vals, key []codec.Value
	var buf []byte
	for rows.Next() {
		vals, err = tc.ScanValues(rows, cols, vals)
		if err != nil {
			return nil, err
		}
		if keyAt != nil {
			key = key[:0]
			for _, at := range keyAt {
				key = append(key, vals[at])
			}
			if without[string(codec.KeyOfValues(key...))] {
				continue
			}
		}
		buf = tc.EncodeRow(buf[:0], vals, nil)
		sum.Add(buf)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return &syncpb.Digest{Table: tc.Name, Sum: sum.Bytes(), Rows: sum.Rows(), AsOf: asOf}, nil
}

// settingDigest fingerprints the rows of a setting as they go up (every
// column but generated ones), or returns nil while one of its rows is on
// its way up, or a report of one it set aside is not yet confirmed: the
// server's copy differs then, as it should. Rows set aside — refused for
// good by the server, or that do not read — are left out, as the server
// leaves out the rows it records as refused or not read, so that one bad
// row does not switch its table's digest off. A row that does not read
// and is not set aside yet leaves the table without a digest.
func (r *Replica) settingDigest(ctx context.Context, conn *sql.Conn, tc *codec.TableCodec, asOf uint64) (*syncpb.Digest, error) {
	var noted bool
	if err := conn.QueryRowContext(ctx, anyInFlight, tc.Name).Scan(&noted); err != nil {
		return nil, err
	}
	if noted {
		return nil, nil
	}
	d, err := tableDigest(ctx, conn, tc, upColumns(tc), asOf, nil)
	if errors.Is(err, codec.ErrBadValue) {
		r.log.Warn("magicsync/replica: a setting's row does not read; its table goes without a digest", "table", tc.Name, "err", err)
		return nil, nil
	}
	return d, err
}

// answersDigest fingerprints the answers to wishes the server confirmed,
// or returns nil while an answer is on its way up (or set aside): the
// server's record of the answers differs then, as it should.
func answersDigest(ctx context.Context, conn *sql.Conn, asOf uint64) (*syncpb.Digest, error) {
	var unfiled bool
	if err := conn.QueryRowContext(ctx, anyAnswerUnfiled).Scan(&unfiled); err != nil {
		return nil, err
	}
	if unfiled {
		return nil, nil
	}
	rows, err := conn.QueryContext(ctx, selectFiledAnswers)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var sum digest.Sum
	for rows.Next() {
		var tbl string
		var key []byte
		var wish int64
		var state int
		if err := rows.Scan(&tbl, &key, &wish, &state); err != nil {
			return nil, err
		}
		sum.Add(codec.AnswerTuple(tbl, key, uint64(wish), state))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return &syncpb.Digest{Table: codec.AnswersTable, Sum: sum.Bytes(), Rows: sum.Rows(), AsOf: asOf}, nil
}
