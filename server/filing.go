package server

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// filing.go holds what Receive does with an upload: filing its rows, the
// rows it refuses and the report of them, what the replica reports, and the
// queueing and merging of the confirmations (Filed).

// receive is Endpoint.Receive.
func (s *Server) receive(ctx context.Context, replica uuid.UUID, lane string, body []byte) error {
	m, err := s.decodeUpload(replica, lane, body)
	if err != nil {
		return err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("magicsync/server: filing: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if err := s.lockReplica(ctx, tx, replica); err != nil {
		return err
	}
	bodyHash := sha256.Sum256(body)
	stored, repeat, err := s.filedBefore(ctx, tx, replica, m, bodyHash[:])
	if err != nil {
		return err
	}
	if repeat {
		return s.confirmAgain(ctx, tx, replica, m, stored)
	}
	up := m.Up
	filed := &syncpb.Filed{Lane: m.Lane, Sequence: m.Sequence}
	// What the refusals may take: the confirmation is one message, of at
	// most MaxMessageBytes.
	rf := &refusals{budget: s.opts.MaxMessageBytes - msgOverhead - proto.Size(filed), bound: s.opts.MaxMessageBytes}
	rows, counts, err := s.fileRows(ctx, tx, replica, up, rf)
	if err != nil {
		return err
	}
	filed.Refused = rf.list
	if err := s.fileReports(ctx, tx, replica, up, filed, counts); err != nil {
		return err
	}
	mismatch, err := s.compareDigests(ctx, tx, replica, up.Digests)
	if err != nil {
		return err
	}
	// A message that carried no rows, reports, clearings or answers needs
	// no confirmation: the replica forgets nothing on it, and confirming it
	// would only have the replica report the confirmation, back and forth.
	// A clearing does need one: the replica forgets it on its Filed, and
	// sends it again until then.
	if len(up.Tables) > 0 || len(up.Rejected) > 0 || len(up.Cleared) > 0 || len(up.Answers) > 0 || len(up.Undecodable) > 0 {
		if err := s.confirmFiled(ctx, tx, replica, m, filed, bodyHash[:]); err != nil {
			return err
		}
	}
	return s.commitCounted(ctx, tx, replica, rows, rf, mismatch)
}

// decodeUpload decodes an upload and checks that it is the replica's and
// the lane's it came as; every error wraps ErrPermanent.
func (s *Server) decodeUpload(replica uuid.UUID, lane string, body []byte) (*syncpb.ToServer, error) {
	m, err := wire.DecodeToServerRows(body, max(s.opts.MaxMessageBytes, wire.MaxMessageBytes), MaxUploadRows)
	if errors.Is(err, wire.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w (MaxUploadRows is %d): send its rows in smaller uploads", ErrTooLarge, err, MaxUploadRows)
	}
	if newer, ok := errors.AsType[*wire.NewerProtocolError](err); ok {
		return nil, fmt.Errorf("%w: %w", ErrPermanent, &magicsync.ProtocolError{Got: newer.Got, Speak: newer.Speak})
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPermanent, err)
	}
	if got := uuid.UUID(m.Replica); got != replica {
		return nil, fmt.Errorf("%w: the message names replica %s, but came as %s", ErrPermanent, got, replica)
	}
	if lane != "" && m.Lane != lane {
		return nil, fmt.Errorf("%w: the message is of lane %q, but came as lane %q", ErrPermanent, m.Lane, lane)
	}
	if !safetext.Safe(m.Lane) {
		// PostgreSQL would refuse it, failing the filing as if the
		// database were out of reach, again and again.
		return nil, fmt.Errorf("%w: the message's lane %q holds a NUL, which no lane's name may", ErrPermanent, m.Lane)
	}
	return m, nil
}

// filedBefore reads whether the upload was filed before: repeat is true
// for the same upload sent again (stored is what its filing confirmed).
// An upload numbered as one filed before but other, or as one forgotten
// long ago, shows the replica restored from an older copy (restored).
func (s *Server) filedBefore(ctx context.Context, tx pgx.Tx, replica uuid.UUID, m *syncpb.ToServer, bodyHash []byte) (stored []byte, repeat bool, err error) {
	var storedHash []byte
	err = tx.QueryRow(ctx, s.sql.of(qFiledRecord),
		replica, m.Lane, int64(m.Sequence)).Scan(&stored, &storedHash)
	if err == nil && !bytes.Equal(storedHash, bodyHash) {
		// Not a repeat: the replica numbers its uploads again from where an
		// older copy of its database left off. Its rows are filed, and it is
		// provisioned again, for it may lack what it had applied since, and
		// sends all its rows again. An upload filed before the engine kept
		// what uploads held (schema step 2) cannot be told from a repeat,
		// and is treated the same: filing again loses nothing.
		reason := fmt.Sprintf("the replica sent upload %d of lane %q again with other content: was it restored from an older copy?", m.Sequence, m.Lane)
		if err := s.restored(ctx, tx, replica, m.Lane, m.Sequence, reason); err != nil {
			return nil, false, err
		}
		err = pgx.ErrNoRows
	} else if errors.Is(err, pgx.ErrNoRows) && (len(m.Up.Tables) > 0 || len(m.Up.Rejected) > 0) {
		// An upload with rows at or below a sequence whose filing was
		// forgotten (trimFiled: only once the replica had applied its
		// Filed, and long after) is no repeat of what the replica still
		// sends: it numbers its uploads again from an older copy.
		var upto int64
		if err := tx.QueryRow(ctx, s.sql.of(qFiledTrimmedUpto),
			replica, m.Lane).Scan(&upto); err != nil {
			return nil, false, fmt.Errorf("magicsync/server: filing: %w", err)
		}
		if int64(m.Sequence) <= upto {
			reason := fmt.Sprintf("the replica sent upload %d of lane %q, which it had sent and had confirmed long ago: was it restored from an older copy?", m.Sequence, m.Lane)
			if err := s.restored(ctx, tx, replica, m.Lane, m.Sequence, reason); err != nil {
				return nil, false, err
			}
		}
	}
	switch {
	case err == nil:
		return stored, true, nil
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("magicsync/server: filing: %w", err)
}

// confirmAgain queues again the confirmation of an upload filed before,
// which the replica sent again.
func (s *Server) confirmAgain(ctx context.Context, tx pgx.Tx, replica uuid.UUID, m *syncpb.ToServer, stored []byte) error {
	filed := &syncpb.Filed{}
	if err := proto.Unmarshal(stored, filed); err != nil {
		return fmt.Errorf("magicsync/server: reading what was filed: %w", err)
	}
	// A repeat still says what the replica had applied when it sent
	// it: taken before its confirmation takes a new id, so that a
	// server restored from an older backup, which may never have
	// issued that id, learns it before it issues the id to another
	// message.
	if m.Up.GetLastApplied() > 0 {
		if err := s.ackTx(ctx, tx, replica, m.Up.GetLastApplied()); err != nil {
			return err
		}
	}
	if _, err := s.queueFiled(ctx, tx, replica, filed); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, s.sql.of(qReplicaSeen), replica); err != nil {
		return err
	}
	return s.commitFiled(ctx, tx, replica)
}

// fileRows files the upload's rows, table by table, and returns how many
// were filed, in all and by table (rows sent again after a provisioning
// are not counted by table: they were when first filed).
func (s *Server) fileRows(ctx context.Context, tx pgx.Tx, replica uuid.UUID, up *syncpb.Up, rf *refusals) (int64, map[string]int64, error) {
	counts := map[string]int64{}
	var rows int64 // filed, for Stats
	for _, tch := range up.Tables {
		n, err := s.fileTable(ctx, tx, replica, tch, up.Resent, rf)
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

// fileReports records what the upload reports besides its rows: the rows
// the replica could not take and those it cleared, its answers to wishes,
// the messages it could not decode, the refusals of this filing, its
// counts, and the last message it applied.
func (s *Server) fileReports(ctx context.Context, tx pgx.Tx, replica uuid.UUID, up *syncpb.Up, filed *syncpb.Filed, counts map[string]int64) error {
	if err := s.recordRejected(ctx, tx, replica, SideReplica, up.Rejected); err != nil {
		return err
	}
	if err := s.forgetCleared(ctx, tx, replica, up.Cleared); err != nil {
		return err
	}
	if err := s.fileAnswers(ctx, tx, replica, up.Answers, up.Resent); err != nil {
		return err
	}
	if err := s.undecodable(ctx, tx, replica, up.Undecodable); err != nil {
		return err
	}
	if err := s.forgetRefusalsFiled(ctx, tx, replica, up.Tables, filed.Refused); err != nil {
		return err
	}
	if err := s.recordRejected(ctx, tx, replica, SideServer, filed.Refused); err != nil {
		return err
	}
	if err := s.recordReport(ctx, tx, replica, up, counts); err != nil {
		return err
	}
	if up.LastApplied > 0 {
		if err := s.ackTx(ctx, tx, replica, up.LastApplied); err != nil {
			return err
		}
	}
	return nil
}

// confirmFiled queues the upload's confirmation and records the filing,
// with what it confirmed, for the upload sent again.
func (s *Server) confirmFiled(ctx context.Context, tx pgx.Tx, replica uuid.UUID, m *syncpb.ToServer, filed *syncpb.Filed, bodyHash []byte) error {
	msg, err := s.queueFiled(ctx, tx, replica, filed)
	if err != nil {
		return err
	}
	b, err := proto.Marshal(filed)
	if err != nil {
		return fmt.Errorf("magicsync/server: filing: %w", err)
	}
	if _, err := tx.Exec(ctx, s.sql.of(qRecordFiled),
		replica, m.Lane, int64(m.Sequence), b, bodyHash, msg); err != nil {
		return fmt.Errorf("magicsync/server: recording the filing: %w", err)
	}
	return nil
}

// commitCounted is commitFiled for an upload filed (not a repeat), counting
// it in Stats once committed: a filing that fails counts nothing.
func (s *Server) commitCounted(ctx context.Context, tx pgx.Tx, replica uuid.UUID, rows int64, rf *refusals, mismatch bool) error {
	if err := s.commitFiled(ctx, tx, replica); err != nil {
		return err
	}
	s.stats.filed(rows, rf, mismatch)
	return nil
}

// commitFiled commits a filing and wakes the replica's waiting Next calls,
// here and, at commit, in other processes.
func (s *Server) commitFiled(ctx context.Context, tx pgx.Tx, replica uuid.UUID) error {
	if _, err := tx.Exec(ctx, qNotify, s.m.engine.wakeChannel(), "r:"+replica.String()); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("magicsync/server: filing: %w", err)
	}
	s.memo.drop(replica)
	s.hub.wakeReplica(replica)
	return nil
}

// lockReplica locks the replica's row (adopting it if need be).
func (s *Server) lockReplica(ctx context.Context, tx pgx.Tx, replica uuid.UUID) error {
	var one int
	err := tx.QueryRow(ctx, s.sql.of(qLockReplica), replica).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		if err := s.ensureReplica(ctx, tx, replica); err != nil {
			return err
		}
		return s.lockReplica(ctx, tx, replica)
	}
	if err != nil {
		return fmt.Errorf("magicsync/server: %w", err)
	}
	return nil
}

// queueFiled queues the confirmation of an upload, filed, as the
// replica's next message, and returns the id of the message that confirms
// it.
//
// Confirmations of one lane still queued merge into one: they are deleted
// and a single Filed, under a new id (an id is never reused for other
// content), confirms all their sequences and filed's, each with its own
// refused rows (a row refused in an upload other than the newest names
// that upload's sequence in its message field). A queued confirmation may
// have been handed out already: the replica applying it too is a harmless
// repeat, and the records of the uploads (sync_filed.msg) move to the
// merged message, so that none is forgotten before the replica applied
// it. One that would make the merged message outgrow MaxMessageBytes (for
// its refused rows) stays as it is, and so does one queued before another
// kind of message: merged, it would move behind that message, and while a
// provisioning's parts are built one after another, each upload would
// move its lane's confirmation behind the next part until the end. An
// upload whose sequence a queued confirmation already confirms — a repeat
// — adds nothing.
//
// So a lane has one confirmation queued after the last delta or part,
// however fast its uploads come and however slowly they are fetched, and a
// catalog change built behind it waits for no more than that one.
func (s *Server) queueFiled(ctx context.Context, tx pgx.Tx, replica uuid.UUID, filed *syncpb.Filed) (int64, error) {
	rows, err := tx.Query(ctx, s.sql.of(qQueuedFiled), replica)
	if err != nil {
		return 0, fmt.Errorf("magicsync/server: queueing Filed: %w", err)
	}
	type queued struct {
		id   int64
		f    *syncpb.Filed
		tail bool // queued after every other kind of message
	}
	var lane []queued
	for rows.Next() {
		var q queued
		var body []byte
		if err := rows.Scan(&q.id, &body, &q.tail); err != nil {
			rows.Close()
			return 0, fmt.Errorf("magicsync/server: queueing Filed: %w", err)
		}
		m, err := wire.DecodeToReplica(body)
		if err != nil || m.GetFiled().GetLane() != filed.Lane {
			// Another lane's, or one this build cannot read: left alone.
			continue
		}
		q.f = m.GetFiled()
		lane = append(lane, q)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("magicsync/server: queueing Filed: %w", err)
	}
	for _, q := range lane {
		if q.f.Sequence == filed.Sequence || slices.Contains(q.f.Earlier, filed.Sequence) {
			return q.id, nil
		}
	}
	// What to merge: filed, then the lane's queued confirmations, oldest
	// first, as long as the merged message stays within the bound.
	budget := s.opts.MaxMessageBytes - msgOverhead
	size := proto.Size(filed)
	merged := []*syncpb.Filed{filed}
	var gone []int64
	for _, q := range lane {
		n := proto.Size(q.f)
		if !q.tail || size+n > budget {
			continue
		}
		size += n
		merged = append(merged, q.f)
		gone = append(gone, q.id)
	}
	out := mergeFiled(merged)
	if len(gone) > 0 {
		if _, err := tx.Exec(ctx, s.sql.of(qDropQueued), replica, gone); err != nil {
			return 0, fmt.Errorf("magicsync/server: queueing Filed: %w", err)
		}
	}
	var id int64
	if err := tx.QueryRow(ctx, s.sql.of(qTakeNextID), replica).Scan(&id); err != nil {
		return 0, fmt.Errorf("magicsync/server: queueing Filed: %w", err)
	}
	body, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: uint64(id), Body: &syncpb.ToReplica_Filed{Filed: out}})
	if err != nil {
		return 0, fmt.Errorf("magicsync/server: encoding Filed: %w", err)
	}
	if _, err := tx.Exec(ctx, s.sql.of(qQueueFiled), replica, id, body); err != nil {
		return 0, fmt.Errorf("magicsync/server: queueing Filed: %w", err)
	}
	// The uploads it confirms are known applied once it is (trimFiled).
	seqs := make([]int64, 0, 1+len(out.Earlier))
	for _, q := range append([]uint64{out.Sequence}, out.Earlier...) {
		seqs = append(seqs, int64(q))
	}
	if _, err := tx.Exec(ctx, s.sql.of(qFiledConfirmedBy),
		replica, filed.Lane, seqs, id); err != nil {
		return 0, fmt.Errorf("magicsync/server: queueing Filed: %w", err)
	}
	return id, nil
}

// mergeFiled merges confirmations of one lane into one: every sequence
// once (the highest in sequence, the others in earlier, ascending), and
// each sequence's refused rows as the first confirmation naming that
// sequence has them, each naming its upload's sequence unless it is the
// merged sequence. fs is not changed.
func mergeFiled(fs []*syncpb.Filed) *syncpb.Filed {
	if len(fs) == 1 && len(fs[0].Earlier) == 0 {
		return fs[0]
	}
	seen := map[uint64]bool{}
	var seqs []uint64
	type refusal struct {
		seq uint64
		r   *syncpb.Rejected
	}
	var refused []refusal
	for _, f := range fs {
		fresh := map[uint64]bool{}
		for _, q := range append([]uint64{f.Sequence}, f.Earlier...) {
			if !seen[q] {
				seen[q], fresh[q] = true, true
				seqs = append(seqs, q)
			}
		}
		for _, r := range f.Refused {
			q := r.Message
			if q == 0 {
				q = f.Sequence
			}
			if fresh[q] {
				refused = append(refused, refusal{q, r})
			}
		}
	}
	slices.Sort(seqs)
	top := seqs[len(seqs)-1]
	out := &syncpb.Filed{Lane: fs[0].Lane, Sequence: top, Earlier: seqs[:len(seqs)-1]}
	if len(out.Earlier) == 0 {
		out.Earlier = nil
	}
	slices.SortStableFunc(refused, func(a, b refusal) int { return cmp.Compare(a.seq, b.seq) })
	for _, x := range refused {
		r := &syncpb.Rejected{Table: x.r.Table, Key: x.r.Key, Reason: x.r.Reason}
		if x.seq != top {
			r.Message = x.seq
		}
		out.Refused = append(out.Refused, r)
	}
	return out
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

// fileTable files one table's part, adding the rows it refuses to rf; it
// returns how many rows it wrote.
func (s *Server) fileTable(ctx context.Context, tx pgx.Tx, replica uuid.UUID, tch *syncpb.TableChanges, resent bool, rf *refusals) (int64, error) {
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

// recordRejected keeps rows one side could not take. A row the replica
// reports it could not take from a message older than the first of its
// current (or last) provisioning is not kept: the provisioning replaces
// what that message brought, and clears such records when it ends (ackTx)
// — a report arriving after that (sent again, or delivered late) would
// otherwise stay for good, and keep the table's digests from ever being
// compared. A report whose message is unknown (0) is kept.
//
// What one replica can make the server keep is bounded: rows of tables the
// server does not declare are counted in one row, not kept one by one; of
// the rest, the newest maxRejectedKept per side are kept, and the older
// ones counted in one row; reasons are cut to maxReasonBytes.
func (s *Server) recordRejected(ctx context.Context, tx pgx.Tx, replica uuid.UUID, side Side, rs []*syncpb.Rejected) error {
	if len(rs) == 0 {
		return nil
	}
	var tbls, reasons []string
	var keys [][]byte
	var msgs []int64
	unknown, lastUnknown := 0, ""
	for _, r := range rs {
		if s.m.byName[r.Table] == nil {
			unknown, lastUnknown = unknown+1, r.Table
			continue
		}
		k := r.Key
		if k == nil {
			k = []byte{}
		}
		var m int64
		if r.Message <= 1<<63-1 {
			m = int64(r.Message)
		}
		tbls, keys, reasons, msgs = append(tbls, r.Table), append(keys, k), append(reasons, clip(r.Reason, maxReasonBytes)), append(msgs, m)
	}
	// Of more than are kept, the last ones are.
	dropped := int64(0)
	if extra := len(tbls) - maxRejectedKept; extra > 0 {
		dropped = int64(extra)
		tbls, keys, reasons, msgs = tbls[extra:], keys[extra:], reasons[extra:], msgs[extra:]
	}
	if len(tbls) > 0 {
		// The row's record keeps the latest message that carried it (for
		// the replica's side): a later one applied clears it
		// (clearRejected).
		_, err := tx.Exec(ctx, s.sql.of(qKeepRejected),
			replica, side, tbls, keys, reasons, msgs)
		if err != nil {
			return fmt.Errorf("magicsync/server: recording rejected rows: %w", err)
		}
		var n int64
		if err := tx.QueryRow(ctx, s.sql.of(qDropOldRejected), replica, side, maxRejectedKept).Scan(&n); err != nil {
			return fmt.Errorf("magicsync/server: recording rejected rows: %w", err)
		}
		dropped += n
	}
	if err := s.countRejected(ctx, tx, replica, side, summaryUnknown, int64(unknown),
		fmt.Sprintf(" rows of tables the server does not declare (the last: %q), counted, not kept one by one", clip(lastUnknown, 64))); err != nil {
		return err
	}
	return s.countRejected(ctx, tx, replica, side, summaryDropped, dropped,
		fmt.Sprintf(" older rows not kept: the newest %d are", maxRejectedKept))
}

// countRejected adds n to the count of rows not kept one by one that the
// row of key summary holds.
func (s *Server) countRejected(ctx context.Context, tx pgx.Tx, replica uuid.UUID, side Side, summary []byte, n int64, what string) error {
	if n == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, s.sql.of(qCountRejected),
		replica, side, summary, n, what); err != nil {
		return fmt.Errorf("magicsync/server: counting rejected rows: %w", err)
	}
	return nil
}

// recordReport keeps what the replica reported, for Status.
func (s *Server) recordReport(ctx context.Context, tx pgx.Tx, replica uuid.UUID, up *syncpb.Up, filed map[string]int64) error {
	if _, err := tx.Exec(ctx, s.sql.of(qRecordReport), replica, int64(up.Backlog), clip(up.Build, maxBuildBytes)); err != nil {
		return fmt.Errorf("magicsync/server: recording the report: %w", err)
	}
	tbls := []string{}
	var unsent []int64
	for _, c := range up.Unsent {
		if s.m.byName[c.Table] == nil {
			// Nothing is kept of tables the server does not declare.
			continue
		}
		tbls = append(tbls, c.Table)
		unsent = append(unsent, int64(c.Rows))
	}
	// Each lane reports its own tables, every one of them, so a table not
	// listed belongs to another lane and keeps what that lane said.
	if len(tbls) > 0 {
		if _, err := tx.Exec(ctx, s.sql.of(qRecordUnsent), replica, tbls, unsent); err != nil {
			return err
		}
	}
	tbls = tbls[:0]
	var counts []int64
	for t, n := range filed {
		if n > 0 {
			tbls = append(tbls, t)
			counts = append(counts, n)
		}
	}
	if len(tbls) > 0 {
		if _, err := tx.Exec(ctx, s.sql.of(qCountFiled), replica, tbls, counts); err != nil {
			return err
		}
	}
	return nil
}
