package server

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// filing.go holds the filing of an upload's rows: each table's upserts and
// deletes checked against the declaration and against what the server holds
// (the newer write wins), written with a few statements a table, and the rows
// refused on the way, kept within what one confirmation can carry.

// fileRows files the upload's rows, table by table, and returns how many
// were filed, in all and by table (rows sent again after a provisioning
// are not counted by table: they were when first filed).
func (s *Server) fileRows(ctx context.Context, tx pgx.Tx, replica uuid.UUID, up *syncpb.Up, rf *refusals, fk *filedKeys) (int64, map[string]int64, error) {
	counts := map[string]int64{}
	var rows int64 // filed, for Stats
	for _, tch := range up.Tables {
		n, err := s.fileTable(ctx, tx, replica, tch, up.Resent, rf, fk)
		if errors.Is(err, ErrTooLarge) {
			return 0, nil, fmt.Errorf("magicsync/server: filing from %s: %w", replica, err)
		}
		if err != nil {
			return 0, nil, fmt.Errorf("magicsync/server: filing %q from %s: %w", tch.Table, replica, err)
		}
		rows += n
		if !up.Resent {
			// Rows sent again after a provisioning were counted when first filed.
			counts[tch.Table] += n
		}
	}
	return rows, counts, nil
}

// MaxUploadRows bounds the rows one upload (ToServer) may hold, counted
// together: the upserts and deletes of every table, the rows it reports
// rejected and cleared, its digests, answers and unsent counts. Receive
// refuses a larger one with ErrTooLarge, before decoding it. A replica
// sends at most 5,000 rows and 5,000 reports by default
// (replica.Settings.MaxRows).
const MaxUploadRows = 50_000

// ErrTooLarge is wrapped by the error about an upload larger than the server
// takes at once: more rows than MaxUploadRows, or rows whose refusals would
// not fit in one confirmation of Options.MaxMessageBytes. It wraps
// ErrPermanent: the message is never filed, and nothing of it was written.
// The replica sends its rows again in smaller messages (the HTTP transport
// answers 413).
var ErrTooLarge = fmt.Errorf("%w: too large", ErrPermanent)

// maxReasonBytes bounds the reason kept or sent for one row refused.
const maxReasonBytes = 512

// clip makes text a replica sent safe to keep and to send back
// (safetext.Text): valid UTF-8, no NUL — which PostgreSQL refuses, failing
// the whole upload — and at most n bytes, cut on a character boundary and
// marked.
func clip(s string, n int) string { return safetext.Text(s, n) }

// refusals gathers the rows an upload's filing refuses, for its Filed,
// within budget bytes encoded.
type refusals struct {
	list   []*syncpb.Rejected
	size   int
	budget int
	bound  int // the bound on a message the budget comes from
	// why counts the rows refused by reason, for Stats.
	why [RefusalReasons]int
}

// rejectedSize is the bytes a refused row takes in a Filed.
func rejectedSize(table string, key []byte, reason string) int {
	n := protowire.SizeTag(1) + protowire.SizeBytes(len(table)) + protowire.SizeTag(3) + protowire.SizeBytes(len(reason))
	if len(key) > 0 {
		n += protowire.SizeTag(2) + protowire.SizeBytes(len(key))
	}
	// And the sequence of its upload, which a merged Filed may add.
	n += protowire.SizeTag(4) + protowire.SizeVarint(1<<62)
	return protowire.SizeTag(3) + protowire.SizeBytes(n)
}

// tooLarge is the error about refusals beyond the budget.
func (rf *refusals) tooLarge() error {
	return fmt.Errorf("%w: the rows it refuses (%d so far) would not fit in one confirmation of %d bytes (Options.MaxMessageBytes): send its rows in smaller uploads",
		ErrTooLarge, len(rf.list)+1, rf.bound)
}

// add refuses a row, or returns an error wrapping ErrTooLarge when its
// refusal does not fit.
func (rf *refusals) add(why RefusalReason, table string, key []byte, reason string) error {
	reason = clip(reason, maxReasonBytes)
	n := rejectedSize(table, key, reason)
	if rf.size+n > rf.budget {
		return rf.tooLarge()
	}
	rf.size += n
	rf.why[why]++
	rf.list = append(rf.list, &syncpb.Rejected{Table: table, Key: key, Reason: reason})
	return nil
}

// all refuses every row of a table's part, for one reason, if all fit.
func (rf *refusals) all(why RefusalReason, tch *syncpb.TableChanges, reason string) error {
	reason = clip(reason, maxReasonBytes)
	n := 0
	for _, ks := range [][][]byte{tch.UpsertKeys, tch.Deletes} {
		for _, k := range ks {
			n += rejectedSize(tch.Table, k, reason)
		}
	}
	if rf.size+n > rf.budget {
		return rf.tooLarge()
	}
	for _, ks := range [][][]byte{tch.UpsertKeys, tch.Deletes} {
		for _, k := range ks {
			if err := rf.add(why, tch.Table, k, reason); err != nil {
				return err
			}
		}
	}
	return nil
}

// pendingRow is one row to file.
type pendingRow struct {
	key  []byte
	text []*string // per filed column
	ver  codec.Value
}

// fileTable files one table's part, adding the rows it refuses to rf and
// the keys it files to fk; it returns how many rows it wrote.
func (s *Server) fileTable(ctx context.Context, tx pgx.Tx, replica uuid.UUID, tch *syncpb.TableChanges, resent bool, rf *refusals, fk *filedKeys) (int64, error) {
	t := s.m.byName[tch.Table]
	switch {
	case t == nil:
		return 0, rf.all(RefusedUndeclared, tch, fmt.Sprintf("table %q is not declared on the server", clip(tch.Table, 64)))
	case t.catalog:
		return 0, rf.all(RefusedCatalog, tch, fmt.Sprintf("%q is a catalog: the server writes it, and files no replica's writes to it", tch.Table))
	}
	pos, filedCols, why, problem := messageColumns(t.tc, tch)
	if problem != "" {
		return 0, rf.all(why, tch, problem)
	}
	tf := &tableFiling{t: t, tch: tch, replica: replica, me: codec.Value{Kind: wire.UUID, U: replica}, rf: rf}
	rows := tf.upserts(pos, filedCols)
	if tf.over != nil {
		return 0, tf.over
	}
	var filed int64
	if len(rows) > 0 {
		n, err := s.upsert(ctx, tx, t, tch.Columns, pos, filedCols, rows, resent, rf)
		if err != nil {
			return 0, err
		}
		filed += n
		for i := range rows {
			fk.add(t.name, rows[i].key)
		}
	}
	dels := tf.deletes()
	if tf.over != nil {
		return 0, tf.over
	}
	if len(dels) > 0 {
		args, err := t.keyArrays(dels)
		if err != nil {
			return 0, err
		}
		tag, err := tx.Exec(ctx, t.deleteByKeys(), args...)
		if err != nil {
			return 0, fmt.Errorf("deleting: %w", err)
		}
		filed += tag.RowsAffected()
		fk.add(t.name, dels...)
	}
	return filed, nil
}

// messageColumns maps the message's columns onto the table's: pos[i] is
// the table's column of the message's column i (-1: none, only for a
// message of deletes alone), filedCols the message's columns written. A
// message of upserts naming a column the table lacks, or lacking its key
// or version, is refused whole: problem says why.
func messageColumns(tc *codec.TableCodec, tch *syncpb.TableChanges) (pos, filedCols []int, why RefusalReason, problem string) {
	pos = make([]int, len(tch.Columns))
	seen := map[int]bool{}
	for i, name := range tch.Columns {
		j := -1
		for k := range tc.Columns {
			if tc.Columns[k].Name == name {
				j = k
			}
		}
		if j < 0 && len(tch.Upserts) > 0 {
			return nil, nil, RefusedColumns, fmt.Sprintf("table %q has no column %q on the server", tch.Table, clip(name, 64))
		}
		pos[i] = j
		if j >= 0 {
			seen[j] = true
			if !tc.Columns[j].Generated {
				filedCols = append(filedCols, i)
			}
		}
	}
	if len(tch.Upserts) > 0 {
		for _, k := range tc.KeyIndex {
			if !seen[k] {
				return nil, nil, RefusedColumns, fmt.Sprintf("the rows of %q lack key column %q", tch.Table, tc.Columns[k].Name)
			}
		}
		if tc.VersionIndex >= 0 && !seen[tc.VersionIndex] {
			return nil, nil, RefusedColumns, fmt.Sprintf("the rows of %q lack version column %q", tch.Table, tc.Columns[tc.VersionIndex].Name)
		}
	}
	return pos, filedCols, 0, ""
}

// tableFiling is the filing of one table's changes of an upload: what it
// refuses goes into rf, until a refusal does not fit (over).
type tableFiling struct {
	t       *table
	tch     *syncpb.TableChanges
	replica uuid.UUID
	me      codec.Value // the replica's id, as its rows' origin holds it
	rf      *refusals
	over    error
}

// refuse records the refusal of a row, unless one did not fit already.
func (tf *tableFiling) refuse(why RefusalReason, key []byte, format string, args ...any) {
	if tf.over == nil {
		tf.over = tf.rf.add(why, tf.tch.Table, key, fmt.Sprintf(format, args...))
	}
}

// upserts decodes and checks the upserted rows, one per key (the newest),
// refusing those that do not decode, hold a value their column cannot,
// or are not the sending replica's.
func (tf *tableFiling) upserts(pos, filedCols []int) []pendingRow {
	tc, tch, replica, me := tf.t.tc, tf.tch, tf.replica, tf.me
	refuse := tf.refuse
	byKey := map[string]int{}
	var rows []pendingRow
	full := make([]codec.Value, len(tc.Columns))
	var vals []codec.Value
	for i, tuple := range tch.Upserts {
		if tf.over != nil {
			return nil
		}
		var err error
		vals, err = codec.DecodeTuple(tuple, vals)
		if err != nil {
			refuse(RefusedValue, tch.UpsertKeys[i], "the row does not decode: %v", err)
			continue
		}
		if len(vals) != len(tch.Columns) {
			refuse(RefusedValue, tch.UpsertKeys[i], "the row holds %d values for %d columns", len(vals), len(tch.Columns))
			continue
		}
		bad := ""
		for n, v := range vals {
			if pos[n] < 0 {
				continue
			}
			c := &tc.Columns[pos[n]]
			if err := c.CheckValue(v); err != nil {
				bad = err.Error()
				break
			}
			if (v.Kind == wire.Text || v.Kind == wire.Decimal) && strings.IndexByte(v.S, 0) >= 0 {
				bad = fmt.Sprintf("column %q holds a NUL character, which PostgreSQL text cannot", c.Name)
				break
			}
			full[pos[n]] = v
		}
		if bad != "" {
			refuse(RefusedValue, tch.UpsertKeys[i], "%s", bad)
			continue
		}
		key := []byte(tc.KeyOfRow(full))
		if o := full[tc.OriginIndex]; !o.Equal(me) {
			refuse(RefusedOrigin, key, "origin %q is %v, not the sending replica %s", tc.Columns[tc.OriginIndex].Name, codec.KeyOfValues(o), replica)
			continue
		}
		pr := pendingRow{key: key, text: make([]*string, len(filedCols))}
		if tc.VersionIndex >= 0 {
			pr.ver = full[tc.VersionIndex]
		}
		for n, mi := range filedCols {
			if s, ok := pgText(vals[mi]); ok {
				pr.text[n] = &s
			}
		}
		if at, dup := byKey[string(key)]; dup {
			if !newer(rows[at].ver, pr.ver) {
				rows[at] = pr
			}
			continue
		}
		byKey[string(key)] = len(rows)
		rows = append(rows, pr)
	}
	return rows
}

// deletes checks the deleted keys: only the replica's own rows may be
// deleted; a key of a row PostgreSQL cannot hold deletes nothing.
func (tf *tableFiling) deletes() [][]byte {
	tc, tch, me := tf.t.tc, tf.tch, tf.me
	refuse := tf.refuse
	originAt := -1
	for n, i := range tc.KeyIndex {
		if i == tc.OriginIndex {
			originAt = n
		}
	}
	var dels [][]byte
	for _, k := range tch.Deletes {
		kv, err := codec.DecodeTuple(k, nil)
		switch {
		case err != nil:
			refuse(RefusedValue, k, "the key does not decode: %v", err)
		case len(kv) != len(tc.KeyIndex):
			refuse(RefusedValue, k, "a key of %d values; %q has %d key columns", len(kv), tch.Table, len(tc.KeyIndex))
		case originAt < 0 || !kv[originAt].Equal(me):
			refuse(RefusedOrigin, k, "the row is not the sending replica's: only its own rows may be deleted")
		case holdsNUL(kv):
			// PostgreSQL holds no row of such a key: there is nothing to
			// delete (its upsert was refused).
		default:
			dels = append(dels, k)
		}
	}
	return dels
}

// newer reports whether version a is newer than b.
func newer(a, b codec.Value) bool {
	switch a.Kind {
	case wire.Int, wire.Time, wire.Bool:
		return a.I > b.I
	case wire.Float:
		return a.F > b.F
	case wire.Text, wire.Decimal:
		return a.S > b.S
	case wire.UUID:
		return string(a.U[:]) > string(b.U[:])
	case wire.Bytes:
		return string(a.B) > string(b.B)
	}
	return false
}

// upsert writes rows in one statement; when the database refuses the
// batch for a row's data, it files row by row, adding those it refuses to
// rf, and stops as soon as one does not fit there.
func (s *Server) upsert(ctx context.Context, tx pgx.Tx, t *table, cols []string, pos, filedCols []int, rows []pendingRow, resent bool, rf *refusals) (int64, error) {
	_ = cols
	sql := t.upsertRows(pos, filedCols, resent)
	batch := func(rs []pendingRow) (int64, error) {
		arrays := make([]any, len(filedCols))
		for n := range filedCols {
			col := make([]*string, len(rs))
			for i := range rs {
				col[i] = rs[i].text[n]
			}
			arrays[n] = col
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return 0, err
		}
		tag, err := sp.Exec(ctx, sql, arrays...)
		if err != nil {
			_ = sp.Rollback(ctx)
			return 0, err
		}
		return tag.RowsAffected(), sp.Commit(ctx)
	}
	n, err := batch(rows)
	if err == nil {
		return n, nil
	}
	if !dataError(err) {
		return 0, err
	}
	n = 0
	for i := range rows {
		k, err := batch(rows[i : i+1])
		if err != nil {
			if !dataError(err) {
				return 0, err
			}
			if err := rf.add(RefusedDatabase, t.name, rows[i].key, "the database refused the row: "+err.Error()); err != nil {
				return 0, err
			}
			continue
		}
		n += k
	}
	return n, nil
}

// dataError reports whether err is PostgreSQL refusing data (SQLSTATE
// classes 22, data exception, and 23, integrity constraint violation):
// the row's fault, not the database's.
func dataError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23"))
}

// maxRejectedKept bounds the rows kept per replica and side in
// sync_rejected: the newest; the others are counted in one row of their own.
const maxRejectedKept = 1000

// maxBuildBytes bounds the build a replica reports, as kept.
const maxBuildBytes = 256

// Rows of sync_rejected that count what is not kept one by one: their table
// is empty (which names no table) and their key one of these; their reason
// starts with the count.
var (
	summaryUnknown = []byte{1} // rows of tables the server does not declare
	summaryDropped = []byte{2} // older rows beyond maxRejectedKept
)
