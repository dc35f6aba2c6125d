package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// trim.go holds forgetting: the log entries every member acknowledged, the
// records of filed uploads no replica can send again, and the records of
// rows a replica could not take, once a later message brought them or the
// replica cleared them.

// trimInterval is how often Run trims the logs of what every member
// acked, and forgets the filed uploads no replica can ask for again.
const trimInterval = time.Minute

// trimEvery is Run's trimmer: every trimInterval, the first a trimInterval
// after Run starts, it trims the logs and forgets the old filed uploads.
func (s *Server) trimEvery(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(trimInterval):
	}
	s.every(ctx, trimInterval, s.trim,
		"magicsync/server: trimming fails; trying again until it works", "magicsync/server: trimming works again")
}

// trim trims the logs, then forgets the old filed uploads, then trims the
// old events (events_write.go).
func (s *Server) trim(ctx context.Context) error {
	if err := s.trimLogs(ctx); err != nil {
		return fmt.Errorf("trimming the logs: %w", err)
	}
	if err := s.trimFiled(ctx, filedKeep); err != nil {
		return fmt.Errorf("forgetting filed uploads: %w", err)
	}
	if err := s.trimEvents(ctx, s.keepEvents()); err != nil {
		return fmt.Errorf("trimming events: %w", err)
	}
	return nil
}

// trimBatch bounds the groups one trimming transaction locks.
const trimBatch = 1000

// trimLogs deletes log entries every member has acknowledged: a replica
// joining a group starts at its head.
//
// It locks the groups it trims (FOR NO KEY UPDATE SKIP LOCKED), a batch at
// a time, and reads their members in a later statement: a group whose row
// a provisioning holds (FOR SHARE, until the build commits and its new
// member's cursor is visible) or a pass holds (moving its head) is skipped
// until a later trim, so that no entry a member not yet committed still
// needs is deleted.
func (s *Server) trimLogs(ctx context.Context) error {
	var after int64
	for {
		last, err := s.trimBatch(ctx, after)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return fmt.Errorf("magicsync/server: trimming the logs: %w", err)
		}
		if last == 0 {
			return nil
		}
		after = last
	}
}

// trimBatch trims the logs of the next groups after id after, and returns
// the last id it considered (0: none left).
func (s *Server) trimBatch(ctx context.Context, after int64) (int64, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var last int64
	var locked []int64
	if err := tx.QueryRow(ctx, s.sql.of(qTrimBatchEnd),
		after, trimBatch).Scan(&last); err != nil || last == 0 {
		return 0, err
	}
	rows, err := tx.Query(ctx, s.sql.of(qLockTrimBatch), after, last)
	if err != nil {
		return 0, err
	}
	if locked, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		return 0, err
	}
	if len(locked) > 0 {
		if _, err := tx.Exec(ctx, s.sql.of(qTrimLogs), locked); err != nil {
			return 0, err
		}
	}
	return last, tx.Commit(ctx)
}

// filedKeep is how long the record of a filed upload is kept at least, for
// copies of the upload still on the network (a request held in a proxy, a
// transport's retry) to be recognised as repeats.
const filedKeep = 24 * time.Hour

// trimBatchFiled bounds the records one statement of trimFiled deletes.
const trimBatchFiled = 10000

// trimFiled forgets filed uploads no replica can still ask to have filed:
// a record goes once the replica applied its Filed (acknowledged a message
// at or past it — it sends that upload no more), once it is older than
// keep, and unless it is the newest of its lane. The highest sequence
// forgotten per lane is kept (sync_filed_trimmed): an upload with rows at
// or below it, not kept, is taken for a replica restored from an older
// copy, as an upload repeating a kept sequence with other content is.
func (s *Server) trimFiled(ctx context.Context, keep time.Duration) error {
	for {
		var n int
		err := s.pool.QueryRow(ctx, s.sql.of(qTrimFiled), keep, trimBatchFiled).Scan(&n)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return fmt.Errorf("magicsync/server: forgetting filed uploads: %w", err)
		}
		if n < trimBatchFiled {
			return nil
		}
	}
}

// ackedMsg is an acknowledged message that moved the replica's cursors.
type ackedMsg struct {
	id         int64
	grps, poss []int64
}

// clearRejected forgets the rows the replica reported it could not take
// that a message it has now applied carried again (an upsert or a delete
// of the same key, in a message after the one it could not take): a
// row's record stays only while the replica lacks the row as the server
// last sent it. A message's rows are the entries of its groups' logs in
// the range it moved the replica's cursors over (from its acknowledged
// positions, read before they move; the log is trimmed only below them).
func (s *Server) clearRejected(ctx context.Context, tx pgx.Tx, replica uuid.UUID, msgs []ackedMsg) error {
	var some bool
	if err := tx.QueryRow(ctx, s.sql.of(qAnyRejectedByMessage),
		replica).Scan(&some); err != nil || !some {
		return err
	}
	rows, err := tx.Query(ctx, s.sql.of(qAckedPositions), replica)
	if err != nil {
		return err
	}
	at := map[int64]int64{}
	for rows.Next() {
		var g, p int64
		if err := rows.Scan(&g, &p); err != nil {
			rows.Close()
			return err
		}
		at[g] = p
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var ids, grps, los, his []int64
	for _, m := range msgs {
		for i, g := range m.grps {
			lo, ok := at[g]
			if !ok || m.poss[i] <= lo {
				continue
			}
			ids, grps, los, his = append(ids, m.id), append(grps, g), append(los, lo), append(his, m.poss[i])
			at[g] = m.poss[i]
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, err = tx.Exec(ctx, s.sql.of(qClearRejected),
		replica, ids, grps, los, his)
	if err != nil {
		return fmt.Errorf("magicsync/server: clearing rejected rows: %w", err)
	}
	return nil
}

// forgetCleared forgets the rows a replica reported it could not take that
// it says it no longer holds as reported (Up.Cleared): own rows it could
// not read, written again or deleted since.
func (s *Server) forgetCleared(ctx context.Context, tx pgx.Tx, replica uuid.UUID, cleared []*syncpb.Rejected) error {
	if len(cleared) == 0 {
		return nil
	}
	tbls := make([]string, 0, len(cleared))
	keys := make([][]byte, 0, len(cleared))
	for _, c := range cleared {
		if s.m.byName[c.Table] == nil {
			// Nothing is kept of tables the server does not declare (and
			// the name may be text PostgreSQL refuses).
			continue
		}
		k := c.Key
		if k == nil {
			k = []byte{}
		}
		tbls, keys = append(tbls, c.Table), append(keys, k)
	}
	if len(tbls) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, s.sql.of(qForgetCleared), replica, tbls, keys); err != nil {
		return fmt.Errorf("magicsync/server: forgetting cleared reports: %w", err)
	}
	return nil
}
