// The engine's own SQL: its statements on its sync_* tables, and its
// readings of SQLite's catalog and pragmas, and its transactions, as named
// constants grouped by concept. SQL generated for the host's tables —
// upserts, deletes and lookups by key, the note and refuse triggers, the
// tables CreateTables makes — is built in sqlgen.go.
//
// A constant holding %s (or %d) verbs is a format: its comment says what
// fills them. Statements whose shape varies with the call (a list of
// placeholders, an optional column) are built where they run, from these
// fragments.

package replica

// SQLite's catalog and pragmas.
const (
	// pragmaQuery reads a connection's pragmas, the database's file name
	// last.
	pragmaQuery = `SELECT s.synchronous, j.journal_mode, r.recursive_triggers, d.file
		FROM pragma_synchronous s, pragma_journal_mode j, pragma_recursive_triggers r, pragma_database_list d
		WHERE d.name = 'main'`

	// pragmaColumns are the pragmas a message's first statement reads, as
	// table-valued functions: these evaluate a PRAGMA when the statement runs,
	// where a plain PRAGMA statement fixes its value when it is prepared, and
	// that statement is prepared once and run for every message.
	pragmaColumns = `(SELECT synchronous FROM pragma_synchronous), (SELECT journal_mode FROM pragma_journal_mode), ` +
		`(SELECT recursive_triggers FROM pragma_recursive_triggers)`

	// selectForeignKeyParents lists the tables a table's foreign keys point
	// at.
	selectForeignKeyParents = `SELECT DISTINCT "table" FROM pragma_foreign_key_list(?)`

	// selectForeignKeyViolations lists the rows that break a foreign key,
	// once a try's commit was refused.
	selectForeignKeyViolations = "SELECT \"table\", rowid, parent, fkid FROM pragma_foreign_key_check LIMIT 10000"

	// selectForeignKeyColumns lists the columns of a table's foreign key,
	// and those of the parent they point at.
	selectForeignKeyColumns = "SELECT \"from\", \"to\" FROM pragma_foreign_key_list(?) WHERE id = ? ORDER BY seq"

	// selectEveryForeignKey lists the foreign keys of every table of the
	// file but SQLite's and the engine's, a column pair a row: the table,
	// the key's id, the parent, and the columns ("to" is NULL for the
	// parent's primary key).
	selectEveryForeignKey = `SELECT m.name, f.id, f."table", f."from", f."to"
		FROM sqlite_master m, pragma_foreign_key_list(m.name) f
		WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\_%' ESCAPE '\' AND m.name NOT LIKE 'sync\_%' ESCAPE '\'
		ORDER BY m.name, f.id, f.seq`

	// selectPrimaryKeyColumns lists a table's primary key columns in order.
	selectPrimaryKeyColumns = "SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk"

	// selectIndexColumns lists the columns of a table's indexes (its
	// primary key's among them), index by index, in their order.
	selectIndexColumns = `SELECT il.name, ii.seqno, coalesce(ii.name, '') FROM pragma_index_list(?) il, pragma_index_info(il.name) ii
		ORDER BY il.name, ii.seqno`
)

// Installing: the engine's steps, its triggers, and the host's schema.
const (
	// stampFormat records that step %d ran.
	stampFormat = "UPDATE sync_replica SET schema_version = %d"

	// selectSchemaVersion reads the version of the engine's tables.
	selectSchemaVersion = "SELECT schema_version FROM sync_replica"

	// countReplicaTable says whether the engine's tables exist at all.
	countReplicaTable = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'sync_replica'"

	// selectEngineTriggers lists the engine's triggers with their SQL.
	selectEngineTriggers = `SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'sync\_%' ESCAPE '\'`

	// selectSyncTables lists the tables and views named sync_*.
	selectSyncTables = `SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name LIKE 'sync\_%' ESCAPE '\'`

	// selectColumnTypes lists a host table's columns and declared types.
	selectColumnTypes = "SELECT name, type FROM pragma_table_xinfo(?)"

	// selectWithoutRowid says whether a host table is WITHOUT ROWID.
	selectWithoutRowid = "SELECT wr FROM pragma_table_list WHERE name = ? AND schema = 'main'"

	// selectUniqueIndexes lists the columns of a host table's unique
	// indexes.
	selectUniqueIndexes = `SELECT il.name, ii.name FROM pragma_index_list(?) il, pragma_index_info(il.name) ii WHERE il."unique" = 1 ORDER BY il.name`

	// selectPrimaryKey reads whether a column is a host table's primary key.
	selectPrimaryKey = "SELECT pk FROM pragma_table_info(?) WHERE name = ?"
)

// Starting: the build, the replica's id, and what an earlier process left
// unconfirmed.
const (
	// releaseBacklog sends again the rows another build set aside.
	releaseBacklog = "UPDATE sync_pending SET held = NULL, held_reason = NULL WHERE held IS NOT NULL AND held <> ?"

	// releaseReports reports again what another build set aside.
	releaseReports = "UPDATE sync_rejected SET held = NULL WHERE held IS NOT NULL AND held <> ?"

	// recordBuild records the running build.
	recordBuild = "UPDATE sync_replica SET build = ?"

	// resendUnconfirmedRows makes rows sent and never confirmed due at once.
	resendUnconfirmedRows = "UPDATE sync_pending SET sent_at = ? WHERE sent_seq IS NOT NULL AND sent_at > ?"

	// reportUnconfirmedAgain makes reports sent and never confirmed due at
	// once.
	reportUnconfirmedAgain = "UPDATE sync_rejected SET reported_at = ? WHERE reported_seq IS NOT NULL AND filed = 0 AND reported_at > ?"

	// selectKnown reads whether the database knows the replica's id.
	selectKnown = "SELECT known FROM sync_replica"

	// dropSetupNotesFormat drops the notes of a table's rows that no longer
	// exist, written during setup: %s is the noted key of the table's rows
	// (notedKey), %s the table.
	dropSetupNotesFormat = "DELETE FROM sync_pending WHERE tbl = ? AND resent = 0 AND key NOT IN (SELECT %s FROM %s)"

	// noteCutKeysFormat notes the rows of an own table whose key holds a
	// NUL, as the triggers note a write: %s is the noted key of the
	// table's rows (notedKey), %s the table, %s the condition that a key
	// column holds a NUL (holdsNUL).
	noteCutKeysFormat = "INSERT INTO sync_pending (tbl, key, row_id) SELECT ?, %s, rowid FROM %s WHERE %s " +
		"ON CONFLICT (tbl, key) DO UPDATE SET row_id = excluded.row_id, change = change + 1"

	// recordID records the replica's id.
	recordID = "UPDATE sync_replica SET known = 1, id = ?"
)

// Applying a message (see also prepared.go, which prepares the first
// statements here once).
const (
	// lockReplica takes the write lock, marks the transaction as the
	// engine's own, and reads the last message applied and the pragmas.
	// It also says whether the replica keeps retired rows, which the
	// message's end then sweeps (see selectRetained).
	lockReplica = "UPDATE sync_replica SET applying = 1 RETURNING last_applied, " + pragmaColumns +
		", (SELECT EXISTS (SELECT 1 FROM sync_retained))"

	// markApplied records message ?1 applied.
	markApplied = "UPDATE sync_replica SET applying = 0, last_applied = ?1, reported_applied = reported_applied"

	// markFiledApplied records Filed message ?1 applied, as reported already
	// unless something else waits to be reported.
	markFiledApplied = "UPDATE sync_replica SET applying = 0, last_applied = ?1, " +
		"reported_applied = CASE WHEN reported_applied >= last_applied THEN ?1 ELSE reported_applied END"

	// selectLastApplied reads the id of the last message applied.
	selectLastApplied = "SELECT last_applied FROM sync_replica"

	// selectApplying reads the mark of the message's transaction: gone when
	// the transaction was rolled back.
	selectApplying = "SELECT applying FROM sync_replica"

	// insertRejected records a row left out, to be reported up.
	insertRejected = "INSERT INTO sync_rejected (tbl, key, reason, message, at) VALUES (?, ?, ?, ?, ?)"

	// savepointRow, rollbackToRow and releaseRow surround a statement of one
	// row.
	savepointRow  = "SAVEPOINT sync_row"
	rollbackToRow = "ROLLBACK TO sync_row"
	releaseRow    = "RELEASE sync_row"
)

// Retired rows kept while a row of the replica points at them.
const (
	// insertRetained records a row kept retired.
	insertRetained = "INSERT INTO sync_retained (tbl, key) VALUES (?, ?) ON CONFLICT (tbl, key) DO NOTHING"

	// selectRetained lists the rows kept retired.
	selectRetained = "SELECT tbl, key FROM sync_retained ORDER BY tbl, key"

	// forgetRetained forgets a row kept retired: gone, no longer retired,
	// or no longer of a table declaring Retired.
	forgetRetained = "DELETE FROM sync_retained WHERE tbl = ? AND key = ?"

	// markSweeping and unmarkSweeping surround the deletes of a sweep in
	// gather's transaction: the read-only triggers of the server's tables
	// let the engine's own writes pass, and a transaction that a trigger's
	// RAISE(ROLLBACK) undid shows the mark gone (see selectApplying).
	markSweeping   = "UPDATE sync_replica SET applying = 1"
	unmarkSweeping = "UPDATE sync_replica SET applying = 0"

	// countRetained counts the rows kept retired, per table.
	countRetained = "SELECT tbl, count(*) FROM sync_retained GROUP BY tbl ORDER BY tbl"
)

// Provisioning: staging, switching in, letting go.
const (
	// stageRows and stageRowsConflict surround the value lists of a
	// statement staging rows.
	stageRows         = "INSERT INTO sync_staged (snapshot, tbl, key, columns, row, message) VALUES "
	stageRowsConflict = " ON CONFLICT (snapshot, tbl, key) DO UPDATE SET columns = excluded.columns, row = excluded.row, message = excluded.message"

	// deleteStagedBefore and deleteStagedAfter drop what other
	// provisionings staged.
	deleteStagedBefore = "DELETE FROM sync_staged WHERE snapshot < ?"
	deleteStagedAfter  = "DELETE FROM sync_staged WHERE snapshot > ?"

	// selectStagedFirst and selectStagedAfter page through a snapshot's
	// staged rows of a table by key.
	selectStagedFirst = "SELECT key, columns, row FROM sync_staged WHERE snapshot = ? AND tbl = ? ORDER BY key LIMIT ?"
	selectStagedAfter = "SELECT key, columns, row FROM sync_staged WHERE snapshot = ? AND tbl = ? AND key > ? ORDER BY key LIMIT ?"

	// createHeld, clearHeld and insertHeld keep the keys a table holds
	// while a provisioning lets go of the others.
	createHeld = "CREATE TEMP TABLE IF NOT EXISTS sync_held (key BLOB PRIMARY KEY) WITHOUT ROWID"
	clearHeld  = "DELETE FROM temp.sync_held"
	insertHeld = "INSERT OR IGNORE INTO temp.sync_held (key) VALUES (?)"

	// selectHeldNotStaged lists the keys held that the snapshot did not
	// stage.
	selectHeldNotStaged = "SELECT key FROM temp.sync_held WHERE key NOT IN (SELECT key FROM sync_staged WHERE snapshot = ? AND tbl = ?)"

	// resendOwnFormat notes every row of an own table to go up again: %s is
	// the key expression (keyExpr), %s the table.
	resendOwnFormat = "INSERT INTO sync_pending (tbl, key, row_id, resent) SELECT ?, %s, rowid, 1 FROM %s WHERE true " +
		"ON CONFLICT (tbl, key) DO UPDATE SET row_id = excluded.row_id, change = change + 1, resent = 1, held = NULL, held_reason = NULL"

	// noteOwnDeleteFormat notes an own row the server records and the
	// replica no longer holds as deleted: %s is the key expression of bound
	// parameters (keyExpr).
	noteOwnDeleteFormat = "INSERT INTO sync_pending (tbl, key, row_id, resent) VALUES (?, %s, NULL, 1) " +
		"ON CONFLICT (tbl, key) DO UPDATE SET row_id = NULL, change = change + 1, resent = 1"

	// selectStagedLater says whether a later snapshot staged parts.
	selectStagedLater = "SELECT EXISTS (SELECT 1 FROM sync_staged WHERE snapshot > ?)"

	// deleteStaged and deleteStagedUpTo drop what was staged: all of it, or
	// up to a snapshot.
	deleteStaged     = "DELETE FROM sync_staged"
	deleteStagedUpTo = "DELETE FROM sync_staged WHERE snapshot <= ?"
)

// Filed: the server's confirmations and refusals.
const (
	// holdRefusedFormat sets aside a row the server refused in an upload:
	// %s is the key expression of bound parameters (keyExpr).
	holdRefusedFormat = "UPDATE sync_pending SET held = ?, held_reason = ?, sent_lane = NULL, sent_seq = NULL, sent_change = NULL " +
		"WHERE tbl = ? AND key = %s AND sent_lane = ? AND sent_seq = ? AND change = sent_change"

	// deleteFiled forgets the rows an upload filed, unless written again
	// since.
	deleteFiled = "DELETE FROM sync_pending WHERE sent_lane = ? AND sent_seq = ? AND change = sent_change AND held IS NULL"

	// unmarkFiled leaves the rest of the upload's rows to go again.
	unmarkFiled = "UPDATE sync_pending SET sent_lane = NULL, sent_seq = NULL, sent_change = NULL, sent_at = NULL, resent = 0 WHERE sent_lane = ? AND sent_seq = ?"

	// markReportsFiled records the reports an upload carried as heard.
	markReportsFiled = "UPDATE sync_rejected SET filed = 1 WHERE reported_seq = ?"

	// deleteClearingsFiled forgets the clearings an upload carried.
	deleteClearingsFiled = "DELETE FROM sync_rejected WHERE reported_seq = ? AND cleared = 1"
)

// Gathering an Up.
const (
	// pendingDue is the condition of a noted row due to go up, given the
	// time before which an unconfirmed send is sent again.
	pendingDue = "held IS NULL AND (unreadable IS NULL OR change <> unreadable) AND (sent_seq IS NULL OR change <> sent_change OR sent_at < ?)"

	// rejectedDue is the condition of a row this replica could not take that
	// is due to be reported, given the time before which an unconfirmed report
	// is sent again: like a row, a report is forgotten only once the server
	// confirms it.
	rejectedDue = "filed = 0 AND held IS NULL AND (reported_seq IS NULL OR reported_at < ?)"

	// anyPendingDueFormat says whether a row of the lane's tables is due:
	// %s is the placeholders of the tables.
	anyPendingDueFormat = "EXISTS (SELECT 1 FROM sync_pending WHERE tbl IN (%s) AND " + pendingDue + ")"

	// mainHasSayFormat says whether the main lane has something to say, and
	// when the digests went last: %s is whether a row is due.
	// Its arguments end with that time thrice: for the reports, for the
	// answers to wishes, then for those on commands.
	mainHasSayFormat = "SELECT %s OR last_applied > reported_applied OR EXISTS (SELECT 1 FROM sync_rejected WHERE " + rejectedDue + ") OR " +
		anyAnswerDue + " OR " + anyCommandAnswerDue + ", digests_at FROM sync_replica"

	// selectDueFormat lists the due rows of the lane's tables: %s is the
	// placeholders of the tables.
	selectDueFormat = `SELECT tbl, key, change, unreadable IS NOT NULL FROM sync_pending
			WHERE tbl IN (%s) AND resent = ? AND ` + pendingDue + `
			ORDER BY tbl, key LIMIT ?`

	// selectReplicaProgress reads the last message applied, the last
	// reported, and when the digests went last.
	selectReplicaProgress = "SELECT last_applied, reported_applied, digests_at FROM sync_replica"

	// nextLaneSeq takes the lane's next sequence.
	nextLaneSeq = "INSERT INTO sync_lanes (lane, next_seq) VALUES (?, 2) ON CONFLICT (lane) DO UPDATE SET next_seq = next_seq + 1 RETURNING next_seq - 1"

	// selectUnreported lists the reports due.
	selectUnreported = "SELECT tbl, key, reason, message, cleared FROM sync_rejected WHERE " + rejectedDue + " ORDER BY id LIMIT ?"

	// markReported records the reports due, the same selectUnreported read,
	// as sent in a message.
	markReported = "UPDATE sync_rejected SET reported_seq = ?, reported_at = ? WHERE id IN (SELECT id FROM sync_rejected WHERE " + rejectedDue + " ORDER BY id LIMIT ?)"

	// countUnsentAndHeld counts, per table, the rows left to send and those
	// in the backlog.
	countUnsentAndHeld = `SELECT tbl,
		count(*) FILTER (WHERE held IS NULL AND (unreadable IS NULL OR change <> unreadable) AND (sent_seq IS NULL OR change <> sent_change)),
		count(held)
		FROM sync_pending GROUP BY tbl`
)

// Digests of the settings and of the answers: whether their rows are on
// their way up, and the answers the server confirmed.
const (
	// anyInFlight says whether a row of an own table is on its way up —
	// unsent, or sent and unconfirmed (a message the transport refused for
	// good included) — or a report of a row set aside, or its clearing, is
	// not yet confirmed. The server's copy of the table differs then, as it
	// should.
	anyInFlight = "SELECT EXISTS (SELECT 1 FROM sync_pending WHERE tbl = ?1 AND NOT (" + setAside + ")) " +
		"OR EXISTS (SELECT 1 FROM sync_rejected WHERE tbl = ?1 AND filed = 0)"

	// setAside is the condition of a noted row set aside: refused for good
	// by the server in an upload it filed (held, no longer counted as
	// sent), or unreadable since it was last written. The server records
	// both (the side of sync_rejected its own or the replica's), and
	// leaves them out of the table's digest as the replica does.
	setAside = "(held IS NOT NULL AND sent_seq IS NULL) OR (unreadable IS NOT NULL AND unreadable = change)"

	// selectSetAsideKeys lists the noted keys of an own table's rows set
	// aside, as the triggers noted them.
	selectSetAsideKeys = "SELECT key FROM sync_pending WHERE tbl = ? AND (" + setAside + ")"

	// selectUnsettledFormat lists the rows of the tables %s (the
	// catalogs) the replica could not take that no later message brought
	// again, with whether the server confirmed their report.
	selectUnsettledFormat = "SELECT tbl, key, filed FROM sync_rejected WHERE settled = 0 AND tbl IN (%s)"

	// selectUnsettledBeforeFormat lists the records a message (?) may
	// settle: of rows of the tables %s it could not take from an earlier
	// message.
	selectUnsettledBeforeFormat = "SELECT id, tbl, key FROM sync_rejected WHERE settled = 0 AND message < ? AND tbl IN (%s)"

	// settleFormat settles records, listed by id (%s).
	settleFormat = "UPDATE sync_rejected SET settled = 1 WHERE id IN (%s)"

	// settleBeforeSnapshot settles the records of rows taken from messages
	// before a provisioning that ends: it replaces what they brought.
	settleBeforeSnapshot = "UPDATE sync_rejected SET settled = 1 WHERE settled = 0 AND message < ?"

	// anyAnswerUnfiled says whether an answer is not confirmed yet: unsent,
	// sent and unconfirmed, or set aside after the server refused its
	// message for good.
	anyAnswerUnfiled = "SELECT EXISTS (SELECT 1 FROM sync_wishes WHERE state <> 1 AND filed = 0)"

	// selectFiledAnswers lists the answers the server confirmed.
	selectFiledAnswers = "SELECT tbl, key, wish, state FROM sync_wishes WHERE state <> 1 AND filed = 1"
)

// Setting aside own rows the engine cannot read.
const (
	// clearUnreadable and clearUnreadableReport clear the record of a row
	// set aside before, now sent or forgotten; the clearing goes up.
	clearUnreadable       = "UPDATE sync_pending SET unreadable = NULL WHERE tbl = ? AND key = ?"
	clearUnreadableReport = "UPDATE sync_rejected SET cleared = 1, filed = 0, reported_seq = NULL, reported_at = NULL, held = NULL WHERE tbl = ? AND note = ? AND cleared = 0"

	// deleteDroppedNote forgets the delete of a row whose key never read.
	deleteDroppedNote = "DELETE FROM sync_pending WHERE tbl = ? AND key = ? AND change = ?"

	// markUnreadable, deleteUnreadableReport and insertUnreadableReport set
	// aside a row that does not read, with a fresh report.
	markUnreadable         = "UPDATE sync_pending SET unreadable = change, sent_lane = NULL, sent_seq = NULL, sent_change = NULL, sent_at = NULL WHERE tbl = ? AND key = ?"
	deleteUnreadableReport = "DELETE FROM sync_rejected WHERE tbl = ? AND note = ?"
	insertUnreadableReport = "INSERT INTO sync_rejected (tbl, key, reason, message, at, note) VALUES (?, ?, ?, ?, ?, ?)"
)

// Sending: a message taken, taken late, or not taken.
const (
	// markSentFormat records rows of one table as sent in a message: %s is
	// the placeholders of their keys.
	markSentFormat = "UPDATE sync_pending SET sent_lane = ?, sent_seq = ?, sent_change = change, sent_at = ? WHERE tbl = ? AND key IN (%s)"

	// markAppliedReported and alsoDigestsAt record what a message taken
	// reported: the last message applied, and, when it carried them, the
	// digests.
	markAppliedReported = "UPDATE sync_replica SET reported_applied = max(reported_applied, ?)"
	alsoDigestsAt       = ", digests_at = ?"

	// markSentAt and markReportedAt count a message taken late as sent from
	// now.
	markSentAt     = "UPDATE sync_pending SET sent_at = ? WHERE sent_lane = ? AND sent_seq = ?"
	markReportedAt = "UPDATE sync_rejected SET reported_at = ? WHERE reported_seq = ? AND filed = 0"

	// holdRefusedMessage, holdRefusedReports and markDigestsAt set aside
	// what a message refused for good carried.
	holdRefusedMessage = "UPDATE sync_pending SET held = ?, held_reason = ? WHERE sent_lane = ? AND sent_seq = ? AND change = sent_change"
	holdRefusedReports = "UPDATE sync_rejected SET held = ? WHERE reported_seq = ? AND filed = 0"
	markDigestsAt      = "UPDATE sync_replica SET digests_at = ?"

	// unmarkSent and unmarkReported undo the record of a message the
	// uplink did not take.
	unmarkSent     = "UPDATE sync_pending SET sent_lane = NULL, sent_seq = NULL, sent_change = NULL, sent_at = NULL WHERE sent_lane = ? AND sent_seq = ?"
	unmarkReported = "UPDATE sync_rejected SET reported_seq = NULL, reported_at = NULL WHERE reported_seq = ? AND filed = 0"
)

// Status.
const (
	// selectStatus reads the replica's id, the last message applied and the
	// build.
	selectStatus = "SELECT id, known, last_applied, build FROM sync_replica"

	// countPendingStates counts, per table, the rows unsent, unconfirmed,
	// in the backlog and unreadable.
	countPendingStates = `SELECT tbl,
		count(*) FILTER (WHERE held IS NULL AND (unreadable IS NULL OR change <> unreadable) AND (sent_seq IS NULL OR change <> sent_change)),
		count(*) FILTER (WHERE held IS NULL AND sent_seq IS NOT NULL AND change = sent_change),
		count(held),
		count(*) FILTER (WHERE held IS NULL AND unreadable = change)
		FROM sync_pending GROUP BY tbl`

	// countUnsentOfMessage counts the rows of a message the uplink has not
	// taken.
	countUnsentOfMessage = "SELECT count(*) FROM sync_pending WHERE sent_lane = ? AND sent_seq = ? AND held IS NULL AND change = sent_change"

	// selectRejectedRows lists the rows the replica could not take, newest
	// first.
	selectRejectedRows = "SELECT tbl, key, reason, message, at, filed FROM sync_rejected WHERE cleared = 0 ORDER BY id DESC LIMIT 100"
)

// Wishes: recorded as a message applies, staged by a provisioning, offered
// to the handlers, answered, and the answers sent up and confirmed.
const (
	// wishColumns are the columns of a wish, in the order the statements
	// below bind and read them.
	wishColumns = "tbl, key, wish, columns, wanted, based_on, note, wished_at, message, deadline, window_from, window_to"

	// recordWish records a wish, replacing (and clearing the answer of) an
	// older wish of the same row; an older or equal number changes nothing.
	recordWish = "INSERT INTO sync_wishes (" + wishColumns + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) " +
		"ON CONFLICT (tbl, key) DO UPDATE SET " + wishReplaced + " WHERE excluded.wish > sync_wishes.wish"

	// wishReplaced are the assignments of a wish replacing another: the
	// new wish, and no answer yet.
	wishReplaced = "wish = excluded.wish, columns = excluded.columns, wanted = excluded.wanted, based_on = excluded.based_on, " +
		"note = excluded.note, wished_at = excluded.wished_at, message = excluded.message, deadline = excluded.deadline, " +
		"window_from = excluded.window_from, window_to = excluded.window_to, " +
		"state = 1, reason = '', answered_at = NULL, needs_row = 0, answer_seq = NULL, answer_sent_at = NULL, filed = 0, resent = 0, held = NULL"

	// withdrawWish deletes the wish of a row: ?3 is the number withdrawn, 0
	// for whichever is held.
	withdrawWish = "DELETE FROM sync_wishes WHERE tbl = ?1 AND key = ?2 AND (?3 = 0 OR wish <= ?3)"

	// stageWish keeps a wish of a provisioning until its EndSnapshot.
	stageWish = "INSERT INTO sync_staged_wishes (snapshot, " + wishColumns + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) " +
		"ON CONFLICT (snapshot, tbl, key) DO UPDATE SET wish = excluded.wish, columns = excluded.columns, wanted = excluded.wanted, " +
		"based_on = excluded.based_on, note = excluded.note, wished_at = excluded.wished_at, message = excluded.message, deadline = excluded.deadline, " +
		"window_from = excluded.window_from, window_to = excluded.window_to " +
		"WHERE excluded.wish >= sync_staged_wishes.wish"

	// unstageWish drops a staged wish a later part withdrew.
	unstageWish = "DELETE FROM sync_staged_wishes WHERE snapshot = ?1 AND tbl = ?2 AND key = ?3 AND (?4 = 0 OR wish <= ?4)"

	// deleteStagedWishesBefore and deleteStagedWishesAfter drop what other
	// provisionings staged.
	deleteStagedWishesBefore = "DELETE FROM sync_staged_wishes WHERE snapshot < ?"
	deleteStagedWishesAfter  = "DELETE FROM sync_staged_wishes WHERE snapshot > ?"

	// dropWishesNotStaged deletes the wishes a provisioning did not stage.
	dropWishesNotStaged = "DELETE FROM sync_wishes WHERE NOT EXISTS (SELECT 1 FROM sync_staged_wishes s " +
		"WHERE s.snapshot = ? AND s.tbl = sync_wishes.tbl AND s.key = sync_wishes.key)"

	// switchInWishes records the wishes a provisioning staged: a wish held
	// under the same number keeps its answer, another is replaced.
	switchInWishes = "INSERT INTO sync_wishes (" + wishColumns + ") SELECT " + wishColumns + " FROM sync_staged_wishes WHERE snapshot = ? " +
		"ON CONFLICT (tbl, key) DO UPDATE SET " + wishReplaced + " WHERE excluded.wish <> sync_wishes.wish"

	// resendAnswers marks every answer held to go up again.
	resendAnswers = "UPDATE sync_wishes SET answer_seq = NULL, answer_sent_at = NULL, filed = 0, resent = 1, held = NULL WHERE state <> 1"

	// deleteStagedWishes and deleteStagedWishesUpTo drop the staged
	// wishes: all of them, or up to a snapshot.
	deleteStagedWishes     = "DELETE FROM sync_staged_wishes"
	deleteStagedWishesUpTo = "DELETE FROM sync_staged_wishes WHERE snapshot <= ?"

	// selectWishesToOffer lists the wishes not answered yet or waiting; %s
	// is a further condition.
	selectWishesToOfferFormat = "SELECT tbl, key, wish, columns, wanted, based_on, note, wished_at, deadline, window_from, window_to FROM sync_wishes WHERE state IN (1, 2) %s ORDER BY tbl, key"

	// selectRowsOfWishesFormat reads the rows of many wishes of one
	// setting table in one read: the first %s is the table's columns (of
	// t), the second the tuples (index, key values...), the third names the
	// table, the fourth matches its key columns to the tuple's values
	// (v.column2 on). Each row held comes with its index first.
	selectRowsOfWishesFormat = "SELECT v.column1, %s FROM (VALUES %s) AS v JOIN %s AS t ON %s"

	// anyWishWaiting says whether a wish waits.
	anyWishWaiting = "SELECT EXISTS (SELECT 1 FROM sync_wishes WHERE state = 2)"

	// selectWishNumber reads the number and state of the wish held of a row.
	selectWishNumber = "SELECT wish, state FROM sync_wishes WHERE tbl = ? AND key = ?"

	// setAsideWishesOf answers waiting the wishes of table ?1 not answered
	// yet, with reason ?2 at ?3: this build carries out none of them.
	setAsideWishesOf = "UPDATE sync_wishes SET state = 2, reason = ?2, answered_at = ?3, needs_row = 0, " +
		"answer_seq = NULL, answer_sent_at = NULL, filed = 0, resent = 0, held = NULL WHERE tbl = ?1 AND state = 1"

	// selectUnansweredWishTables lists the tables of the wishes not
	// answered yet.
	selectUnansweredWishTables = "SELECT DISTINCT tbl FROM sync_wishes WHERE state = 1"

	// recordAnswer answers wish ?3 of a row, still unanswered or waiting;
	// an answer the same as the one recorded changes nothing (it goes up
	// once). Its time (?6, the clock's) never goes back from that of the
	// answer before it to the same wish: a clock stepped back stamps it
	// just after, for the server keeps the later of two answers to a wish.
	recordAnswer = "UPDATE sync_wishes SET state = ?4, reason = ?5, answered_at = max(?6, coalesce(answered_at + 1, ?6)), needs_row = ?7, " +
		"answer_seq = NULL, answer_sent_at = NULL, filed = 0, resent = 0, held = NULL " +
		"WHERE tbl = ?1 AND key = ?2 AND wish = ?3 AND state IN (1, 2) AND (state <> ?4 OR reason <> ?5 OR needs_row <> ?7)"

	// answerDue is the condition of an answer due to go up, given the time
	// before which an unconfirmed one is sent again.
	answerDue = "state <> 1 AND filed = 0 AND held IS NULL AND (answer_seq IS NULL OR answer_sent_at < ?)"

	// anyAnswerDue says whether an answer is due.
	anyAnswerDue = "EXISTS (SELECT 1 FROM sync_wishes WHERE " + answerDue + ")"

	// selectAnswersDue lists the answers due, resent ones or not.
	selectAnswersDue = "SELECT tbl, key, wish, state, reason, answered_at FROM sync_wishes WHERE resent = ? AND " + answerDue + " ORDER BY tbl, key LIMIT ?"

	// markAnswersSent records the answers selectAnswersDue read as sent in
	// a message: ?1 the sequence, ?2 the time, then its arguments.
	markAnswersSent = "UPDATE sync_wishes SET answer_seq = ?1, answer_sent_at = ?2 WHERE (tbl, key) IN " +
		"(SELECT tbl, key FROM sync_wishes WHERE resent = ?3 AND " + answerDueNumbered + " ORDER BY tbl, key LIMIT ?5)"
	answerDueNumbered = "state <> 1 AND filed = 0 AND held IS NULL AND (answer_seq IS NULL OR answer_sent_at < ?4)"

	// markAnswersSentAt counts the answers of a message taken late as sent
	// from now.
	markAnswersSentAt = "UPDATE sync_wishes SET answer_sent_at = ? WHERE answer_seq = ? AND filed = 0"

	// unmarkAnswers undoes the record of a message the uplink did not take;
	// holdRefusedAnswers sets its answers aside when it was refused for
	// good.
	unmarkAnswers      = "UPDATE sync_wishes SET answer_seq = NULL, answer_sent_at = NULL WHERE answer_seq = ? AND filed = 0"
	holdRefusedAnswers = "UPDATE sync_wishes SET held = ? WHERE answer_seq = ? AND filed = 0"

	// markAnswersFiled records the answers an upload carried as filed.
	markAnswersFiled = "UPDATE sync_wishes SET filed = 1, resent = 0 WHERE answer_seq = ?"

	// releaseAnswers sends again the answers another build set aside.
	releaseAnswers = "UPDATE sync_wishes SET held = NULL WHERE held IS NOT NULL AND held <> ?"

	// answersUnconfirmedAgain makes answers sent and never confirmed due at
	// once.
	answersUnconfirmedAgain = "UPDATE sync_wishes SET answer_sent_at = ? WHERE answer_seq IS NOT NULL AND filed = 0 AND answer_sent_at > ?"

	// countWishStates counts the wishes by state.
	countWishStates = "SELECT state, count(*) FROM sync_wishes GROUP BY state"
)

// Reading a replica's file for Inspect and ReleaseBacklog.
const (
	// selectInspected reads the replica's own row.
	selectInspected = "SELECT schema_version, id, known, last_applied, reported_applied, build, digests_at FROM sync_replica"

	// selectLanes lists the lanes that sent, with the rows they sent and
	// have not seen confirmed.
	selectLanes = `SELECT l.lane, l.next_seq - 1,
		(SELECT count(*) FROM sync_pending p WHERE p.sent_lane = l.lane AND p.held IS NULL AND p.change = p.sent_change)
		FROM sync_lanes l ORDER BY l.lane`

	// selectBacklog lists the rows in the backlog.
	selectBacklog = "SELECT tbl, key, held, coalesce(held_reason, '') FROM sync_pending WHERE held IS NOT NULL ORDER BY tbl, key LIMIT ?"

	// countHeldReports and countHeldAnswers count the reports and answers
	// set aside.
	countHeldReports = "SELECT count(*) FROM sync_rejected WHERE held IS NOT NULL"
	countHeldAnswers = "SELECT count(*) FROM sync_wishes WHERE held IS NOT NULL"

	// countRejectedRows counts the rows the replica could not take, as
	// selectRejectedRows lists them.
	countRejectedRows = "SELECT count(*) FROM sync_rejected WHERE cleared = 0"

	// selectWishList lists the wishes with their answers, after a table and
	// key.
	selectWishList = `SELECT tbl, key, wish, note, columns, wished_at, state, reason, coalesce(answered_at, 0), filed, held IS NOT NULL
		FROM sync_wishes WHERE (tbl, key) > (?, ?) ORDER BY tbl, key LIMIT ?`

	// countStagedRows counts the rows a provisioning staged.
	countStagedRows = "SELECT count(*) FROM sync_staged"
)

// The mark of the engine's own writes, which the guards of its tables let
// through (guardTriggers).
const (
	// markWriting marks a transaction as one in which the engine writes
	// its own tables; unmarkWriting ends the mark before the commit, so
	// that it is never committed.
	markWriting   = "UPDATE sync_replica SET writing = 1"
	unmarkWriting = "UPDATE sync_replica SET writing = 0"

	// engineWriting is true while the engine writes in the transaction:
	// its mark, or a message's (applying).
	engineWriting = "(SELECT writing = 1 OR applying = 1 FROM sync_replica)"
)

// Releasing the backlog by hand (ReleaseBacklog).
const (
	// releaseBacklogFormat, releaseReportsFormat and releaseAnswersFormat
	// hand back what was set aside, whichever build did: %s is "" for
	// every table, or a condition on tbl.
	releaseBacklogFormat = "UPDATE sync_pending SET held = NULL, held_reason = NULL WHERE held IS NOT NULL%s"
	releaseReportsFormat = "UPDATE sync_rejected SET held = NULL WHERE held IS NOT NULL%s"
	releaseAnswersFormat = "UPDATE sync_wishes SET held = NULL WHERE held IS NOT NULL%s"

	// countNamedTable says whether the file has a table of that name.
	countNamedTable = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?"
)

// Creating the host's tables (CreateTables).
const (
	// selectTableExists counts the tables named ?.
	selectTableExists = "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?"
)

// Reports of messages that do not decode (ReportUndecodable).
const (
	// insertUndecodable records a message that does not decode, once.
	insertUndecodable = `INSERT INTO sync_rejected (tbl, key, reason, message, at)
	SELECT '', NULL, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM sync_rejected WHERE tbl = '' AND message = ?)`
)

// Transactions and savepoints.
const (
	// beginImmediate begins a write transaction with SQLite's write lock
	// taken first (immediate); beginRead a read transaction (readFile).
	beginImmediate = "BEGIN IMMEDIATE"
	beginRead      = "BEGIN"
	commitTx       = "COMMIT"
	rollbackTx     = "ROLLBACK"

	// takeWriteLock is a write that changes nothing, so that a transaction
	// begun by database/sql takes the write lock at once (waiting under the
	// busy timeout) rather than failing to upgrade a read begun earlier. It
	// needs the engine's table.
	takeWriteLock = "UPDATE sync_replica SET one = one WHERE 0"

	// savepointWish, rollbackToWish and releaseWish keep one answer to a
	// wish apart within its batch's transaction.
	savepointWish  = "SAVEPOINT wish"
	rollbackToWish = "ROLLBACK TO wish"
	releaseWish    = "RELEASE wish"

	// dropTrigger is the statement dropping a trigger, its quoted name
	// following.
	dropTrigger = "DROP TRIGGER "
)

// selectValueFormat reads one value: %s is its expression.
const selectValueFormat = "SELECT %s"

// The commands (commands.go).
const (
	// recordCommand records a command a message brought, once: a command
	// held already stays as it is here. Its state is ?9: delivered, or
	// interrupted (?10 the reason) for one the server says the replica
	// started and it holds no record of.
	recordCommand = "INSERT INTO sync_commands (id, name, params, note, issued_at, deadline, message, state, reason, answered_at) " +
		"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT (id) DO NOTHING"
	// withdrawCommand records that the server no longer asks (?2: now): a
	// command not started is expired here when its deadline passed, else
	// cancelled (filed: the server knows); the others stay as they are.
	withdrawCommand = "UPDATE sync_commands SET withdrawn = 1, " + withdrawNotStarted +
		", filed = CASE WHEN state = 2 THEN 1 ELSE filed END WHERE id = ?1 AND withdrawn = 0"
	withdrawNotStarted = "state = CASE WHEN state <> 2 THEN state WHEN deadline > 0 AND deadline < ?2 THEN 7 ELSE 8 END, " +
		"reason = CASE WHEN state <> 2 THEN reason WHEN deadline > 0 AND deadline < ?2 THEN '" + expiredHere + "' " +
		"ELSE 'the server took it back before it started' END, " +
		"answered_at = CASE WHEN state = 2 THEN ?2 ELSE answered_at END"
	// expiredHere is why a command expired on the replica.
	expiredHere  = "its deadline passed before it started (by the replica''s clock)"
	stageCommand = "INSERT INTO sync_staged_commands (snapshot, id, name, params, note, issued_at, deadline, started, message) " +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (snapshot, id) DO UPDATE SET started = excluded.started"
	unstageCommand             = "DELETE FROM sync_staged_commands WHERE snapshot = ? AND id = ?"
	deleteStagedCommandsBefore = "DELETE FROM sync_staged_commands WHERE snapshot < ?"
	deleteStagedCommandsAfter  = "DELETE FROM sync_staged_commands WHERE snapshot > ?"
	deleteStagedCommandsUpTo   = "DELETE FROM sync_staged_commands WHERE snapshot <= ?"
	deleteStagedCommands       = "DELETE FROM sync_staged_commands"
	withdrawCommandsNotStaged  = "UPDATE sync_commands SET withdrawn = 1, " + withdrawNotStarted + " " +
		"WHERE withdrawn = 0 AND NOT EXISTS (SELECT 1 FROM sync_staged_commands s WHERE s.snapshot = ?1 AND s.id = sync_commands.id)"
	// switchInCommands records the commands a provisioning staged that the
	// replica does not hold: delivered, or interrupted (?2 the reason,
	// ?3 the time) for one the server says the replica started.
	switchInCommands = "INSERT INTO sync_commands (id, name, params, note, issued_at, deadline, message, state, reason, answered_at) " +
		"SELECT id, name, params, note, issued_at, deadline, message, CASE WHEN started = 1 THEN 6 ELSE 2 END, " +
		"CASE WHEN started = 1 THEN ?2 ELSE '' END, CASE WHEN started = 1 THEN ?3 END " +
		"FROM sync_staged_commands WHERE snapshot = ?1 ON CONFLICT (id) DO NOTHING"
	// resendCommandAnswers makes every answer held go up again after a
	// provisioning: the server may have been restored from an older copy.
	resendCommandAnswers = "UPDATE sync_commands SET answer_seq = NULL, answer_sent_at = NULL, filed = 0, resent = 1, held = NULL"

	// interruptRunning answers interrupted the commands a replica that
	// stopped left running: their handler may have run.
	interruptRunning = "UPDATE sync_commands SET state = 6, reason = ?1, answered_at = ?2, " +
		"answer_seq = NULL, answer_sent_at = NULL, filed = 0 WHERE state = 3"
	// nextCommand is the oldest command delivered and not started.
	nextCommand = "SELECT id, name, params, note, issued_at, deadline FROM sync_commands WHERE state = 2 ORDER BY issued_at, id LIMIT 1"
	// setCommandState records a command's new state ?2 (from ?6, which it
	// must still have), its reason, result and time, due to go up.
	setCommandState = "UPDATE sync_commands SET state = ?2, reason = ?3, result = ?4, answered_at = ?5, " +
		"answer_seq = NULL, answer_sent_at = NULL, filed = 0 WHERE id = ?1 AND state = ?6"
	// forgetOldCommands drops the commands that ended, were withdrawn and
	// whose answer was filed before ?.
	forgetOldCommands = "DELETE FROM sync_commands WHERE withdrawn = 1 AND filed = 1 AND state >= 4 AND answered_at < ?"

	// commandAnswerDue is the condition of a command's answer due to go
	// up, given the time before which an unconfirmed one is sent again.
	commandAnswerDue        = "filed = 0 AND held IS NULL AND (answer_seq IS NULL OR answer_sent_at < ?)"
	anyCommandAnswerDue     = "EXISTS (SELECT 1 FROM sync_commands WHERE " + commandAnswerDue + ")"
	selectCommandAnswersDue = "SELECT id, state, reason, result, answered_at FROM sync_commands WHERE " + commandAnswerDue +
		" ORDER BY issued_at, id LIMIT ?"
	markCommandAnswersSent = "UPDATE sync_commands SET answer_seq = ?1, answer_sent_at = ?2 WHERE id IN " +
		"(SELECT id FROM sync_commands WHERE filed = 0 AND held IS NULL AND (answer_seq IS NULL OR answer_sent_at < ?3) ORDER BY issued_at, id LIMIT ?4)"
	markCommandAnswersSentAt       = "UPDATE sync_commands SET answer_sent_at = ? WHERE answer_seq = ? AND filed = 0"
	unmarkCommandAnswers           = "UPDATE sync_commands SET answer_seq = NULL, answer_sent_at = NULL WHERE answer_seq = ? AND filed = 0"
	holdRefusedCommandAnswers      = "UPDATE sync_commands SET held = ? WHERE answer_seq = ? AND filed = 0"
	markCommandAnswersFiled        = "UPDATE sync_commands SET filed = 1, resent = 0 WHERE answer_seq = ?"
	releaseCommandAnswers          = "UPDATE sync_commands SET held = NULL WHERE held IS NOT NULL AND held <> ?"
	releaseAllCommandAnswers       = "UPDATE sync_commands SET held = NULL WHERE held IS NOT NULL"
	commandAnswersUnconfirmedAgain = "UPDATE sync_commands SET answer_sent_at = ? WHERE answer_seq IS NOT NULL AND filed = 0 AND answer_sent_at > ?"
	countCommandStates             = "SELECT state, count(*) FROM sync_commands GROUP BY state"
	// selectCommandsInspected lists the ?1 commands issued last (Inspect).
	selectCommandsInspected = "SELECT id, name, note, issued_at, deadline, state, reason, coalesce(answered_at, 0), " +
		"filed <> 0, withdrawn <> 0, held IS NOT NULL FROM sync_commands ORDER BY issued_at DESC, id LIMIT ?1"
)
