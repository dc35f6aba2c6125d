package server

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// reports.go holds the filing of what an upload reports beside its rows: the
// server's rows the replica could not take, the rows it cleared, the messages
// it could not decode, its answers to wishes, and its counts and build.

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
	if err := s.fileCommandAnswers(ctx, tx, replica, up.CommandAnswers); err != nil {
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
