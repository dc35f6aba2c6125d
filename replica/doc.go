// Package replica is the engine on one device — a cash register, a kiosk —
// over the host's SQLite database, through any database/sql driver (it
// imports none).
//
// A replica holds the rows of the server's tables (catalogs) that the server
// routes to it, read-only, and writes rows of its own (records and settings)
// that go up to the server. The tables are the host's: the engine reads and
// writes them with Go-typed values through the host's own driver, so the
// host reads back exactly what it would have written itself.
//
// # Setting up
//
// Install creates the engine's tables (named sync_*) and the triggers that
// note every write to the replica's own tables and refuse the host's writes
// to the server's, and to the engine's own tables at all times (the
// engine's writes pass: it marks the transactions in which it writes
// them); Triggers gives the same DDL as text, for hosts with
// migrations of their own. The engine's tables are set up by numbered
// steps, embedded from the package's migrations directory (001_engine.sql,
// …): a new database runs them all, one an earlier build set up only those
// after the version it records in sync_replica.schema_version, and Install
// refuses one a later build set up. Triggers lists the steps in order, then
// the triggers; a host's database at an earlier version needs only the
// steps after it. New opens the replica. Its Identity says which
// replica this is (Me for one that knows from the start): while it answers
// not known, nothing goes up and no write to the host's tables is refused
// — the host is setting
// the database up — and own rows written then go up once the id is known,
// as they are by then: a row deleted during setup, or renamed (a
// placeholder of the replica's own row given the id it learnt, and the
// rows pointing at it), goes up under its last key only, never as a
// delete of a key the server never had.
//
// The DSN must give every pooled connection durable commits
// (synchronous FULL), a journal that rolls back (WAL, say), and recursive
// triggers: New and every Receive refuse a connection without them, naming
// the PRAGMA and how to set it for modernc.org/sqlite and mattn/go-sqlite3.
// A database in memory may keep its journal in memory (it has no crash to
// survive), but not go without one (journal_mode OFF cannot roll back).
// A pool of a single connection is fine.
// DSN writes such a DSN for a file, for either driver (SQLiteDriver says
// which one the program registered); httpsync.OpenReplica opens the file
// with it, installs the engine's tables and opens the replica in one call.
// CreateTables makes the host's tables the database lacks from the
// declarations and the head office's Schema message, for a program that
// leaves them to the engine.
//
// Give every connection a busy timeout as well (modernc.org/sqlite:
// _pragma=busy_timeout(5000); mattn/go-sqlite3: _busy_timeout=5000, its
// default). The engine and the host write the same database, and SQLite
// has a writer that finds the write lock taken fail at once, as
// "database is locked", unless it may wait. The engine takes the lock only
// when it has something to write: applying a message, recording a send;
// an idle turn of Run only reads.
//
// # Down: Receive
//
// The host's transport hands every message from the server to Receive, and
// acknowledges it only after Receive returned nil. A message is applied in
// one transaction, with its id, committed before Receive returns; one at or
// below the last applied changes nothing. A row that does not decode, or
// that a constraint refuses, is left out, recorded and reported up, and the
// rest applies: one bad row never blocks the queue. A message that does
// not decode at all (ErrMalformed) is not acknowledged; the transport
// reports it once it came again with the same fault (ReportUndecodable),
// the main lane sends the report up, and the server provisions the
// replica again: one bad message never blocks it either.
//
// A catalog declaring Retired (magicsync.Table.Retired, a bool column)
// has the server's delete mean: let the row go, unless a row of the file
// points at it by a foreign key. Then the replica keeps it, its Retired
// column set, records it in sync_retained, and neither applies nor rejects
// the delete; a provisioning that did not stage it keeps it the same way.
// The end of every message, and gather's transaction after the host's own
// writes, sweep such rows: one nothing points at any more goes, and one
// the server sent again, no longer retired, is simply held again. The
// catalog's digest leaves out rows whose Retired column is true, as the
// server's does, and Status.Retained counts the rows kept. The foreign
// keys are read once, by New: restart the replica after a schema change.
// A sweep asks, of each row kept, whether a row points at it: index the
// columns of every foreign key pointing at such a catalog (New warns of
// one no index leads with, naming the CREATE INDEX), or each sweep reads
// the whole child table for every row kept.
//
// # Up: Run
//
// Run sends, per lane, the rows written since the last send as they are
// now, the rows the replica could not take, the last message applied and
// its digests, through the host's Uplink. A row is forgotten only once the
// server confirms it filed it, and so is a report of a row it could not
// take; what goes unconfirmed for ResendAfter is sent again. Failures back
// off per lane, and the message that failed goes again as it was — the
// same sequence and bytes, a repeat to the server if it got there after
// all — before the lane gathers its next one. Only the server's judgement
// of the rows themselves sets them aside (the backlog, until a different
// build runs): every other refusal keeps them queued, with its remedy (see
// Refusal) — backing off while the server is out of reach, sending smaller
// messages when one is too large, warning and showing the reason in Status
// while the replica's credentials or address are refused, waiting long for
// an older server's upgrade. A hung send is given up after SendTimeout
// while the other lanes go on, and its lane sends nothing more until the
// call returns. Rows an earlier process recorded as sent and never saw
// confirmed go again as soon as New starts.
//
// An own row the engine cannot read — written behind its back, by the
// sqlite3 CLI or another program, with a value its column's type cannot
// hold, or a key that does not read — never blocks its lane: it is set
// aside, counted in Status.Unreadable, listed in Status.Rejected with the
// column and the value, and reported to the server as a row the replica
// could not take. Written again with good values, it goes up and its
// report is cleared, on the server too; deleted, it is forgotten.
//
// New prepares the statements every message runs; Close releases them.
//
// # Wishes: the device twin
//
// A setting (magicsync.Setting) is a row the replica owns whose desired
// columns the server may wish other values. Settings.Wishes holds one
// Handler per setting table, built with Handle from a CarryOut of the
// table's row type (Direct for a setting that lives only in the database);
// New refuses a setting table without one. A wish of a table this build
// carries out none of — one it does not declare, or not as a setting, as
// an older build's — is held all the same, set aside: answered waiting,
// saying why, until a build that carries it out runs and offers it as it
// starts. A message's wishes are recorded
// in its transaction (a newer wish of a row replacing the older, a
// withdrawal deleting it), and Run offers each to its handler once that
// transaction committed, with no transaction open, in a goroutine of its
// own, bounded by WishesTimeout — only for a row the replica holds, and,
// under IfUnchanged, only while the row is at the version the wish was
// based on (else it is answered superseded). The handler answers Applied
// (the engine writes the wanted values onto the row, moves its version on
// as the replica's own write, and records the answer, in one
// transaction), Refused(why), or Later(why): the wish then waits, and is
// offered again on OfferWishes, after the next message that changes a
// wish, at start, and every WishesEvery. A panic or a timeout has the wish
// wait too; a write the database refuses answers it refused, with the
// database's reason; an answer to a wish replaced since is dropped. An
// answer's time never goes back from that of the answer before it to the
// same wish, even when the clock steps back. The answers go up in the
// main lane, confirmed and sent again like reports.
// At most 64 handlers run at once, so that a burst of wishes (thousands
// at a provisioning) does not open thousands of connections; one that
// hangs stops counting at its timeout. Their answers are recorded many to
// a transaction, each wish's write and answer under a savepoint of its
// own, so that a write the database refuses refuses that wish alone.
//
// A replica that stops after a handler ran and before its answer was
// recorded offers the same wish again, and so does one restored from an
// older copy: handlers must be idempotent.
//
// # Where things live
//
//   - replica.go: Replica, New and Close, the lanes, the build and the
//     replica's identity.
//   - api.go: what the host gives and gets: Identity, Uplink, SendError
//     and Refusal, Settings, Received, the errors.
//   - install.go: the schema steps (migrations/NNN_name.sql, run by
//     internal/migrate), Install, Triggers, and the check that the host's
//     tables fit the declarations.
//   - txn.go: the engine's write transactions (immediate, engineWrite,
//     writeEngine), marked as the engine's for the guards of its tables.
//   - downward, in the order a message goes: receive.go (Receive:
//     decode, apply, say what it brought; LastApplied), apply.go (the
//     tries of a message, the applier, upserts and deletes), provision.go
//     (staging a provisioning, switching it in, letting go of what it did
//     not stage), filed.go (applying Filed: confirmed rows forgotten,
//     refused rows set aside), undone.go (what a try learnt of the rows
//     that undid a message).
//   - upward, in the order a message goes: lane.go (Run and each lane's
//     loop, resending what was never confirmed), gather.go (gathering the
//     rows and reports due into an Up, recorded as sent), readrows.go
//     (reading the rows due as they are now), notedkey.go (a noted key
//     parsed), reports.go (what the main lane reports beside rows),
//     digests.go (the fingerprints it sends), send.go (the call of the
//     uplink), outcome.go (what the call came to: refusals, backoff, the
//     row cap halved, and what a message taken or not leaves).
//   - wishes.go: the wish handlers' API (Wish, Outcome, CarryOut, Handle,
//     Direct, Wishes), recording and staging the server's wishes, and the
//     answers due to go up.
//   - offer.go: offering wishes to their handlers, after the commit, and
//     recording their answers.
//   - status.go: Status. pragma.go: the connection check. prepared.go: the
//     statements every message runs.
//   - queries.go: the engine's own SQL on its sync_* tables, by concept.
//   - sqlgen.go: the SQL generated for the host's tables: the note,
//     refuse and guard triggers, and the statements by key.
package replica
