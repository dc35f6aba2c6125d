package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/safetext"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// receive.go holds Receive's pipeline, one step a function, in the order
// an upload goes through them (Endpoint.Receive has authorized the replica):
// decode the upload (decodeUpload), lock the replica's row (lockReplica),
// tell a repeat from a new upload (filedBefore, confirmAgain), file its rows
// (fileRows, filing.go), file what it reports (fileReports, reports.go),
// compare its digests (compareDigests, digests.go), queue the confirmation
// (confirmFiled, confirm.go), and commit (commitCounted).

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
	fk := &filedKeys{}
	rows, counts, err := s.fileRows(ctx, tx, replica, up, rf, fk)
	if err != nil {
		return err
	}
	if err := s.fileEvents(ctx, tx, replica, fk, rf, up.Resent); err != nil {
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
