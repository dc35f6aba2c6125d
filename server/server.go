package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/serverhook"
)

// server.go holds the engine's front: its errors, Options, Server and New,
// which checks the host's schema against the declarations.

// ErrPermanent is wrapped by every error a transport must answer with a
// permanent refusal (a 4xx other than 408 and 429): a message that is
// malformed or speaks a newer protocol, an unknown replica, a replica
// naming another's id, a failed authentication. Transient errors (the
// database out of reach, a cancelled context) do not wrap it.
var ErrPermanent = errors.New("magicsync/server: refused for good")

// ErrUnknownReplica is wrapped by the errors about a replica id that is no
// row of the replicas table. It wraps ErrPermanent.
var ErrUnknownReplica = fmt.Errorf("%w: unknown replica", ErrPermanent)

// ErrUnauthorized is wrapped by the error Authenticate returns for a wrong
// or missing secret. It wraps ErrPermanent.
var ErrUnauthorized = fmt.Errorf("%w: unauthorized", ErrPermanent)

// ErrNotIssued is wrapped by the error Ack returns for a message id the
// server never issued the replica — 0, or beyond the last it issued — and
// by Next's and Receive's for a report (Applied, Up.LastApplied) of
// an id the server never issued the replica at or beyond 2^62, the bound
// of such reports. It wraps ErrPermanent; nothing changed. (A replica that truly applied a
// message the server does not know of, the server having been restored
// from an older backup, says so by its report of the last message it
// applied, Next's Applied or Up.LastApplied, and is provisioned
// again; an acknowledgement never moves the server's ids.)
var ErrNotIssued = fmt.Errorf("%w: message never issued", ErrPermanent)

// Options tune a Server.
type Options struct {
	// Replicas names the host table whose rows are the replicas, as
	// "schema.table(id_column)", e.g. "shop.registers(id)". The id column
	// is a uuid. Required.
	Replicas string
	// Logger receives the engine's logs. Nil means slog.Default().
	Logger *slog.Logger
	// PassEvery is the slow timer between passes of Run, which starts a
	// pass sooner when the host's writes noted keys (see PollEvery). Zero
	// means 1 second.
	PassEvery time.Duration
	// PollEvery is how often Run looks whether the host's writes noted
	// keys for a pass: one read of a sequence, which costs the writers
	// nothing (the triggers notify nobody). It is the latency a change
	// waits before its pass, PollEvery/2 on average, while the host
	// writes; after a second without writes Run looks less and less
	// often, down to every 8 × PollEvery, so the first write after a
	// quiet spell waits up to that long. Zero means 5 ms.
	PollEvery time.Duration
	// Linger is the least time between two passes of Run, and between
	// two messages of changes to one replica from this process: a change
	// seen while the last pass, or the replica's last message, is more
	// recent than Linger waits out the rest of it, and goes with the
	// changes that follow it. Zero (the default) plans and delivers each
	// change as soon as it is seen, for the lowest latency. Under a steady
	// stream of small host transactions, a linger of some tens of
	// milliseconds has one pass and one message carry many of them, and
	// the engine's PostgreSQL work per host transaction falls about in
	// proportion (benchmark 16); a change after a spell longer than Linger
	// without any still goes at once. A provisioning, and the
	// confirmations of uploads, never wait for it. Under a linger the
	// watch looks every Linger/2 while the host writes (not PollEvery),
	// and under CaptureLogical the slot's reader writes its notes at most
	// once a linger too. Negative means zero.
	Linger time.Duration
	// AuthCacheFor is how long Authenticate trusts what it read of a
	// replica's credentials before it reads them again: a replica polling
	// often then costs the database a statement per AuthCacheFor, not one
	// per call. Credentials makes every process serving the database
	// forget what it read of that replica at once (through Run's
	// listener); a process that does not Run forgets it after
	// AuthCacheFor. While Run's listener hears, a known replica's are
	// kept for ten minutes (a rotation is heard at once; a listener that
	// stops hearing forgets them all), an unknown replica's for
	// AuthCacheFor, so that one added to the replicas table is found.
	// Zero means 30 seconds; negative reads them at every call.
	AuthCacheFor time.Duration
	// MaxMessageBytes bounds one message to a replica; a larger difference
	// goes as several messages. Zero means 1 MiB. (A single row larger than
	// the bound still goes, alone.)
	MaxMessageBytes int
	// Schema is the PostgreSQL schema that holds the engine's own tables
	// and functions (sync_*, the triggers' functions among them). Empty
	// means "public". MigrateSchema creates it; it, Triggers and New must
	// be given the same. It is a name of at most 63 bytes without quotes,
	// percent signs or control characters.
	Schema string
	// Capture says how the server learns which rows the host wrote:
	// triggers on its tables (CaptureTriggers, the zero value) or
	// PostgreSQL's logical replication (CaptureLogical), which costs the
	// host's transactions nothing but needs wal_level=logical, the
	// REPLICATION privilege and the publication of Publication.
	Capture Capture
	// Commands turns on commands (IssueCommand): one-shot actions a
	// replica runs at most once, with a result. They travel in the
	// engine's table sync_commands, which the planner routes as it routes
	// wishes: Triggers' SQL then covers it (and, under CaptureLogical,
	// Publication's), so run it again after turning commands on.
	Commands bool
	// KeepEvents is how long the events a host follows (Events) are kept
	// at least: Run trims older ones, and a position older than that may
	// find events trimmed (ErrEventsTrimmed). Zero means 7 days.
	KeepEvents time.Duration
}

// Server is the engine on the head-office side. Build it with New; it is
// safe for concurrent use, and any number of processes may serve the same
// database (one plans at a time).
type Server struct {
	pool   *pgxpool.Pool
	codecs *magicsync.Codecs
	m      *model
	opts   Options
	log    *slog.Logger
	// sql renders the engine's statements (queries.go) in Options.Schema.
	sql *statements
	// logTable names sync_log for COPY, which takes no statement.
	logTable pgx.Identifier

	hub *hub
	// out is the outbox's own state (outbox.go).
	out outbox

	groupMu  sync.Mutex
	groupIDs map[string]int64 // group name to id; ids never change

	// creds is what Authenticate read of replicas' credentials lately.
	creds credsCache
	// memo is what this process knows of the replicas it served (memo.go).
	memo replicaMemo

	// pollQueryTimeout is pollQueryTimeout; the tests shorten it.
	pollQueryTimeout time.Duration
	// passBatch is passBatch; the tests shorten it.
	passBatch int

	// plan is the planner's own state (plan.go).
	plan planner
	// stats is what this process counts for Stats (stats.go).
	stats stats
	// nonce tells this process's notifications from others'.
	nonce string
	// slot is the replication slot CaptureLogical reads (slotName).
	slot string
	// bell wakes this process's FollowEvents calls (events.go).
	bell eventBell

	// Hooks for the tests (export_test.go); nil otherwise.
	hooks struct {
		// passLocked runs in a pass that holds the planner's lock.
		passLocked func()
		// passDone runs as pass returns.
		passDone func()
		// provisionBuilt runs in a build that started a provisioning,
		// once its first message is built and before it commits.
		provisionBuilt func(replica uuid.UUID)
		// listening runs once Run's listener LISTENs.
		listening func()
		// heard runs as Run's listener hears this process's heartbeat.
		heard func()
		// secretCompared runs in Authenticate with the stored hash it
		// compares the secret's with (a stand-in when there is none).
		secretCompared func(stored []byte)
		// slotFlushed runs as the slot's reader committed a batch of
		// notes, inTx true when a transaction is still streaming.
		slotFlushed func(inTx bool)
	}
	// schema is Schema's encoded message, made once; foreignKeys are the
	// foreign keys among the declared tables it carries, read by New.
	schemaOnce  sync.Once
	schema      []byte
	foreignKeys foreignKeys
}

// New checks the database — the engine's schema steps applied, every
// declared table present with its columns in compatible types and its key
// unique, the replicas and members tables present, the triggers installed
// and current — and returns a Server. Each refusal says what to run.
//
// A Follows route's catalog is the one its column's foreign key points
// at: New refuses a Follows column without such a key, and routes that
// follow each other in a cycle. An Active view must show the table's key
// columns.
//
// Columns of type timestamp without time zone are refused: a time travels
// as an instant (UTC microseconds), which such a column cannot hold
// without guessing a zone. Use timestamptz.
func New(ctx context.Context, pool *pgxpool.Pool, codecs *magicsync.Codecs, opts Options) (*Server, error) {
	m, err := newModel(codecs, opts)
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PollEvery <= 0 {
		opts.PollEvery = 5 * time.Millisecond
	}
	if opts.PassEvery <= 0 {
		opts.PassEvery = time.Second
	}
	if opts.AuthCacheFor == 0 {
		opts.AuthCacheFor = 30 * time.Second
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 1 << 20
	}
	if opts.Capture > CaptureLogical {
		return nil, fmt.Errorf("magicsync/server: Options.Capture is %v: use CaptureTriggers or CaptureLogical", opts.Capture)
	}
	s := &Server{pool: pool, codecs: codecs, m: m, opts: opts, log: opts.Logger,
		hub: newHub(), out: outbox{cache: newRangeCache(64 << 20), ahead: make(chan uuid.UUID, 256)}, groupIDs: map[string]int64{},
		nonce: strings.ReplaceAll(uuid.NewString(), "-", ""),
		sql:   &statements{schema: m.engine}, logTable: pgx.Identifier{m.engine.name, "sync_log"}}
	s.pollQueryTimeout = pollQueryTimeout
	s.passBatch = passBatch
	s.out.acks = batcher[ackReq, ackOutcome]{run: s.ackBatch, maxBatch: maxAckBatch, maxRunning: maxAckRunning}
	s.out.deltas = batcher[uuid.UUID, deltaOutcome]{run: s.buildDeltas, maxBatch: maxDeltaBatch, maxRunning: maxDeltaRunning}
	s.out.seens = batcher[seenReq, seenOutcome]{run: s.seenBatch, maxBatch: maxSeenBatch, maxRunning: maxSeenRunning}
	if err := s.checkSchema(ctx); err != nil {
		return nil, err
	}
	if opts.Capture == CaptureLogical {
		var database string
		if err := pool.QueryRow(ctx, qCurrentDatabase).Scan(&database); err != nil {
			return nil, fmt.Errorf("magicsync/server: reading the database's name: %w", err)
		}
		s.slot = slotName(database, m.engine.name)
		if err := s.ensureSlot(ctx); err != nil {
			return nil, fmt.Errorf("magicsync/server: %w", err)
		}
	}
	if s.foreignKeys, err = s.readForeignKeys(ctx); err != nil {
		return nil, err
	}
	m.order = m.planOrder()
	if h := serverhook.From(ctx); h != nil {
		h.Pass, h.CatchUp = s.pass, s.catchUp
	}
	return s, nil
}

// Begin starts a transaction on the server's pool, for hosts writing
// catalog rows and wishes (Desire) beside their own.
func (s *Server) Begin(ctx context.Context) (pgx.Tx, error) {
	return s.pool.Begin(ctx)
}

// colInfo is one column of a host table as PostgreSQL has it.
type colInfo struct {
	typ     string // format_type, e.g. "character varying(20)"
	typname string // pg_type.typname, e.g. "varchar"
}

// tableColumns reads the columns of a host table; ok is false when it has
// none: the table does not exist.
func (s *Server) tableColumns(ctx context.Context, schema, table string) (map[string]colInfo, bool, error) {
	rows, err := s.pool.Query(ctx, qTableColumns, codec.QuoteIdent(schema)+"."+codec.QuoteIdent(table))
	if err != nil {
		return nil, false, err
	}
	cols := map[string]colInfo{}
	for rows.Next() {
		var name string
		var ci colInfo
		if err := rows.Scan(&name, &ci.typ, &ci.typname); err != nil {
			return nil, false, err
		}
		cols[name] = ci
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	return cols, len(cols) > 0, nil
}

// compatible says whether a PostgreSQL type holds a column's kind, and if
// not, what to do.
func compatible(kind codec.ValueKind, ci colInfo) (ok bool, advice string) {
	var want []string
	switch kind.String() {
	case "uuid":
		want = []string{"uuid"}
	case "text":
		want = []string{"text", "varchar", "bpchar", "citext"}
	case "int":
		want = []string{"int2", "int4", "int8"}
	case "float":
		want = []string{"float4", "float8", "numeric"}
	case "bool":
		want = []string{"bool"}
	case "bytes":
		want = []string{"bytea"}
	case "time":
		want = []string{"timestamptz"}
		if ci.typname == "timestamp" {
			return false, "a time travels as an instant; make it timestamp with time zone (ALTER COLUMN ... TYPE timestamptz USING ... AT TIME ZONE 'UTC')"
		}
	case "decimal":
		want = []string{"numeric", "text", "varchar"}
	}
	for _, w := range want {
		if ci.typname == w {
			return true, ""
		}
	}
	return false, fmt.Sprintf("a Go %s needs one of %s", kind, strings.Join(want, ", "))
}

// checkSchema is New's check of the database.
func (s *Server) checkSchema(ctx context.Context) error {
	if err := s.checkSchemaStep(ctx); err != nil {
		return err
	}
	problems, err := s.checkTables(ctx)
	if err != nil {
		return err
	}
	more, err := s.resolveFollows(ctx)
	if err != nil {
		return err
	}
	problems = append(problems, more...)
	for _, t := range s.m.tables {
		more, err := s.checkActive(ctx, t)
		if err != nil {
			return err
		}
		problems = append(problems, more...)
	}
	more, err = s.checkReplicasAndMembers(ctx)
	if err != nil {
		return err
	}
	problems = append(problems, more...)
	if len(problems) == 0 {
		check := s.checkTriggers
		if s.opts.Capture == CaptureLogical {
			check = s.checkLogical
		}
		if problems, err = check(ctx); err != nil {
			return err
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("magicsync/server: the database does not match the declarations:\n  - %s", strings.Join(problems, "\n  - "))
	}
	return nil
}

// checkSchemaStep refuses a database whose engine's schema is behind
// this build's steps, saying what to run.
func (s *Server) checkSchemaStep(ctx context.Context) error {
	var have int
	var exists bool
	if err := s.pool.QueryRow(ctx, s.sql.of(qSchemaExists)).Scan(&exists); err != nil {
		return fmt.Errorf("magicsync/server: reading the engine's schema version: %w", err)
	}
	if exists {
		if err := s.pool.QueryRow(ctx, s.sql.of(qSchemaStep)).Scan(&have); err != nil {
			return fmt.Errorf("magicsync/server: reading the engine's schema version: %w", err)
		}
	}
	if want := latestStep(); have < want {
		run := "server.Migrate(ctx, pool)"
		if s.m.engine.name != defaultSchema {
			run = fmt.Sprintf("server.MigrateSchema(ctx, pool, %q)", s.m.engine.name)
		}
		return fmt.Errorf("magicsync/server: the engine's schema is at step %d, this build needs %d: run %s first", have, want, run)
	}
	return nil
}

// checkTables lists what the declared tables lack in the database:
// tables, columns, compatible types, a unique key on the declared key. It
// notes each column's PostgreSQL type.
func (s *Server) checkTables(ctx context.Context) ([]string, error) {
	var problems []string
	checked := s.m.tables
	if s.m.wishes != nil {
		checked = append(slices.Clip(checked), s.m.wishes)
	}
	if s.m.commands != nil {
		checked = append(slices.Clip(checked), s.m.commands)
	}
	for _, t := range checked {
		cols, ok, err := s.tableColumns(ctx, t.tc.Schema, t.tc.Name)
		if err != nil {
			return nil, fmt.Errorf("magicsync/server: reading table %s: %w", t.qname, err)
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("table %s does not exist: create it (the %v %q is declared by %v)", t.qname, t.tc.Mirror, t.name, t.tc.Type))
			continue
		}
		t.pgType = make([]string, len(t.tc.Columns))
		for i, c := range t.tc.Columns {
			if c.ReplicaOwned {
				// The replica's alone: the server never reads, writes or
				// sends it, and its table need not have it.
				continue
			}
			ci, ok := cols[c.Name]
			if !ok {
				problems = append(problems, fmt.Sprintf("table %s has no column %q (field %s.%s): add it, or skip the field with db:\"-\"", t.qname, c.Name, t.tc.Type, c.Field))
				continue
			}
			if ok, advice := compatible(c.Kind, ci); !ok {
				problems = append(problems, fmt.Sprintf("column %s.%q is %s: %s", t.qname, c.Name, ci.typ, advice))
			}
			t.pgType[i] = ci.typ
		}
		if err := s.checkUniqueKey(ctx, t); err != nil {
			problems = append(problems, err.Error())
		}
	}
	return problems, nil
}

// checkReplicasAndMembers lists what the replicas table and the Grouped
// routes' members tables lack.
func (s *Server) checkReplicasAndMembers(ctx context.Context) ([]string, error) {
	var problems []string
	rcols, ok, err := s.tableColumns(ctx, s.m.replicas.schema, s.m.replicas.table)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: reading the replicas table: %w", err)
	}
	if !ok {
		problems = append(problems, fmt.Sprintf("the replicas table %s (Options.Replicas) does not exist", s.m.replicas.qname()))
	} else if ci, ok := rcols[s.m.replicas.column]; !ok || ci.typname != "uuid" {
		problems = append(problems, fmt.Sprintf("the replicas table %s needs a uuid column %q (Options.Replicas)", s.m.replicas.qname(), s.m.replicas.column))
	}
	for _, mb := range s.m.members {
		mcols, ok, err := s.tableColumns(ctx, mb.Schema, mb.Table)
		if err != nil {
			return nil, fmt.Errorf("magicsync/server: reading members table: %w", err)
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("the members table %s (of a Grouped route) does not exist", mb.qname()))
			continue
		}
		for _, c := range []string{mb.Replica, mb.Group} {
			if _, ok := mcols[c]; !ok {
				problems = append(problems, fmt.Sprintf("the members table %s has no column %q", mb.qname(), c))
			}
		}
	}
	return problems, nil
}

// checkTriggers lists the tables whose triggers are missing, disabled or
// outdated, with the SQL that installs them.
func (s *Server) checkTriggers(ctx context.Context) ([]string, error) {
	var stale []string
	for _, ts := range s.m.triggerSets() {
		_, h := ts.sql()
		// Current: the four triggers of this version, enabled, calling
		// this version's function, whose body is still the one Triggers
		// writes (not replaced by another's, or an older release's).
		// White space is folded on both sides by the same rule, ASCII
		// white space only (see funcSource): \s depends on the
		// database's locale, and Go's unicode.IsSpace also counts a
		// no-break space, which an identifier may hold.
		var n int
		if err := s.pool.QueryRow(ctx, s.sql.of(qTriggersCurrent),
			ts.qname(), ts.triggerNames(h), "sync_fn_"+h, ts.funcSource()).Scan(&n); err != nil {
			return nil, fmt.Errorf("magicsync/server: reading the triggers of %s: %w", ts.qname(), err)
		}
		if n != 4 {
			stale = append(stale, ts.qname())
		}
	}
	if len(stale) > 0 {
		sql, _ := Triggers(s.codecs, s.opts)
		return []string{fmt.Sprintf("the triggers of %s are missing, disabled or outdated: run the SQL of server.Triggers(codecs, opts) (add it to your migrations):\n%s", strings.Join(stale, ", "), sql)}, nil
	}
	return nil, nil
}

// checkUniqueKey checks that the key columns are the columns of a primary
// key or unique index, which filing's ON CONFLICT needs.
func (s *Server) checkUniqueKey(ctx context.Context, t *table) error {
	keys := t.tc.ColumnNames(t.tc.KeyIndex)
	var ok bool
	err := s.pool.QueryRow(ctx, qUniqueKey, t.qname, keys).Scan(&ok)
	if err != nil {
		return fmt.Errorf("reading the indexes of %s: %w", t.qname, err)
	}
	if !ok {
		return fmt.Errorf("table %s has no primary key or unique index on its key (%s): add one, e.g. ALTER TABLE %s ADD PRIMARY KEY (%s)",
			t.qname, strings.Join(keys, ", "), t.qname, quoteList(keys))
	}
	return nil
}
