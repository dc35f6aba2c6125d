package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
)

// capture.go holds the two ways the server learns which rows the host
// changed (Options.Capture): what each needs of the database, New's check
// of it, Publication (the SQL a host runs for CaptureLogical, built in
// sqlgen.go) and Slots. Both feed the same notes (sync_touched) to the
// same planner; the reading of the slot is logical.go's.

// Capture says how the server learns which rows of the declared tables
// the host wrote.
type Capture uint8

const (
	// CaptureTriggers notes every key the host writes through triggers on
	// its tables (the SQL of Triggers), in the host's own transaction. It
	// needs nothing of PostgreSQL's configuration, and costs each of the
	// host's writes a second row written (and its WAL). The default.
	CaptureTriggers Capture = iota
	// CaptureLogical reads the host's changes from a logical replication
	// slot (PostgreSQL's pgoutput, over the publication of Publication):
	// the host's transactions carry no work of the engine's, and a change
	// is seen as soon as it commits. It needs wal_level=logical, a role
	// with the REPLICATION privilege, and the publication; New says which
	// is missing and what to run. New makes the slot when it is missing
	// (PostgreSQL makes it once the transactions running then have ended);
	// Run reads it in one process at a time (the slot takes one reader),
	// which another takes over when it dies.
	CaptureLogical
)

var captureNames = []string{CaptureTriggers: "triggers", CaptureLogical: "logical replication"}

// String names the way of capture.
func (c Capture) String() string {
	if int(c) < len(captureNames) {
		return captureNames[c]
	}
	return fmt.Sprintf("Capture(%d)", int(c))
}

// publicationName is the publication CaptureLogical reads in the engine's
// schema: one per schema, so that engines in other schemas of the
// database (Options.Schema) read their own tables.
func (e engineSchema) publicationName() string {
	if e.name == defaultSchema {
		return "magicsync"
	}
	return "magicsync_" + e.name
}

// slotName names the replication slot of the engine in schema of
// database: slots are named across the whole cluster, so the name holds a
// hash of both, after as much of the database's name as fits, for an
// operator reading pg_replication_slots.
func slotName(database, schema string) string {
	sum := sha256.Sum256([]byte(database + "\x00" + schema))
	var b strings.Builder
	for _, r := range strings.ToLower(database) {
		if b.Len() >= 30 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			b.WriteRune(r)
		}
	}
	return "magicsync_" + b.String() + "_" + hex.EncodeToString(sum[:6])
}

// fullIdentity reports whether the table of ts must log whole old rows
// (REPLICA IDENTITY FULL) for its notes: a note of columns beyond the
// table's own declared key — an Active view's reads, a replicas or members
// table — needs the old row's values on an UPDATE or DELETE, which
// PostgreSQL logs only for the key otherwise.
func (m *model) fullIdentity(ts *triggerSet) bool {
	t := m.catalogTable(ts.schema, ts.table)
	if t == nil {
		return true
	}
	key := t.tc.ColumnNames(t.tc.KeyIndex)
	for _, n := range ts.notes {
		for _, c := range n.cols {
			if !slices.Contains(key, c) {
				return true
			}
		}
	}
	return false
}

// keyIsPrimary reports whether the catalog of ts is keyed by its primary
// key (pkey, its columns), which PostgreSQL logs of a row updated or
// deleted when the table's replica identity is the default.
func (m *model) keyIsPrimary(ts *triggerSet, pkey []string) bool {
	t := m.catalogTable(ts.schema, ts.table)
	if t == nil {
		return false
	}
	key := slices.Clone(t.tc.ColumnNames(t.tc.KeyIndex))
	slices.Sort(key)
	pkey = slices.Clone(pkey)
	slices.Sort(pkey)
	return slices.Equal(key, pkey)
}

// catalogTable returns the catalog declared on schema.table, or nil.
func (m *model) catalogTable(schema, table string) *table {
	for _, t := range m.catalogs() {
		if t.tc.Schema == schema && t.tc.Name == table {
			return t
		}
	}
	return nil
}

// Publication returns the SQL that creates, or brings up to date, what
// CaptureLogical needs in the database: the publication of every table the
// engine reads the changes of (the catalogs, the replicas table, the
// members tables of Grouped routes, the tables an Active view reads), and
// REPLICA IDENTITY FULL on the tables whose changes it reads beyond their
// key. It is idempotent. Add it to the host's migrations, or let Open run
// it; the role that runs it must own the tables.
//
// PostgreSQL must also run with wal_level=logical (postgresql.conf, or
// ALTER SYSTEM SET wal_level = logical, and a restart), and the server's
// role needs the REPLICATION privilege (ALTER ROLE ... REPLICATION).
func Publication(codecs *magicsync.Codecs, opts Options) (string, error) {
	m, err := newModel(codecs, opts)
	if err != nil {
		return "", err
	}
	return m.publicationSQL(), nil
}

// checkLogical lists what the database lacks for CaptureLogical, each
// with what to run.
func (s *Server) checkLogical(ctx context.Context) ([]string, error) {
	var level string
	var replicate bool
	if err := s.pool.QueryRow(ctx, s.sql.of(qLogicalSettings)).Scan(&level, &replicate); err != nil {
		return nil, fmt.Errorf("magicsync/server: reading wal_level and the role's privileges: %w", err)
	}
	var problems []string
	if level != "logical" {
		problems = append(problems, fmt.Sprintf("Capture is CaptureLogical, but PostgreSQL runs wal_level=%s: set wal_level = logical (ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL; on a hosted service, its logical replication setting), or use CaptureTriggers", level))
	}
	if !replicate {
		problems = append(problems, "Capture is CaptureLogical, but the server's role may not replicate: run ALTER ROLE <the role> REPLICATION (on a hosted service, grant its replication role), or use CaptureTriggers")
	}
	pub := s.m.engine.publicationName()
	rows, err := s.pool.Query(ctx, s.sql.of(qPublicationTables), pub)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: reading publication %s: %w", pub, err)
	}
	type publishedTable struct {
		ident string   // relreplident: d(efault), f(ull), i(ndex), n(othing)
		pkey  []string // the primary key's columns
	}
	published := map[[2]string]publishedTable{}
	for rows.Next() {
		var schema, table string
		var p publishedTable
		if err := rows.Scan(&schema, &table, &p.ident, &p.pkey); err != nil {
			rows.Close()
			return nil, err
		}
		published[[2]string{schema, table}] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("magicsync/server: reading publication %s: %w", pub, err)
	}
	var missing, partial []string
	for _, ts := range s.m.triggerSets() {
		p, ok := published[[2]string{ts.schema, ts.table}]
		if !ok {
			missing = append(missing, ts.qname())
			continue
		}
		if p.ident != "f" && (s.m.fullIdentity(ts) || !s.m.keyIsPrimary(ts, p.pkey)) {
			partial = append(partial, ts.qname())
		}
	}
	if len(missing) > 0 || len(partial) > 0 {
		var why []string
		if len(missing) > 0 {
			why = append(why, fmt.Sprintf("publication %s lacks %s", pub, strings.Join(missing, ", ")))
		}
		if len(partial) > 0 {
			why = append(why, fmt.Sprintf("%s must log whole old rows (REPLICA IDENTITY FULL)", strings.Join(partial, ", ")))
		}
		problems = append(problems, fmt.Sprintf("%s: run the SQL of server.Publication(codecs, opts) (add it to your migrations):\n%s", strings.Join(why, "; "), s.m.publicationSQL()))
	}
	return problems, nil
}

// SlotStatus is a replication slot of the engine's (CaptureLogical) in the
// PostgreSQL cluster: every engine's, of every database, so that a slot
// whose head office is gone is found by the WAL it holds back.
type SlotStatus struct {
	// Name is the slot's name: magicsync_, the database's name as far as
	// it fits, and a hash of the database's and the schema's.
	Name string
	// Database is the database the slot reads.
	Database string
	// Active says a process reads it now.
	Active bool
	// Retained is the WAL PostgreSQL keeps for the slot, in bytes: from
	// the oldest position it may be asked for again to the current one.
	// A slot nobody reads keeps more and more, until the host's
	// max_slot_wal_keep_size, past which PostgreSQL invalidates it.
	Retained int64
	// Lost says PostgreSQL invalidated the slot (it held back more than
	// max_slot_wal_keep_size); its engine, once it runs again, makes it
	// anew and plans every row.
	Lost bool
}

// Slots lists the replication slots of the engine in the cluster pool's
// database is on (named magicsync_…), for an operator: a slot no process
// has read for long, of a head office removed, holds back WAL until it is
// dropped (SELECT pg_drop_replication_slot('name')).
func Slots(ctx context.Context, pool *pgxpool.Pool) ([]SlotStatus, error) {
	rows, err := pool.Query(ctx, qSlots)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: reading the replication slots: %w", err)
	}
	slots, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SlotStatus, error) {
		var st SlotStatus
		err := row.Scan(&st.Name, &st.Database, &st.Active, &st.Retained, &st.Lost)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: reading the replication slots: %w", err)
	}
	return slots, nil
}
