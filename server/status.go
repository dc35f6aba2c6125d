package server

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
)

// status.go holds Ping and Status: where every replica stands.

// StatusRejected is how many rows one side could not take Status lists per
// replica: the most recent ones. ReplicaStatus.RejectedTotal counts them
// all.
const StatusRejected = 100

// StatusOtherTables is how many tables the declarations do not name Status
// lists per replica, beside the declared ones (a replica may report tables
// of other declarations than the server's).
const StatusOtherTables = 16

// StatusBuild is how many bytes of a replica's build string Status shows.
const StatusBuild = 256

// ReplicaStatus is where one replica stands, as Status reads it.
type ReplicaStatus struct {
	ID uuid.UUID
	// LastSeen is when the replica last called (Next, Receive); zero if never.
	LastSeen time.Time
	// ReportedAt is when the replica last reported on itself — the rows it
	// has not sent yet, its backlog — which it does with every upload, rows
	// or none; zero if never. Unsent and Backlog are as of then.
	ReportedAt time.Time
	// Wishes counts the replica's wishes by where they stand; nil when it
	// has none.
	Wishes map[WishState]int
	// Commands counts the replica's commands, under way and ended, by
	// where they stand; nil when it has none.
	Commands map[CommandState]int
	// Online: the replica asked for its next message within about twice its
	// long-poll window, 4 s at least (or is asking now). The floor allows
	// for how polls are written: a replica's poll is written at most once
	// a second, and not again for half its window (a second at least).
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
	// what it has not sent yet, and what was filed from it: the declared
	// tables, then at most [StatusOtherTables] others, by name.
	Tables []TableStatus
	// Rejected lists rows one side could not take: the most recent
	// [StatusRejected], oldest first. RejectedTotal counts them all.
	Rejected      []RejectedRow
	RejectedTotal int
	// Backlog counts the rows the replica set aside after a permanent
	// refusal, as it last reported.
	Backlog int
	// Build names the replica's build, as it last reported (its first
	// [StatusBuild] bytes).
	Build string
}

// TableStatus is where one table of one replica stands.
type TableStatus struct {
	Table string
	// Mirror is the table's kind as the server's declarations say
	// (catalog, record, setting); zero for a table they do not declare.
	Mirror magicsync.Mirror
	// Holds is the rows the replica is known to hold as they are now: those
	// its acknowledged messages brought, not changed since, less those it
	// could not take (zero while it is being provisioned). Should is the
	// rows the server means it to hold (catalogs).
	Holds, Should int
	// Unsent counts rows written on the replica and not yet sent, as it
	// last reported (ReplicaStatus.ReportedAt).
	Unsent int
	// Filed counts rows filed from this replica (records, settings).
	Filed int
}

// RejectedRow is a row one side could not take: magicsync.RejectedRow,
// whose fields are documented there. Status fills Table, Key, Reason,
// Side and At.
type RejectedRow = magicsync.RejectedRow

// Side names the side of a sync that could not take a row: magicsync.Side.
type Side = magicsync.Side

// The sides that can refuse a row (magicsync's).
const (
	SideReplica = magicsync.SideReplica
	SideServer  = magicsync.SideServer
)

// Ping says whether the server's database answers, without reading
// anything: what a health check asks.
func (s *Server) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("magicsync/server: ping: %w", err)
	}
	return nil
}

// Status reads where every replica stands, in one query: exact and live.
// What it reads of each replica is bounded ([StatusRejected],
// [StatusOtherTables], [StatusBuild]), whatever the replicas reported.
func (s *Server) Status(ctx context.Context) ([]ReplicaStatus, error) {
	// The polls this process saw and has yet to write count.
	s.recordPolls(ctx)
	declared := make([]string, 0, len(s.m.tables))
	for _, t := range s.m.tables {
		declared = append(declared, t.name)
	}
	out, err := readStatus(ctx, s.pool, s.sql, declared, func(table string) magicsync.Mirror {
		if d := s.m.byName[table]; d != nil {
			return d.tc.Mirror
		}
		return 0
	})
	if err != nil {
		return nil, err
	}
	if err := countWishesAndCommands(ctx, s.pool, s.sql, out, s.m.wishes != nil, s.m.commands != nil); err != nil {
		return nil, err
	}
	return out, nil
}

// countWishesAndCommands fills each replica's Wishes (when wishes) and
// Commands (when commands).
func countWishesAndCommands(ctx context.Context, pool *pgxpool.Pool, sq *statements, out []ReplicaStatus, wishes, commands bool) error {
	if wishes {
		if err := countByReplica(ctx, pool, sq.of(qWishCountsByReplica), out, func(st *ReplicaStatus, state int16, n int) {
			if st.Wishes == nil {
				st.Wishes = map[WishState]int{}
			}
			st.Wishes[WishState(state)] += n
		}); err != nil {
			return err
		}
	}
	if commands {
		return countByReplica(ctx, pool, sq.of(qCommandCountsByReplica), out, func(st *ReplicaStatus, state int16, n int) {
			if st.Commands == nil {
				st.Commands = map[CommandState]int{}
			}
			st.Commands[CommandState(state)] += n
		})
	}
	return nil
}

// readStatus reads where every replica stands, in one query, but for its
// wishes: the tables declared first, then at most StatusOtherTables
// others, each of the kind mirror says.
func readStatus(ctx context.Context, pool *pgxpool.Pool, sq *statements, declared []string, mirror func(table string) magicsync.Mirror) ([]ReplicaStatus, error) {
	// A row the replica could not take is not held: it counts among the
	// rows its acknowledged messages did not bring, as those still on
	// their way do (each key once).
	rows, err := pool.Query(ctx, sq.of(qStatus), declared, StatusRejected, StatusBuild, StatusOtherTables)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: status: %w", err)
	}
	defer rows.Close()
	var out []ReplicaStatus
	for rows.Next() {
		var st ReplicaStatus
		var lastSeen, reportedAt *time.Time
		var queued, applied, backlog, rejectedTotal int64
		var tables, rejected []byte
		if err := rows.Scan(&st.ID, &lastSeen, &reportedAt, &st.Online, &st.Provisioning, &st.ProvisionReason, &queued, &applied, &backlog, &st.Build,
			&tables, &rejected, &rejectedTotal); err != nil {
			return nil, fmt.Errorf("magicsync/server: status: %w", err)
		}
		if lastSeen != nil {
			st.LastSeen = *lastSeen
		}
		if reportedAt != nil {
			st.ReportedAt = *reportedAt
		}
		st.Queued, st.LastApplied, st.Backlog, st.RejectedTotal = int(queued), uint64(applied), int(backlog), int(rejectedTotal)
		var ts []struct {
			T          string
			H, S, U, F int
		}
		if err := json.Unmarshal(tables, &ts); err != nil {
			return nil, fmt.Errorf("magicsync/server: status: %w", err)
		}
		for _, t := range ts {
			st.Tables = append(st.Tables, TableStatus{Table: t.T, Mirror: mirror(t.T), Holds: t.H, Should: t.S, Unsent: t.U, Filed: t.F})
		}
		var rs []struct {
			T, K, R string
			S       Side
			A       time.Time
		}
		if err := json.Unmarshal(rejected, &rs); err != nil {
			return nil, fmt.Errorf("magicsync/server: status: %w", err)
		}
		for _, r := range rs {
			k, _ := hex.DecodeString(r.K)
			st.Rejected = append(st.Rejected, RejectedRow{Table: r.T, Key: magicsync.Key(k), Reason: r.R, Side: r.S, At: r.A})
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("magicsync/server: status: %w", err)
	}
	return out, nil
}

// countByReplica runs query, which counts a replica's wishes or commands
// by state (replica, state, count), and hands each count to add with its
// replica's status.
func countByReplica(ctx context.Context, pool *pgxpool.Pool, query string, out []ReplicaStatus, add func(st *ReplicaStatus, state int16, n int)) error {
	if len(out) == 0 {
		return nil
	}
	rows, err := pool.Query(ctx, query)
	if err != nil {
		return fmt.Errorf("magicsync/server: status: %w", err)
	}
	byID := make(map[uuid.UUID]*ReplicaStatus, len(out))
	for i := range out {
		byID[out[i].ID] = &out[i]
	}
	var id uuid.UUID
	var state int16
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&id, &state, &n}, func() error {
		if st := byID[id]; st != nil {
			add(st, state, n)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("magicsync/server: status: %w", err)
	}
	return nil
}
