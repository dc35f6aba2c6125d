package server

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/magicsync/magicsync/internal/codec"
)

// queries.go holds the engine's fixed SQL: its statements on its sync_*
// tables and its reads of PostgreSQL's catalog, grouped by concept and
// named for the file that uses them, and how they are rendered for the
// engine's schema. (The SQL generated for the host's tables is
// sqlgen.go's.) A name ending in Fmt is a template for fmt.Sprintf, whose
// verbs name the host's tables, columns or expressions: sqlgen.go fills
// them in.
//
// Every statement here, every migration (migrations/*.sql) and the
// triggers' SQL name the engine's schema by schemaPlaceholder, which a
// Server replaces once per statement (statements.of) with Options.Schema
// as SQL names it: public, unquoted, by default, so that the default's SQL
// is what it always was.

// schemaPlaceholder stands for the engine's schema in the engine's SQL.
const schemaPlaceholder = "{schema}"

// defaultSchema is the engine's schema when Options.Schema is empty.
const defaultSchema = "public"

// engineSchema is Options.Schema, checked.
type engineSchema struct {
	name string // the schema's name, "public" by default
	sql  string // the name as SQL writes it: public unquoted, others quoted
}

// parseSchema checks Options.Schema (empty means public). Beyond
// PostgreSQL's rules (at most 63 bytes; no control character, double quote
// or invalid UTF-8, as the other names), it refuses a single quote, a
// percent and a dollar sign, so that the quoted name may stand in a string
// literal, a dollar-quoted body and a template for fmt.Sprintf alike, and
// never reads as a parameter.
func parseSchema(name string) (engineSchema, error) {
	if name == "" || name == defaultSchema {
		return engineSchema{name: defaultSchema, sql: defaultSchema}, nil
	}
	var why string
	switch {
	case len(name) > 63:
		why = fmt.Sprintf("is %d bytes, over PostgreSQL's 63", len(name))
	case strings.ContainsAny(name, "\"'%$"):
		why = "holds a quote, a percent or a dollar sign"
	case !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl):
		why = "holds a control character or invalid UTF-8"
	}
	if why != "" {
		return engineSchema{}, fmt.Errorf("magicsync/server: Options.Schema %q %s: name a schema of at most 63 bytes without quotes, percent or dollar signs or control characters, or leave it empty for public", name, why)
	}
	return engineSchema{name: name, sql: codec.QuoteIdent(name)}, nil
}

// render names the engine's schema in sql.
func (e engineSchema) render(sql string) string {
	return strings.ReplaceAll(sql, schemaPlaceholder, e.sql)
}

// wakeChannel is the channel of the wake-ups of this schema's engines:
// wakeChannel in public, and one named after the schema's hash elsewhere
// (a channel name is at most 63 bytes), so that engines in two schemas of
// one database do not wake each other's waiters.
func (e engineSchema) wakeChannel() string {
	if e.name == defaultSchema {
		return wakeChannel
	}
	h := fnv.New64a()
	h.Write([]byte(e.name))
	return fmt.Sprintf("%s_%016x", wakeChannel, h.Sum64())
}

// planLock is the planner's advisory lock key in this schema: lockPlan in
// public, and a key of the schema's own elsewhere, so that the engines of
// two schemas in one database plan side by side.
func (e engineSchema) planLock() int64 {
	if e.name == defaultSchema {
		return lockPlan
	}
	h := fnv.New64a()
	h.Write([]byte(e.name))
	return lockPlan ^ int64(h.Sum64())
}

// statements are the engine's statements rendered for one schema, each
// once, at its first use.
type statements struct {
	schema   engineSchema
	rendered sync.Map // template to statement
}

// of is the statement of template (one of the constants below) in the
// server's schema. A template for fmt.Sprintf is rendered before it is
// formatted, so that only the constant is kept, and no host name is read
// as the placeholder.
func (st *statements) of(template string) string {
	if q, ok := st.rendered.Load(template); ok {
		return q.(string)
	}
	q := st.schema.render(template)
	st.rendered.Store(template, q)
	return q
}

// The columns of sync_log a pass appends.
var logColumns = []string{"grp", "pos", "tbl", "key"}

// LISTEN and UNLISTEN for Run's listener; the channel is quoted after
// qListen.
const (
	qListen   = "LISTEN "
	qUnlisten = "UNLISTEN *"
)

// listen is the statement that listens on the schema's wake channel.
func (e engineSchema) listen() string {
	return qListen + quoteIdentPlain(e.wakeChannel())
}

// Replicas: adopting them from the replicas table, letting go of them,
// locking their rows and recording their polls.
const (
	// pollColumns is what a poll reads of a replica r, which says it applied
	// u.applied: its Next's state (see pollState in outbox_seen.go).
	pollColumns = `r.next_id, r.acked,
			(SELECT i.sum FROM {schema}.sync_issued i WHERE i.replica = r.id AND i.id = u.applied),
			r.provision_needed OR r.snapshot <> 0,
			EXISTS (SELECT 1 FROM {schema}.sync_outbox o WHERE o.replica = r.id AND o.kind <> 'filed'),
			EXISTS (SELECT 1 FROM {schema}.sync_outbox o WHERE o.replica = r.id AND o.kind = 'filed'),
			coalesce((SELECT array_agg(m.grp) FROM {schema}.sync_memberships m WHERE m.replica = r.id), '{}'),
			EXISTS (SELECT 1 FROM {schema}.sync_memberships m JOIN {schema}.sync_groups g ON g.id = m.grp
			        WHERE m.replica = r.id AND g.head > m.sent_pos)`
	qPoll = `SELECT ` + pollColumns + `
		FROM (VALUES ($1::uuid, $2::bigint)) u(id, applied) JOIN {schema}.sync_replicas r ON r.id = u.id`
	// qPollMany is qPoll for many replicas at once (seenBatch): one row
	// per replica the engine knows.
	qPollMany = `SELECT r.id, u.applied, ` + pollColumns + `
		FROM unnest($1::uuid[], $2::bigint[]) u(id, applied) JOIN {schema}.sync_replicas r ON r.id = u.id`
	// The rows are locked in id order, as every statement that locks
	// many replicas' rows does (ackBatch, buildDeltas, pass): writing polls
	// waits for a row another transaction holds, and never deadlocks.
	qRecordPolls = `WITH l AS (SELECT id FROM {schema}.sync_replicas WHERE id = ANY($1::uuid[]) ORDER BY id FOR NO KEY UPDATE)
		UPDATE {schema}.sync_replicas r SET last_seen = greatest(r.last_seen, now() - u.ago),
			last_poll = now() - u.ago, poll_window = u.win
		FROM unnest($1::uuid[], $2::interval[], $3::interval[]) u(id, ago, win), l
		WHERE r.id = u.id AND l.id = u.id`
	qReplicaSeen     = `UPDATE {schema}.sync_replicas SET last_seen = now() WHERE id = $1`
	qAdoptReplicaFmt = `WITH ins AS (
			INSERT INTO {schema}.sync_replicas (id, provision_needed, provision_reason)
			SELECT $1, true, 'new replica' WHERE EXISTS (SELECT 1 FROM %s h WHERE h.%s = $1)
			ON CONFLICT (id) DO NOTHING RETURNING id)
		SELECT EXISTS (SELECT 1 FROM ins) OR EXISTS (SELECT 1 FROM {schema}.sync_replicas WHERE id = $1)`
	qReplicaKnown = `SELECT EXISTS (SELECT 1 FROM {schema}.sync_replicas WHERE id = $1)`
	// The engine locks a replica's row while it writes the replica's
	// state (its outbox, cursors, filed uploads), FOR NO KEY UPDATE: the
	// lock excludes every other such writer, and lets a foreign key's
	// check (FOR KEY SHARE) of a row pointing at the replica pass, so that
	// a statement inserting such rows for many replicas at once (trimFiled)
	// never waits for one of them, in whatever order it meets them.
	qLockReplica = `SELECT 1 FROM {schema}.sync_replicas WHERE id = $1 FOR NO KEY UPDATE`
	qAdoptAllFmt = `INSERT INTO {schema}.sync_replicas (id, provision_needed, provision_reason)
		SELECT h.%[2]s, true, 'new replica' FROM %[1]s h WHERE h.%[2]s IS NOT NULL ON CONFLICT (id) DO NOTHING`
	// Letting go locks the rows first, in id order, as every statement
	// that locks many replicas' rows does (qRecordPolls).
	qLetGoAllFmt = `WITH l AS (SELECT r.id FROM {schema}.sync_replicas r
			WHERE NOT EXISTS (SELECT 1 FROM %s h WHERE h.%s = r.id) ORDER BY r.id FOR UPDATE)
		DELETE FROM {schema}.sync_replicas r USING l WHERE r.id = l.id`
	qAdoptReplicasFmt = `INSERT INTO {schema}.sync_replicas (id, provision_needed, provision_reason)
		SELECT r.id, true, 'new replica' FROM unnest($1::uuid[]) r(id)
		WHERE EXISTS (SELECT 1 FROM %s h WHERE h.%s = r.id) ON CONFLICT (id) DO NOTHING RETURNING id`
	qLetGoReplicasFmt = `WITH l AS (SELECT s.id FROM {schema}.sync_replicas s
			WHERE s.id = ANY($1::uuid[]) AND NOT EXISTS (SELECT 1 FROM %s h WHERE h.%s = s.id) ORDER BY s.id FOR UPDATE)
		DELETE FROM {schema}.sync_replicas s USING l WHERE s.id = l.id RETURNING s.id`
	qLockReplicas = `SELECT id FROM {schema}.sync_replicas WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE`
)

// The outbox (outbox*.go): the state a replica's next message depends on,
// building and storing messages, moving the cursors, and acknowledging.
const (
	qNextState = `SELECT r.provision_needed OR r.snapshot <> 0,
			EXISTS (SELECT 1 FROM {schema}.sync_outbox o WHERE o.replica = r.id AND o.kind <> 'filed'),
			EXISTS (SELECT 1 FROM {schema}.sync_outbox o WHERE o.replica = r.id AND o.kind = 'filed'),
			coalesce((SELECT array_agg(m.grp) FROM {schema}.sync_memberships m WHERE m.replica = r.id), '{}'),
			EXISTS (SELECT 1 FROM {schema}.sync_memberships m JOIN {schema}.sync_groups g ON g.id = m.grp
			        WHERE m.replica = r.id AND g.head > m.sent_pos)
		FROM {schema}.sync_replicas r WHERE r.id = $1`
	qOldest       = `SELECT id, body, kind FROM {schema}.sync_outbox WHERE replica = $1 ORDER BY id LIMIT 1`
	qLockForBuild = `SELECT next_id, provision_needed, snapshot, snap_grp, snap_tbl, snap_key
		FROM {schema}.sync_replicas WHERE id = $1 FOR NO KEY UPDATE`
	qQueuedParts = `SELECT count(*), coalesce(bool_and(kind = 'part'), false) FROM {schema}.sync_outbox
			WHERE replica = $1 AND kind <> 'filed'`
	qQueuedKinds = `SELECT coalesce(bool_or(kind <> 'filed'), false), coalesce(bool_or(kind = 'filed'), false)
			FROM {schema}.sync_outbox WHERE replica = $1`
	qSkipPositions = `UPDATE {schema}.sync_memberships m SET sent_pos = u.pos, acked_pos = greatest(m.acked_pos, u.pos)
			FROM unnest($2::bigint[], $3::bigint[]) u(grp, pos) WHERE m.replica = $1 AND m.grp = u.grp`
	qStoreMessage = `INSERT INTO {schema}.sync_outbox (replica, id, kind, body, grps, poss) VALUES ($1, $2, $3, $4, coalesce($5::bigint[], '{}'), coalesce($6::bigint[], '{}'))`
	qMoveSent     = `UPDATE {schema}.sync_memberships m SET sent_pos = u.pos
			FROM unnest($2::bigint[], $3::bigint[]) u(grp, pos) WHERE m.replica = $1 AND m.grp = u.grp`
	qRecordBuilt = `UPDATE {schema}.sync_replicas SET next_id = $2::bigint + 1, last_down = $2,
		snap_grp = $3, snap_tbl = $4, snap_key = coalesce($5, '\x'::bytea),
		snap_first = CASE WHEN $6 THEN $2 ELSE snap_first END WHERE id = $1`
	// The same, for many replicas' deltas at once (buildDeltas).
	// The outbox is read by a statement of its own, after the rows are
	// locked: a statement's snapshot is taken before it waits for a lock,
	// so one that locked and looked at once would miss a message (an
	// upload's Filed) committed by the transaction it waited for.
	qLockForDeltas = `SELECT id, next_id, NOT (provision_needed OR snapshot <> 0)
		FROM {schema}.sync_replicas WHERE id = ANY($1::uuid[]) ORDER BY id FOR NO KEY UPDATE`
	qQueuedAmong   = `SELECT DISTINCT replica FROM {schema}.sync_outbox WHERE replica = ANY($1::uuid[])`
	qMembershipsOf = `SELECT m.replica, m.grp, m.sent_pos, g.head FROM {schema}.sync_memberships m
		JOIN {schema}.sync_groups g ON g.id = m.grp WHERE m.replica = ANY($1::uuid[]) ORDER BY m.replica, m.grp`
	qSkipPositionsMany = `UPDATE {schema}.sync_memberships m SET sent_pos = u.pos, acked_pos = greatest(m.acked_pos, u.pos)
		FROM unnest($1::uuid[], $2::bigint[], $3::bigint[]) u(replica, grp, pos) WHERE m.replica = u.replica AND m.grp = u.grp`
	qStoreMessages = `INSERT INTO {schema}.sync_outbox (replica, id, kind, body, grps, poss)
		SELECT u.replica, u.id, u.kind, u.body, coalesce(($7::bigint[])[u.lo:u.hi], '{}'), coalesce(($8::bigint[])[u.lo:u.hi], '{}')
		FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::bytea[], $5::int[], $6::int[]) u(replica, id, kind, body, lo, hi)`
	qMoveSentMany = `UPDATE {schema}.sync_memberships m SET sent_pos = c.pos
		FROM (SELECT u.replica, g.grp, g.pos
			FROM unnest($1::uuid[], $2::int[], $3::int[]) u(replica, lo, hi),
			LATERAL unnest(($4::bigint[])[u.lo:u.hi], ($5::bigint[])[u.lo:u.hi]) g(grp, pos)) c
		WHERE m.replica = c.replica AND m.grp = c.grp`
	// The ids a batch issued are announced (memo.go) by the statement
	// that records them: a data-modifying WITH runs whether or not its
	// rows are read, and the announcement goes at commit.
	qRecordBuiltMany = `WITH w AS (UPDATE {schema}.sync_replicas r SET next_id = u.id + 1, last_down = u.id,
			snap_grp = 0, snap_tbl = '', snap_key = '\x'::bytea
		FROM unnest($1::uuid[], $2::bigint[]) u(replica, id) WHERE r.id = u.replica)
		SELECT pg_notify($3, p) FROM unnest($4::text[]) p`
	qMemberships = `SELECT m.grp, m.sent_pos, g.head FROM {schema}.sync_memberships m
		JOIN {schema}.sync_groups g ON g.id = m.grp WHERE m.replica = $1 ORDER BY m.grp`
	qLogRange = `SELECT tbl, key, max(pos) FROM {schema}.sync_log
		WHERE grp = $1 AND pos > $2 AND pos <= $3 GROUP BY tbl, key ORDER BY 3`
	qLockForAck        = `SELECT next_id, acked FROM {schema}.sync_replicas WHERE id = $1 FOR NO KEY UPDATE`
	qIssuedSum         = `SELECT sum FROM {schema}.sync_issued WHERE replica = $1 AND id = $2::bigint`
	qForgetIssuedBelow = `DELETE FROM {schema}.sync_issued WHERE replica = $1 AND id < $2::bigint`
	qTakeAcked         = `WITH d AS (DELETE FROM {schema}.sync_outbox WHERE replica = $1 AND id <= $2::bigint RETURNING id, kind, grps, poss)
		SELECT id, kind, grps, poss FROM d ORDER BY id`
	qMoveAcked = `UPDATE {schema}.sync_memberships m SET acked_pos = greatest(m.acked_pos, u.pos)
			FROM unnest($2::bigint[], $3::bigint[]) u(grp, pos) WHERE m.replica = $1 AND m.grp = u.grp`
	qRecordAcked = `UPDATE {schema}.sync_replicas SET acked = greatest(acked, $2::bigint), last_applied = greatest(last_applied, $2::bigint)
		WHERE id = $1`
	// The same, for many replicas at once (ackBatch).
	qLockManyForAck        = `SELECT id, next_id, acked FROM {schema}.sync_replicas WHERE id = ANY($1::uuid[]) ORDER BY id FOR NO KEY UPDATE`
	qForgetIssuedBelowMany = `DELETE FROM {schema}.sync_issued i USING unnest($1::uuid[], $2::bigint[]) u(replica, id)
		WHERE i.replica = u.replica AND i.id < u.id`
	qTakeAckedMany = `WITH d AS (DELETE FROM {schema}.sync_outbox o USING unnest($1::uuid[], $2::bigint[]) u(replica, id)
			WHERE o.replica = u.replica AND o.id <= u.id RETURNING o.replica, o.id, o.kind, o.grps, o.poss)
		SELECT replica, id, kind, grps, poss FROM d ORDER BY replica, id`
	qMoveAckedMany = `UPDATE {schema}.sync_memberships m SET acked_pos = greatest(m.acked_pos, u.pos)
		FROM unnest($1::uuid[], $2::bigint[], $3::bigint[]) u(replica, grp, pos) WHERE m.replica = u.replica AND m.grp = u.grp`
	qRecordAckedMany = `WITH f AS (` + qForgetIssuedBelowMany + `)
		UPDATE {schema}.sync_replicas r SET acked = greatest(r.acked, u.id), last_applied = greatest(r.last_applied, u.id)
		FROM unnest($1::uuid[], $2::bigint[]) u(replica, id) WHERE r.id = u.replica`
	qRejectedByMessageAmong = `SELECT DISTINCT replica FROM {schema}.sync_rejected WHERE replica = ANY($1::uuid[]) AND side = 'replica' AND msg > 0`
)

// Provisioning (provision.go): starting one at the groups' heads, paging the
// snapshot, ending it, and provisioning again.
const (
	qLockHeads       = `SELECT id, head FROM {schema}.sync_groups WHERE id = ANY($1) ORDER BY id FOR SHARE`
	qDropMemberships = `DELETE FROM {schema}.sync_memberships WHERE replica = $1`
	qJoinAtHeads     = `INSERT INTO {schema}.sync_memberships (replica, grp, acked_pos, sent_pos)
		SELECT $1, u.grp, u.pos, u.pos FROM unnest($2::bigint[], $3::bigint[]) u(grp, pos)`
	// A snapshot is numbered with the id of its first message: never
	// reused for the replica, not even by a server restored from an older
	// backup (its ids move past what the replica applied), so rows staged
	// for a snapshot lost to a restore never go in with a later one.
	qOpenSnapshot = `UPDATE {schema}.sync_replicas SET provision_needed = false, snapshot = next_id,
		snap_grp = 0, snap_tbl = '', snap_key = '\x' WHERE id = $1 RETURNING snapshot`
	qSnapshotPage = `SELECT tbl, key, tuple, shape FROM {schema}.sync_rows WHERE grp = $1 AND (tbl, key) > ($2, $3)
				ORDER BY tbl, key LIMIT $4`
	qEndProvisioning = `WITH r AS (UPDATE {schema}.sync_replicas SET snapshot = 0,
				provision_reason = CASE WHEN provision_needed THEN provision_reason END WHERE id = $1 RETURNING snap_first)
			DELETE FROM {schema}.sync_rejected j USING r WHERE j.replica = $1 AND j.side = 'replica' AND (j.msg = 0 OR j.msg < r.snap_first)`
	qProvisionAgain = `UPDATE {schema}.sync_replicas SET provision_needed = true, provision_reason = $2 WHERE id = $1`
	qDropOutbox     = `DELETE FROM {schema}.sync_outbox WHERE replica = $1`
	qDropIssued     = `DELETE FROM {schema}.sync_issued WHERE replica = $1`
	qReissue        = `UPDATE {schema}.sync_replicas SET next_id = greatest(next_id, $2::bigint + 1),
		acked = greatest(acked, $2::bigint), last_down = greatest(last_down, $2::bigint),
		last_applied = greatest(last_applied, $2::bigint), provision_needed = true, provision_reason = $3, snapshot = 0
		WHERE id = $1`
	qForgetFiledFrom   = `DELETE FROM {schema}.sync_filed WHERE replica = $1 AND lane = $2 AND sequence >= $3`
	qLowerTrimmed      = `UPDATE {schema}.sync_filed_trimmed SET upto = least(upto, $3::bigint - 1) WHERE replica = $1 AND lane = $2`
	qProvisionRestored = `UPDATE {schema}.sync_replicas SET provision_needed = true, provision_reason = $2, snapshot = 0 WHERE id = $1`
)

// Filing (receive.go, filing.go, reports.go, confirm.go):
// the records of filed uploads, the queueing of their
// confirmations, the rows refused or not taken, and what a replica reports.
const (
	qFiledRecord      = `SELECT filed, body_hash FROM {schema}.sync_filed WHERE replica = $1 AND lane = $2 AND sequence = $3`
	qFiledTrimmedUpto = `SELECT coalesce(max(upto), 0) FROM {schema}.sync_filed_trimmed WHERE replica = $1 AND lane = $2`
	qRecordFiled      = `INSERT INTO {schema}.sync_filed (replica, lane, sequence, filed, body_hash, msg) VALUES ($1, $2, $3, $4, $5, $6)`
	qQueuedFiled      = `SELECT id, body, id > coalesce((SELECT max(id) FROM {schema}.sync_outbox WHERE replica = $1 AND kind <> 'filed'), 0)
		FROM {schema}.sync_outbox WHERE replica = $1 AND kind = 'filed' ORDER BY id`
	qDropQueued       = `DELETE FROM {schema}.sync_outbox WHERE replica = $1 AND id = ANY($2)`
	qTakeNextID       = `UPDATE {schema}.sync_replicas SET next_id = next_id + 1 WHERE id = $1 RETURNING next_id - 1`
	qQueueFiled       = `INSERT INTO {schema}.sync_outbox (replica, id, kind, body) VALUES ($1, $2, 'filed', $3)`
	qFiledConfirmedBy = `UPDATE {schema}.sync_filed SET msg = $4 WHERE replica = $1 AND lane = $2 AND sequence = ANY($3)`
	qKeepRejected     = `INSERT INTO {schema}.sync_rejected (replica, side, tbl, key, reason, msg)
			SELECT DISTINCT ON (t, k) $1, $2, t, k, r, m FROM unnest($3::text[], $4::bytea[], $5::text[], $6::bigint[]) u(t, k, r, m)
			WHERE $2 <> 'replica' OR m = 0 OR m >= (SELECT snap_first FROM {schema}.sync_replicas WHERE id = $1)
			ORDER BY t, k, m DESC
			ON CONFLICT (replica, side, tbl, key) DO UPDATE SET reason = excluded.reason, at = now(),
				msg = greatest(sync_rejected.msg, excluded.msg)`
	qDropOldRejected = `WITH x AS (
				SELECT tbl, key FROM {schema}.sync_rejected WHERE replica = $1 AND side = $2 AND tbl <> ''
				ORDER BY at DESC, msg DESC, tbl DESC, key DESC OFFSET $3),
			d AS (DELETE FROM {schema}.sync_rejected j USING x
				WHERE j.replica = $1 AND j.side = $2 AND j.tbl = x.tbl AND j.key = x.key RETURNING 1)
			SELECT count(*) FROM d`
	qCountRejected = `INSERT INTO {schema}.sync_rejected (replica, side, tbl, key, reason, msg)
		VALUES ($1, $2, '', $3, $4::bigint::text || $5::text, 0)
		ON CONFLICT (replica, side, tbl, key) DO UPDATE SET at = now(),
			reason = (coalesce(substring(sync_rejected.reason from '^[0-9]+'), '0')::bigint + $4::bigint)::text || $5::text`
	qRecordReport = `UPDATE {schema}.sync_replicas SET last_seen = now(), reported_at = now(), backlog = $2,
		build = CASE WHEN $3 = '' THEN build ELSE $3 END WHERE id = $1`
	qRecordUnsent = `INSERT INTO {schema}.sync_replica_tables (replica, tbl, unsent)
			SELECT $1, t, max(n) FROM unnest($2::text[], $3::bigint[]) u(t, n) GROUP BY t
			ON CONFLICT (replica, tbl) DO UPDATE SET unsent = excluded.unsent`
	qCountFiled = `INSERT INTO {schema}.sync_replica_tables (replica, tbl, filed)
			SELECT $1, * FROM unnest($2::text[], $3::bigint[])
			ON CONFLICT (replica, tbl) DO UPDATE SET filed = sync_replica_tables.filed + excluded.filed`
)

// A replica's report of a message it cannot decode (undecodable.go).
const (
	// qUndecodableStanding reads what decides whether a report of a
	// message the replica cannot decode still stands; the replica's row
	// is locked.
	qUndecodableStanding = `SELECT next_id, acked, snap_first FROM {schema}.sync_replicas WHERE id = $1`
)

// Digests (digests.go): a replica's, kept and compared with the server's,
// and the server's, kept per group and table by the pass.
const (
	qDigestsState = `SELECT r.provision_needed OR r.snapshot <> 0, r.last_down,
			EXISTS (SELECT 1 FROM {schema}.sync_outbox o WHERE o.replica = r.id AND o.kind <> 'filed'),
			EXISTS (SELECT 1 FROM {schema}.sync_memberships m JOIN {schema}.sync_groups g ON g.id = m.grp
			        WHERE m.replica = r.id AND m.acked_pos < g.head)
		FROM {schema}.sync_replicas r WHERE r.id = $1`
	qKeepHeldDigest = `INSERT INTO {schema}.sync_replica_tables (replica, tbl, held, held_sum, held_as_of)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (replica, tbl) DO UPDATE
			SET held = excluded.held, held_sum = excluded.held_sum, held_as_of = excluded.held_as_of`
	// qDigestsExpected reads whether a table has changes not yet planned,
	// the sums of the replica's groups, and the hashes of the rows of
	// those groups it could not take (left out of its digest, as of the
	// sums).
	qDigestsExpected = `SELECT
				EXISTS (SELECT 1 FROM {schema}.sync_touched WHERE tbl = $2),
				coalesce((SELECT array_agg(d.sum) FROM {schema}.sync_memberships m
				          JOIN {schema}.sync_digests d ON d.grp = m.grp AND d.tbl = $2 WHERE m.replica = $1), '{}'),
				coalesce((SELECT array_agg(sr.hash) FROM {schema}.sync_rejected j
				          JOIN {schema}.sync_rows sr ON sr.tbl = j.tbl AND sr.key = j.key
				          JOIN {schema}.sync_memberships m ON m.grp = sr.grp AND m.replica = $1
				          WHERE j.replica = $1 AND j.side = 'replica' AND j.tbl = $2), '{}')`
	// qSetAside reads the keys of the rows of a replica's table that either
	// side set aside (the replica leaves them out of its digest), and
	// whether the record of them is whole: no record without a key, and
	// none dropped beyond what is kept (summaryDropped) on the sides
	// $3 names.
	qSetAside = `SELECT
				coalesce((SELECT array_agg(key) FROM {schema}.sync_rejected
				          WHERE replica = $1 AND tbl = $2 AND side = ANY($3::text[])), '{}'),
				NOT EXISTS (SELECT 1 FROM {schema}.sync_rejected WHERE replica = $1 AND side = ANY($3::text[])
				            AND ((tbl = $2 AND key = '\x') OR (tbl = '' AND key = '\x02')))`
	qReadDigests = `SELECT d.grp, d.tbl, d.sum FROM {schema}.sync_digests d
		JOIN unnest($1::bigint[], $2::text[]) u(grp, tbl) ON d.grp = u.grp AND d.tbl = u.tbl`
	qWriteDigests = `INSERT INTO {schema}.sync_digests (grp, tbl, sum, rows)
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::bytea[], $4::bigint[])
		ON CONFLICT (grp, tbl) DO UPDATE SET sum = excluded.sum, rows = excluded.rows`
)

// The pass (plan.go): the planner's lock, the touched keys, the groups, the
// planner's record of each row, and the logs' heads.
const (
	qPlanLock            = `SELECT pg_try_advisory_xact_lock($1)`
	qTakeTouchedReplicas = `WITH d AS (DELETE FROM {schema}.sync_touched WHERE tbl = $1 RETURNING key)
		SELECT DISTINCT (key->>'r')::uuid FROM d WHERE key->>'r' IS NOT NULL`
	qMembershipNames = `SELECT r.id, coalesce(array_agg(g.name) FILTER (WHERE g.name IS NOT NULL), '{}')
		FROM {schema}.sync_replicas r
		LEFT JOIN {schema}.sync_memberships m ON m.replica = r.id
		LEFT JOIN {schema}.sync_groups g ON g.id = m.grp
		WHERE r.id = ANY($1) AND NOT (r.provision_needed AND r.snapshot = 0)
		GROUP BY r.id`
	qMarkRegrouped = `UPDATE {schema}.sync_replicas r SET provision_needed = true, provision_reason = u.reason
		FROM unnest($1::uuid[], $2::text[]) u(id, reason) WHERE r.id = u.id`
	qCreateGroups = `INSERT INTO {schema}.sync_groups (name) SELECT unnest($1::text[]) ON CONFLICT (name) DO NOTHING`
	qGroupIDs     = `SELECT name, id FROM {schema}.sync_groups WHERE name = ANY($1)`
	// qFollowedBy reads the table and columns the foreign key of one
	// column ($2) of a table ($1) points at.
	qFollowedBy = `SELECT nf.nspname::text, cf.relname::text,
			array(SELECT a.attname::text FROM unnest(c.confkey) WITH ORDINALITY u(n, o)
			      JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = u.n ORDER BY u.o)
		FROM pg_constraint c
		JOIN pg_class cf ON cf.oid = c.confrelid
		JOIN pg_namespace nf ON nf.oid = cf.relnamespace
		WHERE c.contype = 'f' AND c.conrelid = to_regclass($1)
		  AND c.conkey = ARRAY[(SELECT attnum FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2)]
		ORDER BY c.conname LIMIT 1`
	qTakeTouchedFmt = `WITH d AS (
			DELETE FROM {schema}.sync_touched WHERE tbl = $1 AND id <= (
				SELECT max(id) FROM (SELECT id FROM {schema}.sync_touched WHERE tbl = $1 ORDER BY id LIMIT $2) b)
			RETURNING key),
		k AS (SELECT DISTINCT key FROM d)
		SELECT %s, %s, %s, %s
		FROM k CROSS JOIN LATERAL jsonb_populate_record(NULL::%s, k.key) r
		LEFT JOIN %s h ON %s`
	// qTouchFollowersFmt notes the rows of a follower (%s: its key as
	// jsonb over alias f, its table, its Follows column) pointing at the
	// parent keys of $1 (text, cast to the parent key's type %s), and
	// returns the last id it noted (0 for none).
	qTouchFollowersFmt = `WITH n AS (INSERT INTO {schema}.sync_touched (tbl, key)
		SELECT $2, %s FROM %s f WHERE f.%s = ANY($1::text[]::%s[]) RETURNING id)
		SELECT coalesce(max(id), 0) FROM n`
	// qTouchedUpTo says whether keys of a table ($1) noted up to an id
	// ($2) wait in sync_touched.
	qTouchedUpTo = `SELECT EXISTS (SELECT 1 FROM {schema}.sync_touched WHERE tbl = $1 AND id <= $2)`
	qPlannedRows = `SELECT key, grp, tuple, shape FROM {schema}.sync_rows WHERE tbl = $1 AND key = ANY($2)`
	qKnownRows   = `SELECT key, grp, hash FROM {schema}.sync_rows WHERE tbl = $1 AND key = ANY($2)`
	qWriteRows   = `INSERT INTO {schema}.sync_rows (tbl, key, grp, hash, pos, tuple, shape)
			SELECT $1, k, g, h, p, t, $7 FROM unnest($2::bytea[], $3::bigint[], $4::bytea[], $5::bigint[], $6::bytea[]) u(k, g, h, p, t)
			ON CONFLICT (tbl, key) DO UPDATE SET grp = excluded.grp, hash = excluded.hash, pos = excluded.pos,
				tuple = excluded.tuple, shape = excluded.shape`
	qDropRows   = `DELETE FROM {schema}.sync_rows WHERE tbl = $1 AND key = ANY($2)`
	qHeads      = `SELECT id, head FROM {schema}.sync_groups WHERE id = ANY($1)`
	qLockGroups = `SELECT 1 FROM {schema}.sync_groups WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE`
	qMoveHeads  = `UPDATE {schema}.sync_groups g SET head = u.head
		FROM unnest($1::bigint[], $2::bigint[]) u(id, head) WHERE g.id = u.id AND u.head > g.head`
)

// Trimming (trim.go): the logs, the records of filed uploads, and the rows a
// replica could not take.
const (
	qTrimBatchEnd  = `SELECT coalesce(max(id), 0) FROM (SELECT id FROM {schema}.sync_groups WHERE id > $1 ORDER BY id LIMIT $2) b`
	qLockTrimBatch = `SELECT id FROM {schema}.sync_groups WHERE id > $1 AND id <= $2 ORDER BY id FOR NO KEY UPDATE SKIP LOCKED`
	qTrimLogs      = `DELETE FROM {schema}.sync_log l
			USING (SELECT g.id, least(g.head, coalesce(min(m.acked_pos), g.head)) AS low
			       FROM {schema}.sync_groups g LEFT JOIN {schema}.sync_memberships m ON m.grp = g.id
			       WHERE g.id = ANY($1) GROUP BY g.id) x
			WHERE l.grp = x.id AND l.pos <= x.low`
	qTrimFiled = `WITH c AS (
				SELECT f.replica, f.lane, f.sequence FROM {schema}.sync_filed f JOIN {schema}.sync_replicas r ON r.id = f.replica
				WHERE f.at < now() - $1::interval AND coalesce(f.msg, 0) <= r.acked
				  AND EXISTS (SELECT 1 FROM {schema}.sync_filed n WHERE n.replica = f.replica AND n.lane = f.lane AND n.sequence > f.sequence)
				LIMIT $2),
			d AS (DELETE FROM {schema}.sync_filed f USING c
				WHERE f.replica = c.replica AND f.lane = c.lane AND f.sequence = c.sequence
				RETURNING f.replica, f.lane, f.sequence),
			w AS (INSERT INTO {schema}.sync_filed_trimmed (replica, lane, upto)
				SELECT replica, lane, max(sequence) FROM d GROUP BY replica, lane ORDER BY replica, lane
				ON CONFLICT (replica, lane) DO UPDATE SET upto = greatest(sync_filed_trimmed.upto, excluded.upto))
			SELECT count(*) FROM d`
	qAnyRejectedByMessage = `SELECT EXISTS (SELECT 1 FROM {schema}.sync_rejected WHERE replica = $1 AND side = 'replica' AND msg > 0)`
	qAckedPositions       = `SELECT grp, acked_pos FROM {schema}.sync_memberships WHERE replica = $1`
	qClearRejected        = `DELETE FROM {schema}.sync_rejected j USING unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[]) u(msg, grp, lo, hi)
		WHERE j.replica = $1 AND j.side = 'replica' AND j.msg > 0 AND j.msg < u.msg
		  AND EXISTS (SELECT 1 FROM {schema}.sync_log l WHERE l.grp = u.grp AND l.pos > u.lo AND l.pos <= u.hi AND l.tbl = j.tbl AND l.key = j.key)`
	qForgetCleared = `DELETE FROM {schema}.sync_rejected j USING unnest($2::text[], $3::bytea[]) u(t, k)
		WHERE j.replica = $1 AND j.side = 'replica' AND j.tbl = u.t AND j.key = u.k`
	// qForgetRefusalsFiled forgets the server's refusals of rows it has
	// filed since.
	qForgetRefusalsFiled = `DELETE FROM {schema}.sync_rejected j USING unnest($2::text[], $3::bytea[]) u(t, k)
		WHERE j.replica = $1 AND j.side = 'server' AND j.tbl = u.t AND j.key = u.k`
)

// Credentials (auth.go).
const (
	qSetSecret    = `UPDATE {schema}.sync_replicas SET secret = $2 WHERE id = $1`
	qReadCredsFmt = `SELECT (SELECT secret FROM {schema}.sync_replicas WHERE id = $1),
			EXISTS (SELECT 1 FROM {schema}.sync_replicas WHERE id = $1) OR EXISTS (SELECT 1 FROM %s h WHERE h.%s = $1)`
)

// Status (status.go): where every replica stands, in one statement.
const (
	qStatus = `SELECT r.id, r.last_seen,
		r.reported_at,
		` + replicaOnline + `,
		r.provision_needed OR r.snapshot <> 0, coalesce(r.provision_reason, ''),
		(SELECT count(*) FROM {schema}.sync_outbox o WHERE o.replica = r.id)
		  + CASE WHEN r.provision_needed OR EXISTS (SELECT 1 FROM {schema}.sync_memberships m JOIN {schema}.sync_groups g ON g.id = m.grp
		                   WHERE m.replica = r.id AND g.head > m.sent_pos) THEN 1 ELSE 0 END,
		r.last_applied, r.backlog, left(r.build, $3),
		coalesce((SELECT jsonb_agg(jsonb_build_object('t', x.tbl, 'h', x.held, 's', x.should, 'u', x.unsent, 'f', x.filed) ORDER BY x.other, x.tbl)
		  FROM (SELECT y.* FROM (SELECT z.*, row_number() OVER (PARTITION BY z.other ORDER BY z.tbl) AS rank FROM (SELECT coalesce(rt.tbl, sh.tbl) AS tbl, coalesce(rt.tbl, sh.tbl) <> ALL ($1::text[]) AS other,
		               CASE WHEN r.provision_needed OR r.snapshot <> 0 THEN 0
		                    ELSE greatest(coalesce(sh.should, 0) - coalesce((SELECT count(*) FROM (
		                           SELECT l.key FROM {schema}.sync_memberships m
		                           JOIN {schema}.sync_log l ON l.grp = m.grp AND l.pos > m.acked_pos AND l.tbl = sh.tbl
		                           JOIN {schema}.sync_rows sr ON sr.tbl = l.tbl AND sr.key = l.key AND sr.grp = l.grp
		                           WHERE m.replica = r.id
		                           UNION
		                           SELECT j.key FROM {schema}.sync_rejected j
		                           JOIN {schema}.sync_rows sr ON sr.tbl = j.tbl AND sr.key = j.key
		                           JOIN {schema}.sync_memberships m ON m.grp = sr.grp AND m.replica = r.id
		                           WHERE j.replica = r.id AND j.side = 'replica' AND j.tbl = sh.tbl) nh), 0), 0) END AS held,
		               coalesce(sh.should, 0) AS should,
		               coalesce(rt.unsent, 0) AS unsent, coalesce(rt.filed, 0) AS filed
		        FROM (SELECT * FROM {schema}.sync_replica_tables WHERE replica = r.id) rt
		        FULL JOIN (SELECT d.tbl, sum(d.rows) AS should FROM {schema}.sync_memberships m
		                   JOIN {schema}.sync_digests d ON d.grp = m.grp WHERE m.replica = r.id AND d.tbl NOT IN ('sync_wishes', 'sync_commands') GROUP BY d.tbl) sh
		        ON sh.tbl = rt.tbl) z) y
		        WHERE NOT y.other OR y.rank <= $4) x), '[]'),
		coalesce((SELECT jsonb_agg(jsonb_build_object('t', j.tbl, 'k', encode(j.key, 'hex'), 'r', j.reason, 's', j.side, 'a', j.at) ORDER BY j.at, j.tbl, j.key)
		  FROM (SELECT * FROM {schema}.sync_rejected WHERE replica = r.id ORDER BY at DESC, tbl DESC, key DESC LIMIT $2) j), '[]'),
		(SELECT count(*) FROM {schema}.sync_rejected WHERE replica = r.id)
		FROM {schema}.sync_replicas r ORDER BY r.id`
)

// The fleet's figures (stats.go: Fleet) and the tables the engine routes
// (fleet.go: StatusOf). qFleet reads what Status reads of each replica's
// standing (online, provisioning, queued: the same expressions), counted
// by how many messages are queued, so that a fleet of thousands costs a
// few rows.
const (
	qFleet = `SELECT f.queued, count(*), count(*) FILTER (WHERE f.online), count(*) FILTER (WHERE f.provisioning)
		FROM (SELECT ` + replicaOnline + ` AS online,
			r.provision_needed OR r.snapshot <> 0 AS provisioning,
			(SELECT count(*) FROM {schema}.sync_outbox o WHERE o.replica = r.id)
			  + CASE WHEN r.provision_needed OR EXISTS (SELECT 1 FROM {schema}.sync_memberships m JOIN {schema}.sync_groups g ON g.id = m.grp
			                   WHERE m.replica = r.id AND g.head > m.sent_pos) THEN 1 ELSE 0 END AS queued
			FROM {schema}.sync_replicas r) f
		GROUP BY f.queued`
	qFleetWishes = `SELECT CASE WHEN expired_at IS NOT NULL AND state IN (1, 2) THEN 7 ELSE state END, count(*) FROM {schema}.sync_wishes GROUP BY 1`
	// qRoutedTables lists the tables the server routes to replicas: those
	// whose digests a group keeps.
	qRoutedTables = `SELECT coalesce(array_agg(DISTINCT tbl ORDER BY tbl), '{}') FROM {schema}.sync_digests WHERE tbl NOT IN ('sync_wishes', 'sync_commands')`
)

// Wake-ups: notifications to the processes serving the database (run.go
// listens).
const (
	// What CaptureLogical needs of the database (capture.go): wal_level and
	// whether the role may replicate; the tables of the publication ($1),
	// each with its replica identity and its primary key's columns.
	// The slot's state (logical.go): whether it exists and is read;
	// whether the engine noted every row for it, and the record that it
	// did; the keys and replicas it holds, noted after a TRUNCATE.
	qCurrentDatabase = `SELECT current_database()`
	qSlotState       = `SELECT active, coalesce(wal_status, '') = 'lost' FROM pg_replication_slots WHERE slot_name = $1`
	qDropSlot        = `SELECT pg_drop_replication_slot($1)`
	// qSlotConfirmed is how far the slot's reader confirmed; qWALFlushAll
	// is, in a transaction whose commit flushes the WAL written
	// so far (it takes an xid, and synchronous_commit is on for it alone),
	// where that WAL ends.
	// qSnapshot is which transactions the sessions see running now
	// (xmin:xmax:xip), for the reader to wait until those whose changes
	// it notes show committed.
	qSnapshot      = `SELECT pg_current_snapshot()::text`
	qSlotConfirmed = `SELECT coalesce(confirmed_flush_lsn::text, '0/0') FROM pg_replication_slots WHERE slot_name = $1`
	qWALFlushAll   = `SELECT set_config('synchronous_commit', 'on', true), pg_current_xact_id()::text, pg_current_wal_insert_lsn()::text`
	qCaptureSeeded = `SELECT EXISTS (SELECT 1 FROM {schema}.sync_capture WHERE slot = $1)`
	// qSlots lists the engine's slots of the whole cluster (Slots).
	qSlots = `SELECT slot_name::text, coalesce(database::text, ''), active,
			coalesce(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, restart_lsn), 0)::bigint,
			coalesce(wal_status, '') = 'lost'
		FROM pg_replication_slots WHERE slot_name LIKE 'magicsync\_%' ORDER BY slot_name`
	qCaptureForget     = `DELETE FROM {schema}.sync_capture WHERE slot = $1`
	qCaptureRecord     = `INSERT INTO {schema}.sync_capture (slot) VALUES ($1) ON CONFLICT (slot) DO UPDATE SET seeded_at = now()`
	qKnownKeys         = `SELECT key FROM {schema}.sync_rows WHERE tbl = $1`
	qKnownReplicas     = `SELECT id FROM {schema}.sync_replicas`
	qLogicalSettings   = `SELECT current_setting('wal_level'), rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user`
	qPublicationTables = `SELECT p.schemaname, p.tablename, c.relreplident::text,
			coalesce((SELECT array_agg(a.attname::text) FROM pg_index i
				JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
				WHERE i.indrelid = c.oid AND i.indisprimary), '{}')
		FROM pg_publication_tables p
		JOIN pg_namespace n ON n.nspname = p.schemaname
		JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename
		WHERE p.pubname = $1`
	// What Run's watch reads every PollEvery: how far sync_touched's
	// sequence went (0 before its first value), which a writer advances
	// as its triggers note keys, before it commits. Reading a sequence
	// takes no lock a writer waits for. qWatchNotes: the last of the
	// notes there to take (0 for none), committed since the sequence last
	// moved.
	qWatch      = `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {schema}.sync_touched_id_seq`
	qWatchNotes = `SELECT coalesce(max(id), 0) FROM {schema}.sync_touched`
	qNotify     = `SELECT pg_notify($1, $2)`
	// The listener's heartbeat (memo.go), with sync_replicas' oid.
	qHeartbeat  = `SELECT '{schema}.sync_replicas'::regclass::oid FROM (SELECT pg_notify($1, $2)) n`
	qNotifyEach = `SELECT pg_notify($1, p) FROM unnest($2::text[]) p`
)

// The engine's schema (migrate.go, and New's check of it).
const (
	qMigrateLock       = `SELECT pg_advisory_xact_lock($1)`
	qCreateSchemaTable = `CREATE TABLE IF NOT EXISTS {schema}.sync_schema (
		step       integer PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`
	qSchemaStep   = `SELECT coalesce(max(step), 0) FROM {schema}.sync_schema`
	qRecordStep   = `INSERT INTO {schema}.sync_schema (step, name) VALUES ($1, $2)`
	qSchemaExists = `SELECT to_regclass('{schema}.sync_schema') IS NOT NULL`
	// How many of a table's triggers ($2) are enabled and call the current
	// function ($3, its source folded $4): see checkSchema.
	qTriggersCurrent = `SELECT count(*) FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
				WHERE t.tgrelid = to_regclass($1) AND t.tgname = ANY($2) AND t.tgenabled <> 'D'
				  AND p.pronamespace = '{schema}'::regnamespace AND p.proname = $3
				  AND btrim(regexp_replace(p.prosrc, '[ \t\n\r\f\v]+', ' ', 'g')) = $4`
	// Migrate creates a schema other than public that does not exist yet
	// (and only then, so that a role without CREATE on the database may
	// migrate into a schema made for it).
	qNamespaceExists = `SELECT to_regnamespace('{schema}') IS NOT NULL`
	qCreateNamespace = `CREATE SCHEMA {schema}`
	// qCreateNamespaceIfMissingFmt is how Steps creates such a schema: not
	// CREATE SCHEMA IF NOT EXISTS, since PostgreSQL checks the privilege
	// to create before it looks whether the schema exists, which a role
	// given a schema made for it lacks. Its verbs: the schema's name as a
	// literal's text, and qCreateNamespace.
	qCreateNamespaceIfMissingFmt = "DO $magicsync$ BEGIN IF to_regnamespace('%s') IS NULL THEN %s; END IF; END $magicsync$;\n"
)

// createNamespaceIfMissing is the statement of Steps's first step that
// creates the engine's schema when it does not exist.
func (e engineSchema) createNamespaceIfMissing() string {
	return fmt.Sprintf(qCreateNamespaceIfMissingFmt, strings.ReplaceAll(e.sql, "'", "''"), e.render(qCreateNamespace))
}

// recordStepLiteral is qRecordStep with the step's number and name written
// in as literals, for a host's migration tool to run as it is (Steps).
func (e engineSchema) recordStepLiteral(number int, name string) string {
	return strings.NewReplacer("$1", strconv.Itoa(number), "$2", quoteLiteral(name)).Replace(e.render(qRecordStep))
}

// The host's schema, read from PostgreSQL's catalog: New's check of the
// declared tables (server.go) and the foreign keys among them (schema.go).
const (
	// qTableColumns reads the columns of a table ($1, its quoted,
	// qualified name): each one's name, type and type's name.
	qTableColumns = `SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typname
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`
	// qUniqueKey says whether a table ($1) has a primary key or unique
	// index on exactly the columns $2, which filing's ON CONFLICT needs.
	qUniqueKey = `SELECT EXISTS (
		SELECT 1 FROM pg_index i
		WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
		  AND (SELECT array_agg(a.attname::text ORDER BY a.attname::text) FROM pg_attribute a
		       WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)) = (SELECT array_agg(k ORDER BY k) FROM unnest($2::text[]) k)
		  AND cardinality(i.indkey) = cardinality($2::text[]))`
	// qForeignKeys lists the foreign keys from one of the tables $1 (quoted,
	// qualified names) to one of them, each with its columns and the columns
	// it references in the key's order, ordered by table and key name.
	qForeignKeys = `WITH d AS (SELECT to_regclass(x) AS oid FROM unnest($1::text[]) x)
	SELECT cn.nspname::text, cl.relname::text,
		array(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY u(n, o)
		      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = u.n ORDER BY u.o),
		fn.nspname::text, fl.relname::text,
		array(SELECT a.attname::text FROM unnest(c.confkey) WITH ORDINALITY u(n, o)
		      JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = u.n ORDER BY u.o)
	FROM pg_constraint c
	JOIN pg_class cl ON cl.oid = c.conrelid JOIN pg_namespace cn ON cn.oid = cl.relnamespace
	JOIN pg_class fl ON fl.oid = c.confrelid JOIN pg_namespace fn ON fn.oid = fl.relnamespace
	WHERE c.contype = 'f' AND c.conrelid IN (SELECT oid FROM d) AND c.confrelid IN (SELECT oid FROM d)
	ORDER BY cn.nspname, cl.relname, c.conname`
)

// inWishGroup3 and inWishGroup4 narrow wishes to the replicas of the
// groups named ($3 or $4; NULL: every replica).
const (
	inWishGroup3 = `($3::text[] IS NULL OR replica IN (SELECT m.replica FROM {schema}.sync_memberships m
		JOIN {schema}.sync_groups g ON g.id = m.grp WHERE g.name = ANY($3::text[])))`
	inWishGroup4 = `($4::text[] IS NULL OR replica IN (SELECT m.replica FROM {schema}.sync_memberships m
		JOIN {schema}.sync_groups g ON g.id = m.grp WHERE g.name = ANY($4::text[])))`
)

// The wishes (wishes.go). A wish's number grows with every wish of the row
// and starts past every number an older copy of the database issued: the
// clock's microseconds.
//
// A wish withdrawn moves to sync_wishes_withdrawn (keepWithdrawn, over the
// rows a DELETE ... RETURNING named d returns), as it stood, and a new
// wish of the row forgets it. The lists read both, a withdrawn wish in
// state 6 (WishWithdrawn) with where it stood in before (allWishes).
const (
	qDesire = `WITH forgot AS (DELETE FROM {schema}.sync_wishes_withdrawn WHERE tbl = $1 AND key = $2)
		INSERT INTO {schema}.sync_wishes AS w (tbl, key, replica, wish, wanted, based_on, note, wished_at, deadline, window_from, window_to)
		VALUES ($1, $2, $3, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, $4, $5, $6, now(), $7, $8, $9)
		ON CONFLICT (tbl, key) DO UPDATE SET replica = excluded.replica, wish = greatest(w.wish + 1, excluded.wish),
			wanted = excluded.wanted, based_on = excluded.based_on, note = excluded.note, wished_at = excluded.wished_at,
			state = 1, reason = '', answered_at = NULL, answered = 0, deadline = excluded.deadline, expired_at = NULL,
			window_from = excluded.window_from, window_to = excluded.window_to
		RETURNING wish`
	// qExpireWishes marks expired the wishes whose deadline passed before
	// their replica answered them for good.
	//
	// The statements that lock many wishes (this one, qFileAnswers,
	// qRolloutWish, qRolloutWithdraw) lock them in (tbl, key) order, in a
	// CTE the change joins: any two wait for each other, never in a cycle.
	qExpireWishes = `WITH l AS (SELECT tbl, key FROM {schema}.sync_wishes
			WHERE deadline < now() AND expired_at IS NULL AND state IN (1, 2) ORDER BY tbl, key FOR NO KEY UPDATE)
		UPDATE {schema}.sync_wishes w SET expired_at = now() FROM l
		WHERE w.tbl = l.tbl AND w.key = l.key AND w.deadline < now() AND w.expired_at IS NULL AND w.state IN (1, 2)`
	// wishExpired is whether a row of sync_wishes stands expired: its
	// deadline passed, and its replica has not answered it for good.
	wishExpired   = `(expired_at IS NOT NULL AND state IN (1, 2))`
	keepWithdrawn = `INSERT INTO {schema}.sync_wishes_withdrawn AS x
			(tbl, key, replica, wish, wanted, note, wished_at, state, reason, answered_at, deadline)
		SELECT d.tbl, d.key, d.replica, d.wish, d.wanted, d.note, d.wished_at,
			CASE WHEN d.expired_at IS NOT NULL AND d.state IN (1, 2) THEN 7 WHEN d.answered = d.wish THEN d.state ELSE 1 END,
			CASE WHEN d.expired_at IS NOT NULL AND d.state IN (1, 2) THEN '` + expiredReason + `' WHEN d.answered = d.wish THEN d.reason ELSE '' END,
			CASE WHEN d.expired_at IS NOT NULL AND d.state IN (1, 2) THEN d.expired_at WHEN d.answered = d.wish THEN d.answered_at END, d.deadline
		FROM d
		ON CONFLICT (tbl, key) DO UPDATE SET replica = excluded.replica, wish = excluded.wish, wanted = excluded.wanted,
			note = excluded.note, wished_at = excluded.wished_at, state = excluded.state, reason = excluded.reason,
			answered_at = excluded.answered_at, withdrawn_at = now(), deadline = excluded.deadline`
	// expiredReason is the reason of a wish the server found expired.
	expiredReason = `its deadline passed before the replica carried it out`
	qWithdraw     = `WITH d AS (DELETE FROM {schema}.sync_wishes WHERE tbl = $1 AND key = $2 RETURNING *) ` + keepWithdrawn
	// allWishes is the wishes held and those withdrawn, as one table.
	// A wish expired (wishExpired) stands in state 7 (WishExpired),
	// answered then.
	allWishes = `(SELECT tbl, key, replica, wish, wanted, note, wished_at,
				CASE WHEN ` + wishExpired + ` THEN 7::smallint ELSE state END AS state,
				CASE WHEN ` + wishExpired + ` THEN '` + expiredReason + `' ELSE reason END AS reason,
				CASE WHEN ` + wishExpired + ` THEN expired_at ELSE answered_at END AS answered_at,
				CASE WHEN ` + wishExpired + ` THEN wish ELSE answered END AS answered,
				NULL::timestamptz AS withdrawn_at, 0::smallint AS before, deadline
			FROM {schema}.sync_wishes
		UNION ALL
		SELECT tbl, key, replica, wish, wanted, note, wished_at, 6::smallint, reason, answered_at, wish, withdrawn_at, state, deadline
			FROM {schema}.sync_wishes_withdrawn x
			WHERE NOT EXISTS (SELECT 1 FROM {schema}.sync_wishes h WHERE h.tbl = x.tbl AND h.key = x.key)) w`
	qWishesOf = `SELECT key, replica, wish, wanted, note, wished_at, state, reason, answered_at, answered, withdrawn_at, before, deadline
		FROM ` + allWishes + ` WHERE tbl = $1 AND key = ANY($2::text[])`
	qWishes = `SELECT tbl, key, replica, wish, wanted, note, wished_at, state, reason, answered_at, answered, withdrawn_at, before, deadline
		FROM ` + allWishes + ` WHERE ($1::uuid IS NULL OR replica = $1) AND ($2 = '' OR tbl = $2) AND ` + inWishGroup4 + `
		ORDER BY CASE state WHEN 4 THEN 0 WHEN 7 THEN 1 WHEN 2 THEN 2 WHEN 5 THEN 3 WHEN 1 THEN 4 WHEN 6 THEN 6 ELSE 5 END, wished_at, tbl, key
		LIMIT $3`
	qWishCounts = `SELECT state, count(*) FROM ` + allWishes + `
		WHERE ($1::uuid IS NULL OR replica = $1) AND ($2 = '' OR tbl = $2) AND ` + inWishGroup3 + ` GROUP BY state`
	// An answer is taken only for the wish the server holds now; of two
	// answers to the same wish the later in time stands, unless the
	// replica sends its answers again after a provisioning ($8): those are
	// what it holds now, whatever their time.
	qFileAnswers = `WITH u AS (SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::smallint[], $6::text[], $7::timestamptz[])
				u(tbl, key, wish, state, reason, at)),
			l AS (SELECT w.tbl, w.key FROM {schema}.sync_wishes w
				WHERE w.replica = $1 AND (w.tbl, w.key) IN (SELECT tbl, key FROM u) ORDER BY w.tbl, w.key FOR NO KEY UPDATE)
		UPDATE {schema}.sync_wishes w SET state = u.state, reason = u.reason, answered_at = u.at, answered = u.wish
		FROM u, l
		WHERE w.tbl = u.tbl AND w.key = u.key AND w.tbl = l.tbl AND w.key = l.key AND w.replica = $1 AND w.wish = u.wish
			AND ($8 OR w.answered <> u.wish OR w.answered_at IS NULL OR u.at >= w.answered_at)`
	qWishCountsByReplica = `SELECT replica, CASE WHEN expired_at IS NOT NULL AND state IN (1, 2) THEN 7 ELSE state END, count(*) FROM {schema}.sync_wishes GROUP BY 1, 2`
	// qCommandCountsByReplica counts each replica's commands, under way and
	// ended, by state (Status).
	qCommandCountsByReplica = `SELECT replica, state, count(*) FROM (SELECT replica, state FROM {schema}.sync_commands
		UNION ALL SELECT replica, state FROM {schema}.sync_commands_done) c GROUP BY 1, 2`
	qAnswersForDigest = `SELECT tbl, key, wish, state FROM {schema}.sync_wishes WHERE replica = $1 AND answered = wish`
	qAnswersHeld      = `SELECT tbl, key, wish FROM {schema}.sync_wishes WHERE replica = $1 AND answered = wish ORDER BY tbl, key`
)

// Rollouts (rollout.go): one wish of many replicas' setting rows, in
// stages. A rollout's wishes are written as Desire writes one (qDesire),
// many at once, and remembered in sync_rollout_replicas by their number.
const (
	qRolloutScopeAll   = `SELECT id FROM {schema}.sync_replicas ORDER BY id`
	qRolloutScopeGroup = `SELECT DISTINCT m.replica FROM {schema}.sync_memberships m
		JOIN {schema}.sync_groups g ON g.id = m.grp WHERE g.name = ANY($1::text[]) ORDER BY 1`
	qRolloutKnown  = `SELECT id FROM {schema}.sync_replicas WHERE id = ANY($1::uuid[])`
	qRolloutInsert = `INSERT INTO {schema}.sync_rollouts (tbl, template, wanted, note, scope_group, scope_all, first_stage, abort_percent, abort_after, by_columns, deadline,
			start_at, window_from, window_to)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING id`
	qRolloutReplicas = `INSERT INTO {schema}.sync_rollout_replicas (rollout, replica, stage, key)
		SELECT $1, u.replica, u.stage, u.key FROM unnest($2::uuid[], $3::smallint[], $4::text[]) u(replica, stage, key)`
	// qRolloutWish wishes the rows of keys ($3, of replicas $4, based on
	// $5) as qDesire wishes one, and records each wish's number.
	qRolloutWish = `WITH u AS (SELECT * FROM unnest($3::text[], $4::uuid[], $5::bytea[]) u(key, replica, based_on)),
		forgot AS (DELETE FROM {schema}.sync_wishes_withdrawn x USING u WHERE x.tbl = $2 AND x.key = u.key),
		ins AS (INSERT INTO {schema}.sync_wishes AS w (tbl, key, replica, wish, wanted, based_on, note, wished_at, deadline, window_from, window_to)
			SELECT $2, u.key, u.replica, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, $6, u.based_on, $7, now(),
				r.deadline, r.window_from, r.window_to FROM u, {schema}.sync_rollouts r WHERE r.id = $1 ORDER BY u.key
			ON CONFLICT (tbl, key) DO UPDATE SET replica = excluded.replica, wish = greatest(w.wish + 1, excluded.wish),
				wanted = excluded.wanted, based_on = excluded.based_on, note = excluded.note, wished_at = excluded.wished_at,
				state = 1, reason = '', answered_at = NULL, answered = 0, deadline = excluded.deadline, expired_at = NULL,
				window_from = excluded.window_from, window_to = excluded.window_to
			RETURNING w.key, w.wish)
		UPDATE {schema}.sync_rollout_replicas rr SET wish = ins.wish FROM ins WHERE rr.rollout = $1 AND rr.key = ins.key`
	// qRolloutUnwished lists the replicas of a stage, or of an earlier one,
	// not wished yet (an earlier stage's: unmatched before).
	qRolloutUnwished = `SELECT replica, key FROM {schema}.sync_rollout_replicas
		WHERE rollout = $1 AND stage <= $2 AND wish IS NULL ORDER BY replica`
	// qRolloutMatched records the keys of the rows a rollout by a column's
	// value found, and the replicas where it found none, or several.
	qRolloutMatched = `UPDATE {schema}.sync_rollout_replicas rr SET key = u.key, unmatched = u.key = ''
		FROM unnest($2::uuid[], $3::text[]) u(replica, key) WHERE rr.rollout = $1 AND rr.replica = u.replica
			AND (rr.key <> u.key OR rr.unmatched <> (u.key = ''))`
	qRolloutsRunning = `SELECT id FROM {schema}.sync_rollouts WHERE state = 'running' ORDER BY id`
	qRolloutLock     = `SELECT state, tbl, template FROM {schema}.sync_rollouts WHERE id = $1 FOR UPDATE`
	qRolloutTryLock  = `SELECT state, tbl, template, by_columns FROM {schema}.sync_rollouts WHERE id = $1 AND state = 'running' FOR UPDATE SKIP LOCKED`
	qRolloutEnd      = `UPDATE {schema}.sync_rollouts SET state = $2, reason = $3, ended_at = now() WHERE id = $1`
	// qRolloutWithdraw takes back a rollout's wishes that are still its
	// own and not carried out yet (pending or waiting).
	qRolloutWithdraw = `WITH l AS (SELECT w.tbl, w.key FROM {schema}.sync_wishes w, {schema}.sync_rollout_replicas rr, {schema}.sync_rollouts r
			WHERE r.id = $1 AND rr.rollout = r.id AND w.tbl = r.tbl AND w.key = rr.key AND w.wish = rr.wish AND w.state IN (1, 2)
			ORDER BY w.tbl, w.key FOR UPDATE OF w),
		d AS (DELETE FROM {schema}.sync_wishes w USING {schema}.sync_rollout_replicas rr, {schema}.sync_rollouts r, l
		WHERE r.id = $1 AND rr.rollout = r.id AND w.tbl = r.tbl AND w.key = rr.key AND w.wish = rr.wish AND w.state IN (1, 2)
			AND w.tbl = l.tbl AND w.key = l.key
		RETURNING w.*) ` + keepWithdrawn
	// qRolloutStatus reads rollouts (one, $1, or the newest $2) with their
	// counts: the replicas in scope, those wished, those unmatched (a
	// rollout by a column's value found no row to wish), the rollout's wishes no
	// longer held as it made them, its wishes still held by state, the
	// first stage's wishes not answered for good, and the most frequent
	// reason of refusal.
	qRolloutStatus = `SELECT r.id, r.tbl, r.wanted, r.note, r.scope_group, r.scope_all, r.first_stage, r.abort_percent, r.abort_after,
			r.by_columns, r.state, r.reason, r.created_at, r.ended_at,
			count(rr.replica), count(rr.wish), count(*) FILTER (WHERE rr.unmatched AND rr.wish IS NULL),
			count(*) FILTER (WHERE rr.wish IS NOT NULL AND w.wish IS NULL),
			count(w.wish) FILTER (WHERE w.state = 1 AND w.expired_at IS NULL), count(w.wish) FILTER (WHERE w.state = 2 AND w.expired_at IS NULL),
			count(w.wish) FILTER (WHERE w.state = 3), count(w.wish) FILTER (WHERE w.state = 4),
			count(w.wish) FILTER (WHERE w.state = 5),
			count(*) FILTER (WHERE rr.stage = 1 AND ((rr.wish IS NULL AND NOT rr.unmatched) OR (w.state IN (1, 2) AND w.expired_at IS NULL))),
			coalesce(mode() WITHIN GROUP (ORDER BY w.reason) FILTER (WHERE w.state = 4), ''),
			count(w.wish) FILTER (WHERE w.state = 7 OR (w.state IN (1, 2) AND w.expired_at IS NOT NULL)), r.deadline,
			r.start_at, r.window_from, r.window_to, r.start_at IS NOT NULL AND r.start_at > now()
		FROM (SELECT * FROM {schema}.sync_rollouts WHERE ($1::bigint IS NULL OR id = $1) ORDER BY id DESC LIMIT $2) r
		LEFT JOIN {schema}.sync_rollout_replicas rr ON rr.rollout = r.id
		LEFT JOIN {schema}.sync_wishes w ON w.tbl = r.tbl AND w.key = rr.key AND w.wish = rr.wish
		GROUP BY r.id, r.tbl, r.wanted, r.note, r.scope_group, r.scope_all, r.first_stage, r.abort_percent, r.abort_after,
			r.by_columns, r.state, r.reason, r.created_at, r.ended_at, r.deadline, r.start_at, r.window_from, r.window_to
		ORDER BY r.id DESC`
)

// The commands (commands.go). A command under way is a row of
// sync_commands, which the planner routes to its replica; one that ended
// moves to sync_commands_done in the statement that ends it.
const (
	// qIssueCommandFmt writes a command of a replica the replicas table
	// (%s, its id column %s) or the engine knows; no row: an unknown one.
	qIssueCommandFmt = `INSERT INTO {schema}.sync_commands (id, replica, name, params, note, deadline)
		SELECT $1, $2, $3, $4, $5, $6
		WHERE EXISTS (SELECT 1 FROM {schema}.sync_replicas WHERE id = $2) OR EXISTS (SELECT 1 FROM %s h WHERE h.%s = $2)
		RETURNING issued_at`
	// qCancelCommand and qExpireCommands end commands not started yet,
	// moving them to sync_commands_done as cancelled ($2: why) or expired.
	qCancelCommand = `WITH gone AS (DELETE FROM {schema}.sync_commands WHERE id = $1 AND state < 3 RETURNING *)
		INSERT INTO {schema}.sync_commands_done (id, replica, name, params, note, issued_at, deadline, started, state, reason, answered_at)
		SELECT id, replica, name, params, note, issued_at, deadline, started, 8, $2, now() FROM gone RETURNING id`
	// The statements that lock many commands (qExpireCommands,
	// qFileCommandAnswers, qCommandRolloutCancel) lock them in id order,
	// in a CTE the changes join: any two wait for each other, never in a
	// cycle.
	qExpireCommands = `WITH l AS (SELECT id FROM {schema}.sync_commands WHERE deadline < now() AND state < 3 ORDER BY id FOR UPDATE),
		gone AS (DELETE FROM {schema}.sync_commands c USING l WHERE c.id = l.id AND c.deadline < now() AND c.state < 3 RETURNING c.*)
		INSERT INTO {schema}.sync_commands_done (id, replica, name, params, note, issued_at, deadline, started, state, reason, answered_at)
		SELECT id, replica, name, params, note, issued_at, deadline, started, 7, 'its deadline passed before it started', now() FROM gone RETURNING id`
	// qFileCommandAnswers files a replica's word on its commands ($2..$6,
	// one entry per command): a command under way takes a later state (an
	// end moves it to sync_commands_done); one the server ended (cancelled,
	// expired) before it heard the replica had started it takes what the
	// replica did; a running one among those ended takes its end. Anything
	// else — an older word, a command of another replica — changes
	// nothing.
	qFileCommandAnswers = `WITH u AS (
			SELECT DISTINCT ON (id) id, state, reason, result, at
			FROM unnest($2::uuid[], $3::smallint[], $4::text[], $5::bytea[], $6::timestamptz[]) AS u(id, state, reason, result, at)
			ORDER BY id, state DESC),
		l AS (SELECT c.id FROM {schema}.sync_commands c WHERE c.replica = $1 AND c.id IN (SELECT id FROM u) ORDER BY c.id FOR UPDATE),
		ended AS (DELETE FROM {schema}.sync_commands c USING u, l
			WHERE c.id = u.id AND c.id = l.id AND c.replica = $1 AND u.state >= 4
			RETURNING c.id, c.replica, c.name, c.params, c.note, c.issued_at, c.deadline, c.started, u.state, u.reason, u.result, u.at),
		moved AS (INSERT INTO {schema}.sync_commands_done (id, replica, name, params, note, issued_at, deadline, started, state, reason, result, answered_at)
			SELECT id, replica, name, params, note, issued_at, deadline, started OR state IN (4, 5, 6), state, reason, result, at FROM ended),
		progressed AS (UPDATE {schema}.sync_commands c SET state = u.state, reason = u.reason, answered_at = u.at, started = c.started OR u.state = 3
			FROM u, l WHERE c.id = u.id AND c.id = l.id AND c.replica = $1 AND u.state < 4 AND u.state > c.state RETURNING c.id, c.state),
		redone AS (UPDATE {schema}.sync_commands_done d SET state = u.state, reason = u.reason, result = u.result, answered_at = u.at, started = true
			FROM u WHERE d.id = u.id AND d.replica = $1 AND (
				(d.state IN (7, 8) AND NOT d.started AND u.state IN (3, 4, 5, 6))
				OR (d.state = 3 AND u.state IN (4, 5, 6))) RETURNING d.id, d.state)
		INSERT INTO {schema}.sync_events (kind, replica, command, state)
		SELECT 3, $1, id, state FROM (SELECT id, state FROM ended UNION ALL SELECT id, state FROM progressed
			UNION ALL SELECT id, state FROM redone) a`
	// allCommands is the commands under way and those that ended, as one
	// table, each with its rank in the order that needs attention first.
	allCommands = `(SELECT id, replica, name, params, note, issued_at, deadline, state, reason, result, answered_at, NULL::timestamptz AS done_at
			FROM {schema}.sync_commands
		UNION ALL SELECT id, replica, name, params, note, issued_at, deadline, state, reason, result, answered_at, done_at
			FROM {schema}.sync_commands_done) c`
	commandRank = `CASE c.state WHEN 5 THEN 0 WHEN 6 THEN 1 WHEN 7 THEN 2 WHEN 3 THEN 3 WHEN 2 THEN 4 WHEN 1 THEN 5 WHEN 4 THEN 6 ELSE 7 END`
	// qCommands lists a scope's commands ($1 a replica or NULL, $2 a name
	// or '', $3 the most, $4 the replicas' group names or NULL for all).
	qCommands = `SELECT c.id, c.replica, c.name, c.params, c.note, c.issued_at, c.deadline, c.state, c.reason, c.result, c.answered_at, c.done_at
		FROM ` + allCommands + `
		WHERE ($1::uuid IS NULL OR c.replica = $1) AND ($2 = '' OR c.name = $2) AND ` + inWishGroup4 + `
		ORDER BY ` + commandRank + `, c.issued_at, c.id LIMIT $3`
	qCommandCounts = `SELECT c.state, count(*) FROM ` + allCommands + `
		WHERE ($1::uuid IS NULL OR c.replica = $1) AND ($2 = '' OR c.name = $2) AND ` + inWishGroup3 + ` GROUP BY c.state`
	qCommandOf = `SELECT c.id, c.replica, c.name, c.params, c.note, c.issued_at, c.deadline, c.state, c.reason, c.result, c.answered_at, c.done_at
		FROM ` + allCommands + ` WHERE c.id = $1`
	qCommandStateOf = `SELECT state FROM ` + allCommands + ` WHERE c.id = $1`
)

// Command rollouts (commands_rollout.go): one command of many replicas,
// in stages. Their commands are rows of sync_commands (and, once ended,
// sync_commands_done) named by sync_command_rollout_replicas.
const (
	qCommandRolloutInsert = `INSERT INTO {schema}.sync_command_rollouts (name, params, note, deadline, scope_group, scope_all, first_stage, abort_percent, abort_after, start_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id`
	qCommandRolloutReplicas = `INSERT INTO {schema}.sync_command_rollout_replicas (rollout, replica, stage)
		SELECT $1, r, s FROM unnest($2::uuid[], $3::smallint[]) AS u(r, s)`
	// qCommandRolloutIssue issues the rollout's command ($2..$5: name,
	// params, note, deadline) to the replicas of stage $6 not issued one
	// yet, each under a new id ($7, by replica $8), and records which.
	qCommandRolloutIssue = `WITH u AS (SELECT * FROM unnest($7::uuid[], $8::uuid[]) AS u(id, replica)),
		todo AS (SELECT rr.replica, u.id FROM {schema}.sync_command_rollout_replicas rr JOIN u ON u.replica = rr.replica
			WHERE rr.rollout = $1 AND rr.stage = $6 AND rr.command IS NULL),
		ins AS (INSERT INTO {schema}.sync_commands (id, replica, name, params, note, deadline)
			SELECT id, replica, $2, $3, $4, $5 FROM todo RETURNING id, replica)
		UPDATE {schema}.sync_command_rollout_replicas rr SET command = ins.id FROM ins
			WHERE rr.rollout = $1 AND rr.replica = ins.replica`
	qCommandRolloutUnissued = `SELECT replica FROM {schema}.sync_command_rollout_replicas WHERE rollout = $1 AND stage = $2 AND command IS NULL ORDER BY replica`
	qCommandRolloutsRunning = `SELECT id FROM {schema}.sync_command_rollouts WHERE state = 'running' ORDER BY id`
	qCommandRolloutTryLock  = `SELECT name, params, note, deadline FROM {schema}.sync_command_rollouts
		WHERE id = $1 AND state = 'running' FOR UPDATE SKIP LOCKED`
	qCommandRolloutLock = `SELECT state FROM {schema}.sync_command_rollouts WHERE id = $1 FOR UPDATE`
	qCommandRolloutEnd  = `UPDATE {schema}.sync_command_rollouts SET state = $2, reason = $3, ended_at = now() WHERE id = $1`
	// qCommandRolloutCancel cancels the rollout's commands not started.
	qCommandRolloutCancel = `WITH l AS (SELECT c.id FROM {schema}.sync_commands c, {schema}.sync_command_rollout_replicas rr
			WHERE rr.rollout = $1 AND c.id = rr.command AND c.state < 3 ORDER BY c.id FOR UPDATE OF c),
		gone AS (DELETE FROM {schema}.sync_commands c USING {schema}.sync_command_rollout_replicas rr, l
			WHERE rr.rollout = $1 AND c.id = rr.command AND c.id = l.id AND c.state < 3 RETURNING c.*)
		INSERT INTO {schema}.sync_commands_done (id, replica, name, params, note, issued_at, deadline, started, state, reason, answered_at)
		SELECT id, replica, name, params, note, issued_at, deadline, started, 8, $2, now() FROM gone`
	// qCommandRolloutStatus reads rollouts ($1 one id, or NULL for the
	// newest $2) with their counts: replicas, issued, and the rollout's
	// commands by state, the first stage's not ended, the most frequent
	// reason of a failure.
	qCommandRolloutStatus = `SELECT r.id, r.name, r.params, r.note, r.deadline, r.scope_group, r.scope_all, r.first_stage, r.abort_percent, r.abort_after,
		r.state, r.reason, r.created_at, r.ended_at, r.start_at, r.start_at IS NOT NULL AND r.start_at > now(),
		(SELECT count(*) FROM {schema}.sync_command_rollout_replicas rr WHERE rr.rollout = r.id),
		(SELECT count(*) FROM {schema}.sync_command_rollout_replicas rr WHERE rr.rollout = r.id AND rr.command IS NOT NULL),
		coalesce((SELECT jsonb_object_agg(s.state, s.n) FROM (SELECT c.state, count(*) AS n
			FROM {schema}.sync_command_rollout_replicas rr JOIN ` + allCommands + ` ON c.id = rr.command
			WHERE rr.rollout = r.id GROUP BY c.state) s), '{}'),
		(SELECT count(*) FROM {schema}.sync_command_rollout_replicas rr JOIN ` + allCommands + ` ON c.id = rr.command
			WHERE rr.rollout = r.id AND rr.stage = 1 AND c.state < 4),
		coalesce((SELECT c.reason FROM {schema}.sync_command_rollout_replicas rr JOIN ` + allCommands + ` ON c.id = rr.command
			WHERE rr.rollout = r.id AND c.state IN (5, 6, 7) GROUP BY c.reason ORDER BY count(*) DESC, c.reason LIMIT 1), '')
		FROM {schema}.sync_command_rollouts r
		WHERE $1::bigint IS NULL OR r.id = $1 ORDER BY r.id DESC LIMIT $2`
)
