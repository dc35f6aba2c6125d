package server

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
)

// ReplicaStatus is where one replica stands, as Status reads it.
type ReplicaStatus struct {
	ID uuid.UUID
	// LastSeen is when the replica last called (Next, Receive); zero if never.
	LastSeen time.Time
	// Online: the replica asked for its next message within about twice its
	// long-poll window (or is asking now).
	Online bool
	// Provisioning: the replica is to be, or is being, provisioned, for
	// ProvisionReason (e.g. "new replica", "group changed: ...", "digest of
	// products disagrees: replica holds 5 rows, server expects 7").
	Provisioning    bool
	ProvisionReason string
	// Queued counts messages waiting for the replica: those built and not
	// acknowledged, plus one when its groups' logs are ahead of it or a
	// provisioning waits to start.
	Queued int
	// LastApplied is the id of the last message the replica reported
	// applied (or acknowledged).
	LastApplied uint64
	// Tables: per table, what the replica holds and should hold (catalogs),
	// what it has not sent yet, and what was filed from it.
	Tables []TableStatus
	// Rejected lists rows one side could not take.
	Rejected []RejectedRow
	// Backlog counts the rows the replica set aside after a permanent
	// refusal, as it last reported.
	Backlog int
	// Build names the replica's build, as it last reported.
	Build string
}

// TableStatus is where one table of one replica stands.
type TableStatus struct {
	Table string
	// Holds is the rows the replica is known to hold as they are now: those
	// its acknowledged messages brought, not changed since (zero while it
	// is being provisioned). Should is the rows the server means it to hold
	// (catalogs).
	Holds, Should int
	// Unsent counts rows written on the replica and not yet sent, as it
	// last reported.
	Unsent int
	// Filed counts rows filed from this replica (records, settings).
	Filed int
}

// RejectedRow is a row one side could not take.
type RejectedRow struct {
	Table string
	Key   magicsync.Key
	// Reason says why.
	Reason string
	// Side is "replica" (it could not apply the row) or "server" (it
	// refused to file it).
	Side string
	At   time.Time
}

// Status reads where every replica stands, in one query: exact and live.
func (s *Server) Status(ctx context.Context) ([]ReplicaStatus, error) {
	rows, err := s.pool.Query(ctx, `SELECT r.id, r.last_seen,
		coalesce(r.last_poll > now() - 2 * greatest(coalesce(r.poll_window, interval '30 seconds'), interval '1 second'), false),
		r.provision_needed OR r.snapshot <> 0, coalesce(r.provision_reason, ''),
		(SELECT count(*) FROM public.sync_outbox o WHERE o.replica = r.id)
		  + CASE WHEN r.provision_needed OR EXISTS (SELECT 1 FROM public.sync_memberships m JOIN public.sync_groups g ON g.id = m.grp
		                   WHERE m.replica = r.id AND g.head > m.sent_pos) THEN 1 ELSE 0 END,
		r.last_applied, r.backlog, r.build,
		coalesce((SELECT jsonb_agg(jsonb_build_object('t', x.tbl, 'h', x.held, 's', x.should, 'u', x.unsent, 'f', x.filed) ORDER BY x.tbl)
		  FROM (SELECT coalesce(rt.tbl, sh.tbl) AS tbl,
		               CASE WHEN r.provision_needed OR r.snapshot <> 0 THEN 0
		                    ELSE greatest(coalesce(sh.should, 0) - coalesce((SELECT count(DISTINCT l.key) FROM public.sync_memberships m
		                           JOIN public.sync_log l ON l.grp = m.grp AND l.pos > m.acked_pos AND l.tbl = sh.tbl
		                           JOIN public.sync_rows sr ON sr.tbl = l.tbl AND sr.key = l.key AND sr.grp = l.grp
		                           WHERE m.replica = r.id), 0), 0) END AS held,
		               coalesce(sh.should, 0) AS should,
		               coalesce(rt.unsent, 0) AS unsent, coalesce(rt.filed, 0) AS filed
		        FROM (SELECT * FROM public.sync_replica_tables WHERE replica = r.id) rt
		        FULL JOIN (SELECT d.tbl, sum(d.rows) AS should FROM public.sync_memberships m
		                   JOIN public.sync_digests d ON d.grp = m.grp WHERE m.replica = r.id GROUP BY d.tbl) sh
		        ON sh.tbl = rt.tbl) x), '[]'),
		coalesce((SELECT jsonb_agg(jsonb_build_object('t', j.tbl, 'k', encode(j.key, 'hex'), 'r', j.reason, 's', j.side, 'a', j.at) ORDER BY j.at, j.tbl)
		  FROM public.sync_rejected j WHERE j.replica = r.id), '[]')
		FROM public.sync_replicas r ORDER BY r.id`)
	if err != nil {
		return nil, fmt.Errorf("server: status: %w", err)
	}
	defer rows.Close()
	var out []ReplicaStatus
	for rows.Next() {
		var st ReplicaStatus
		var lastSeen *time.Time
		var queued, applied, backlog int64
		var tables, rejected []byte
		if err := rows.Scan(&st.ID, &lastSeen, &st.Online, &st.Provisioning, &st.ProvisionReason, &queued, &applied, &backlog, &st.Build, &tables, &rejected); err != nil {
			return nil, fmt.Errorf("server: status: %w", err)
		}
		if lastSeen != nil {
			st.LastSeen = *lastSeen
		}
		st.Queued, st.LastApplied, st.Backlog = int(queued), uint64(applied), int(backlog)
		var ts []struct {
			T          string
			H, S, U, F int
		}
		if err := json.Unmarshal(tables, &ts); err != nil {
			return nil, fmt.Errorf("server: status: %w", err)
		}
		for _, t := range ts {
			st.Tables = append(st.Tables, TableStatus{Table: t.T, Holds: t.H, Should: t.S, Unsent: t.U, Filed: t.F})
		}
		var rs []struct {
			T, K, R, S string
			A          time.Time
		}
		if err := json.Unmarshal(rejected, &rs); err != nil {
			return nil, fmt.Errorf("server: status: %w", err)
		}
		for _, r := range rs {
			k, _ := hex.DecodeString(r.K)
			st.Rejected = append(st.Rejected, RejectedRow{Table: r.T, Key: magicsync.Key(k), Reason: r.R, Side: r.S, At: r.A})
		}
		out = append(out, st)
	}
	return out, rows.Err()
}
