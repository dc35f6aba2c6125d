package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// confirm.go holds the confirmation of an upload (Filed): queued in the
// upload's transaction, merged with the confirmations still waiting in the
// replica's outbox so that a replica offline for a while gets one, not many.

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
