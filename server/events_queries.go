package server

// events_queries.go holds the statements of the events a host follows
// (events.go), as queries.go holds the others: templates naming the
// engine's schema by {schema}.

// The numbers of the kinds in these statements are EventKind's.
const (
	qEventsOf = `SELECT id, xid::text, at, kind, replica, tbl, keys, wish, state, resent, command FROM {schema}.sync_events
		WHERE xid >= pg_snapshot_xmin($1::text::pg_snapshot) AND xid < pg_snapshot_xmax($2::text::pg_snapshot)
			AND pg_visible_in_snapshot(xid, $2::text::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, $1::text::pg_snapshot)
			AND (xid, id) > ($3::text::xid8, $4::bigint)
		ORDER BY xid, id LIMIT $5`
	// qEventSnapshot is the position of now, or of the transaction that
	// asks (in REPEATABLE READ, the snapshot its reads see).
	qEventSnapshot = `SELECT pg_current_snapshot()::text`
	// qEventsTrimmedPast reports whether events a position may not have
	// seen were trimmed: any of a transaction at or above its xmin.
	qEventsTrimmedPast = `SELECT coalesce((SELECT upto >= pg_snapshot_xmin($1::text::pg_snapshot) FROM {schema}.sync_events_trimmed), false)`
	// qEventsFiled writes an upload's RecordsFiled events, one per table
	// with the keys it filed ($2 names each key's table), in the filing's
	// transaction.
	qEventsFiled = `INSERT INTO {schema}.sync_events (kind, replica, tbl, keys, resent)
		SELECT 1, $1, u.tbl, array_agg(u.key ORDER BY u.n), $4
		FROM unnest($2::text[], $3::bytea[]) WITH ORDINALITY u(tbl, key, n)
		GROUP BY u.tbl ORDER BY min(u.n)`
	// qFileAnswersEvents is qFileAnswers writing a WishAnswered event for
	// each answer it takes, in the same statement.
	qFileAnswersEvents = `WITH a AS (` + qFileAnswers + `
		RETURNING w.tbl, w.key, w.wish, w.state)
		INSERT INTO {schema}.sync_events (kind, replica, tbl, keys, wish, state, resent)
		SELECT 2, $1, a.tbl, ARRAY[decode(a.key, 'hex')], a.wish, a.state, $8 FROM a ORDER BY a.tbl, a.key`
	// qEventProvisioned writes a replica's Provisioned event, and wakes
	// the followers of other processes.
	qEventProvisioned = `WITH e AS (INSERT INTO {schema}.sync_events (kind, replica) VALUES (6, $1))
		SELECT pg_notify($2, 'e:')`
	// qAnnouncePresence announces the replicas whose online (as Status has
	// it, qFleet) differs from what was last announced: ReplicaOnline (4)
	// or ReplicaOffline (5). The update's row locks make each change one
	// event whichever processes run it at once: a process that waited for
	// another's update finds the row announced, and skips it. The rows are
	// locked first, in id order, as every statement that locks many
	// replicas' rows does (buildDeltas, ackBatch, the pass): an update
	// that locked them as its scan met them would hold one a batch of
	// messages waits for while it waits for one the batch holds, and
	// PostgreSQL would end one of the two as a deadlock.
	qAnnouncePresence = `WITH l AS (SELECT r.id FROM {schema}.sync_replicas r WHERE ` + presenceChanged + `
			ORDER BY r.id FOR NO KEY UPDATE),
		p AS (UPDATE {schema}.sync_replicas r SET announced_online = NOT r.announced_online
			FROM l WHERE r.id = l.id AND ` + presenceChanged + `
			RETURNING r.id, r.announced_online),
		e AS (INSERT INTO {schema}.sync_events (kind, replica)
			SELECT CASE WHEN p.announced_online THEN 4 ELSE 5 END, p.id FROM p ORDER BY p.id RETURNING 1)
		SELECT count(*) FROM e`
	// qTrimEvents deletes up to $2 of the events of the transactions at or
	// below the newest that wrote an event older than $1, and records the
	// highest transaction trimmed; it returns how many it deleted.
	qTrimEvents = `WITH h AS (SELECT max(xid) AS x FROM {schema}.sync_events WHERE at < now() - $1::interval),
		d AS (DELETE FROM {schema}.sync_events e WHERE e.id IN (
				SELECT id FROM {schema}.sync_events, h WHERE xid <= h.x ORDER BY xid, id LIMIT $2)
			RETURNING e.xid),
		m AS (SELECT max(xid) AS x FROM d),
		r AS (INSERT INTO {schema}.sync_events_trimmed AS t (upto) SELECT m.x FROM m WHERE m.x IS NOT NULL
			ON CONFLICT (one) DO UPDATE SET upto = greatest(t.upto, excluded.upto))
		SELECT count(*) FROM d`
)

// replicaOnline is whether replica r stands online, as Status, the fleet's
// counts and the announcer have it: it polled within twice its poll's
// window (at least 2 seconds; 30 when it never said).
const replicaOnline = `coalesce(r.last_poll > now() - 2 * greatest(coalesce(r.poll_window, interval '30 seconds'), interval '2 seconds'), false)`

// presenceChanged is whether replica r's online differs from what was
// last announced of it.
const presenceChanged = `r.announced_online <> ` + replicaOnline
