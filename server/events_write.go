package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// events_write.go holds the writing of the events a host follows
// (events.go), always in the engine's own transactions: an upload's
// RecordsFiled in its filing's (receive.go), WishAnswered in the same
// statement as the answers (fileAnswers), Provisioned in the
// acknowledgement that ends a provisioning (outbox_ack.go), and
// ReplicaOnline and ReplicaOffline by Run's announcer; and their trimming,
// by Run's trimmer (trim.go).

// filedKeys gathers the keys of the rows an upload files, by table, for
// its RecordsFiled events.
type filedKeys struct {
	tbls []string // each key's table
	keys [][]byte
}

// add notes keys filed of table.
func (f *filedKeys) add(table string, keys ...[]byte) {
	for _, k := range keys {
		f.tbls, f.keys = append(f.tbls, table), append(f.keys, k)
	}
}

// fileEvents writes an upload's RecordsFiled events, one per table, in
// its filing's transaction tx, in one statement: the keys filed, less
// those of rows the database refused one by one.
func (s *Server) fileEvents(ctx context.Context, tx pgx.Tx, replica uuid.UUID, f *filedKeys, rf *refusals, resent bool) error {
	tbls, keys := f.tbls, f.keys
	if rf.why[RefusedDatabase] > 0 {
		refused := map[[2]string]bool{}
		for _, r := range rf.list {
			refused[[2]string{r.Table, string(r.Key)}] = true
		}
		tbls, keys = nil, nil
		for i, k := range f.keys {
			if !refused[[2]string{f.tbls[i], string(k)}] {
				tbls, keys = append(tbls, f.tbls[i]), append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, s.sql.of(qEventsFiled), replica, tbls, keys, resent); err != nil {
		return fmt.Errorf("magicsync/server: writing the events of a filing: %w", err)
	}
	return nil
}

// provisionedEvent writes a replica's Provisioned event in tx, which ends
// its provisioning.
func (s *Server) provisionedEvent(ctx context.Context, tx pgx.Tx, replica uuid.UUID) error {
	if _, err := tx.Exec(ctx, s.sql.of(qEventProvisioned), replica, s.m.engine.wakeChannel()); err != nil {
		return fmt.Errorf("magicsync/server: writing a provisioning's event: %w", err)
	}
	return nil
}

// presenceEvery is how often Run announces the replicas come online or
// gone offline.
const presenceEvery = 2 * time.Second

// announcePresenceEvery is Run's announcer: every presenceEvery, it
// writes a ReplicaOnline or ReplicaOffline event for each replica whose
// online changed since it was last announced.
func (s *Server) announcePresenceEvery(ctx context.Context) {
	s.every(ctx, presenceEvery, s.announcePresence,
		"magicsync/server: announcing replicas online and offline fails; trying again until it works",
		"magicsync/server: announcing replicas online and offline works again")
}

// announcePresence announces, in one transaction, the replicas whose
// online changed, and wakes the followers when it announced any.
func (s *Server) announcePresence(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var n int
	if err := tx.QueryRow(ctx, s.sql.of(qAnnouncePresence)).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, qNotify, s.m.engine.wakeChannel(), "e:"); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// trimBatchEvents bounds the events one statement of trimEvents deletes.
const trimBatchEvents = 10000

// trimEvents deletes the events older than keep (and those of earlier
// transactions), recording the highest transaction trimmed.
func (s *Server) trimEvents(ctx context.Context, keep time.Duration) error {
	for {
		var n int
		if err := s.pool.QueryRow(ctx, s.sql.of(qTrimEvents), keep, trimBatchEvents).Scan(&n); err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return fmt.Errorf("magicsync/server: trimming events: %w", err)
		}
		if n < trimBatchEvents {
			return nil
		}
	}
}
