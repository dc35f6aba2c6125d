package server

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// provision.go holds provisioning: starting one (the replica's cursors at
// its groups' heads), building its parts and its end, and what shows that
// the server or the replica was restored from an older copy, to be
// provisioned again.

// startProvisioning recomputes a replica's groups, puts its cursors at
// their heads and opens a new snapshot: what the log brings after the
// heads follows the snapshot's end.
//
// The caller holds the replica's row locked (FOR NO KEY UPDATE) until it commits:
// a pass planning a change of the replica's groups waits for it, then
// compares with the memberships written here (planMembers). The groups'
// rows are locked FOR SHARE, and their heads read under that lock: until
// the build commits, no pass moves those heads (the cursors written here
// stay exactly at the heads the snapshot starts from) and no trim deletes
// entries past them (trimLogs skips locked groups), though this replica's
// cursors are not yet visible to either.
func (s *Server) startProvisioning(ctx context.Context, tx pgx.Tx, st *replicaState) error {
	names, err := s.groupsOf(ctx, tx, []uuid.UUID{st.id})
	if err != nil {
		return err
	}
	ids, err := s.groupIDsOf(ctx, names[st.id])
	if err != nil {
		return err
	}
	grps := make([]int64, 0, len(ids))
	for _, id := range ids {
		grps = append(grps, id)
	}
	rows, err := tx.Query(ctx, s.sql.of(qLockHeads), grps)
	if err != nil {
		return err
	}
	heads, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ ID, Head int64 }])
	if err != nil {
		return err
	}
	grps, poss := grps[:0], make([]int64, 0, len(heads))
	for _, h := range heads {
		grps, poss = append(grps, h.ID), append(poss, h.Head)
	}
	if _, err := tx.Exec(ctx, s.sql.of(qDropMemberships), st.id); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, s.sql.of(qJoinAtHeads), st.id, grps, poss); err != nil {
		return err
	}
	if err := tx.QueryRow(ctx, s.sql.of(qOpenSnapshot), st.id).Scan(&st.snapshot); err != nil {
		return err
	}
	st.snapGrp, st.snapTbl, st.snapKey = 0, "", []byte{}
	st.provisionStarted = true
	return nil
}

// buildSnapshot builds the next part of a provisioning, or its end.
func (s *Server) buildSnapshot(ctx context.Context, tx pgx.Tx, st *replicaState) (*built, error) {
	c := newChanges()
	if st.snapKey == nil {
		st.snapKey = []byte{}
	}
	b := &built{kind: "part", snapGrp: st.snapGrp, snapTbl: st.snapTbl, snapKey: st.snapKey}
	budget := s.opts.MaxMessageBytes
	full := false
	taken := 0 // rows in the part
	for _, m := range st.memberships {
		if m.grp < b.snapGrp || full {
			continue
		}
		if m.grp > b.snapGrp {
			b.snapGrp, b.snapTbl, b.snapKey = m.grp, "", []byte{}
		}
		for !full {
			// The rows as the planner logged them: a row's tuple kept beside
			// its hash is the row as of its last log entry, which this
			// replica's cursor is at or before — a later change comes after
			// the snapshot, as the log brings it. A row without a tuple of
			// the current shape is read from the host's table.
			limit := snapshotLimit(budget-c.size, c.size, taken)
			page, byTable, err := s.snapshotPage(ctx, tx, m.grp, b.snapTbl, b.snapKey, limit)
			if err != nil {
				return nil, err
			}
			if len(page) == 0 {
				break
			}
			// sync_rows holds these rows in this group: a tuple of another
			// shape is read again from the host's table, as it is now.
			now := map[*table]map[string][]byte{}
			for t, keys := range byTable {
				cur, err := t.readTuples(ctx, tx, keys)
				if err != nil {
					return nil, err
				}
				now[t] = cur
			}
			for _, pk := range page {
				tuple := pk.tuple
				if tuple == nil {
					tuple = now[pk.t][string(pk.key)]
				}
				if tuple != nil {
					if need := len(tuple) + 2*len(pk.key) + 8; c.size+need > budget && !c.empty() {
						full = true
						break
					}
					c.upsert(pk.t, pk.key, tuple)
					taken++
				}
				b.snapTbl, b.snapKey = pk.tbl, pk.key
			}
			if len(page) < limit {
				break
			}
		}
	}
	if !c.empty() {
		var err error
		b.toRep, err = c.down(s, st.snapshot)
		return b, err
	}
	// Everything staged: the end.
	end, err := s.endSnapshot(ctx, tx, st)
	if err != nil {
		return nil, err
	}
	b.kind = "end"
	b.toRep = &syncpb.ToReplica{Body: &syncpb.ToReplica_EndSnapshot{EndSnapshot: end}}
	return b, nil
}

// snapshotRow is one row of a provisioning's page: its table and key, and
// the tuple the planner logged of it (nil: read from the host's table).
type snapshotRow struct {
	t     *table
	tbl   string
	key   []byte
	tuple []byte
}

// snapshotPage reads the next page of a group's rows after (afterTbl,
// afterKey), at most limit: each row's logged tuple where it has the
// current shape, and, by table, the keys of the catalog rows to read
// again from the host's tables.
func (s *Server) snapshotPage(ctx context.Context, tx pgx.Tx, grp int64, afterTbl string, afterKey []byte, limit int) ([]snapshotRow, map[*table][][]byte, error) {
	rows, err := tx.Query(ctx, s.sql.of(qSnapshotPage), grp, afterTbl, afterKey, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("reading group %d: %w", grp, err)
	}
	var page []snapshotRow
	byTable := map[*table][][]byte{}
	for rows.Next() {
		var pk snapshotRow
		var tuple []byte
		var shape *int64
		if err := rows.Scan(&pk.tbl, &pk.key, &tuple, &shape); err != nil {
			rows.Close()
			return nil, nil, err
		}
		pk.t = s.m.byName[pk.tbl]
		page = append(page, pk)
		if pk.t == nil || !pk.t.catalog {
			continue
		}
		if tuple != nil && shape != nil && *shape == pk.t.shape {
			page[len(page)-1].tuple = tuple
		} else {
			byTable[pk.t] = append(byTable[pk.t], pk.key)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return page, byTable, nil
}

// endSnapshot builds a provisioning's end: the catalogs it replaced, the
// replica's own settings as the server holds them, and the answers to
// wishes it holds.
func (s *Server) endSnapshot(ctx context.Context, tx pgx.Tx, st *replicaState) (*syncpb.EndSnapshot, error) {
	end := &syncpb.EndSnapshot{Snapshot: uint64(st.snapshot)}
	for _, t := range s.m.tables {
		if t.catalog {
			end.Tables = append(end.Tables, t.name)
		}
	}
	own, err := s.ownSettings(ctx, tx, st.id)
	if err != nil {
		return nil, err
	}
	end.Own = own
	if end.Answers, err = s.answersHeld(ctx, tx, st.id); err != nil {
		return nil, err
	}
	return end, nil
}

// maxSnapshotPage bounds the rows of one page of a provisioning's reads.
const maxSnapshotPage = 16 * snapshotPage

// snapshotLimit is how many rows the next page of a part reads: the first
// page snapshotPage; the next, as many as the part's rows so far say fill
// what is left of its budget, and a few more. A page a round trip cost a
// part some seven queries of 2,000 rows; each page the budget cuts short
// reads rows the next part reads again, so the estimate stays close.
func snapshotLimit(left, size, taken int) int {
	if taken == 0 || size <= 0 {
		return snapshotPage
	}
	n := left/max(size/taken, 1) + 1
	return min(max(n+n/16+16, 64), maxSnapshotPage)
}

// ownSettings lists, per setting table, the keys of the replica's rows the
// server records.
func (s *Server) ownSettings(ctx context.Context, q querier, replica uuid.UUID) ([]*syncpb.TableKeys, error) {
	var out []*syncpb.TableKeys
	for _, t := range s.m.tables {
		if t.tc.Mirror != codec.Setting {
			continue
		}
		rows, err := q.Query(ctx, t.selectOwnRows(t.tc.KeyIndex), replica)
		if err != nil {
			return nil, fmt.Errorf("reading the settings of %s: %w", replica, err)
		}
		tk := &syncpb.TableKeys{Table: t.name}
		vals := make([]codec.Value, len(t.tc.Columns))
		for rows.Next() {
			if err := t.scanRow(rows, t.tc.KeyIndex, vals); err != nil {
				rows.Close()
				return nil, err
			}
			tk.Keys = append(tk.Keys, []byte(t.tc.KeyOfRow(vals)))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out = append(out, tk)
	}
	return out, nil
}

// reissued handles a replica that applied message id, which the server
// never issued it or issued it again for another message: the server was
// restored from an older backup, and lost what the replica told it since —
// the uploads whose confirmations the replica applied among them. What was
// queued for the replica goes (it was numbered from the older position),
// the ids move past id, and the replica is provisioned again: at the end
// of it, it sends all its own rows again, and they are filed whatever
// their version.
func (s *Server) reissued(ctx context.Context, tx pgx.Tx, replica uuid.UUID, id uint64, nextID int64, reason string) error {
	s.log.Warn("magicsync/server: "+reason+" Provisioning the replica again.", "replica", replica, "applied", id, "issued", nextID-1)
	if _, err := tx.Exec(ctx, s.sql.of(qDropOutbox), replica); err != nil {
		return fmt.Errorf("magicsync/server: ack: %w", err)
	}
	if _, err := tx.Exec(ctx, s.sql.of(qDropIssued), replica); err != nil {
		return fmt.Errorf("magicsync/server: ack: %w", err)
	}
	if _, err := tx.Exec(ctx, s.sql.of(qReissue), replica, int64(id), reason); err != nil {
		return fmt.Errorf("magicsync/server: ack: %w", err)
	}
	return nil
}

// restored handles an upload that shows the replica numbering its uploads
// again from an older copy of its database: what was filed of the lane from
// that sequence on is forgotten (the uploads to come reuse those numbers),
// as is what was queued for the replica, and it is provisioned again, for
// it may lack what it had applied since. The caller files the upload.
func (s *Server) restored(ctx context.Context, tx pgx.Tx, replica uuid.UUID, lane string, seq uint64, reason string) error {
	s.log.Warn("magicsync/server: "+reason, "replica", replica)
	if _, err := tx.Exec(ctx, s.sql.of(qForgetFiledFrom), replica, lane, int64(seq)); err != nil {
		return fmt.Errorf("magicsync/server: filing: %w", err)
	}
	if _, err := tx.Exec(ctx, s.sql.of(qLowerTrimmed), replica, lane, int64(seq)); err != nil {
		return fmt.Errorf("magicsync/server: filing: %w", err)
	}
	if _, err := tx.Exec(ctx, s.sql.of(qDropOutbox), replica); err != nil {
		return fmt.Errorf("magicsync/server: filing: %w", err)
	}
	if _, err := tx.Exec(ctx, s.sql.of(qProvisionRestored), replica, reason); err != nil {
		return fmt.Errorf("magicsync/server: filing: %w", err)
	}
	return nil
}
