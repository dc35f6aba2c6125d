// Package server is magicsync's engine on the head-office side, over the
// host's PostgreSQL (pgx v5).
//
// # Setting up
//
//	server.Migrate(ctx, pool)                 // the engine's sync_* tables, versioned, idempotent
//	sql, _ := server.Triggers(codecs, opts)   // add to the host's migrations, after its tables
//	s, err := server.New(ctx, pool, codecs, server.Options{Replicas: "shop.registers(id)"})
//	go s.Run(ctx)
//
// New checks the database against the declarations and says exactly what
// to run when something is missing or outdated.
//
// The engine keeps its own tables and functions (sync_*) in the schema
// Options.Schema names, public by default; with another, run
// server.MigrateSchema(ctx, pool, opts.Schema) instead of Migrate, and pass
// the same Options to Triggers and New.
//
// # The model: logs and cursors
//
// Triggers on every catalog table note the key of every row written, in
// sync_touched, in the writing transaction. They notify nobody: a
// notifying commit holds PostgreSQL's cluster-wide notify lock through its
// WAL flush, so the host's writing transactions would commit one at a
// time. Run instead reads how far sync_touched's sequence went every
// PollEvery (5 ms by default; a read that no writer waits for) and passes
// when it moved: a change waits PollEvery/2 on average before its pass.
// After a second without writes the watch slows, down to one read every
// 8 × PollEvery, so the first change after a quiet spell waits up to
// 40 ms for its pass, and an idle server reads the sequence some 25 times
// a second. Under Options.Linger, passes come no sooner than Linger apart
// (and the watch reads every Linger/2 while the host writes), and so do
// a replica's messages of changes: a steady stream of small transactions
// is planned and delivered a linger's worth at a time. A
// transaction that commits after that pass began is taken by another as
// soon as its notes are visible, when it commits within PassEvery of
// them; later, by the pass of the PassEvery timer. A row holding a value
// its declaration cannot hold ('infinity' in a time column, say) is taken
// as gone, with a warning naming its table and key, until it is written
// again with values that read: one such row never stops the planning of
// the others. A pass (pass, run by Run; one process at a time, under an
// advisory lock) consumes the noted keys with DELETE ... RETURNING — so a
// transaction that commits late is taken by a later pass, never skipped —
// reads those rows as they are, and works out each one's group from its
// route: "b" for a broadcast row, one group per value of a Grouped route's
// column, one per replica for an Assigned route. It compares the row with
// what it knew of it (sync_rows: one row per catalog row, not per
// replica — its group, its canonical tuple and the tuple's hash) and
// appends to the ordered log of each group concerned: the key changed (an
// upsert or a delete, decided when the message is built); a row moving
// group is entered in both logs; an unchanged row in none. Each group
// keeps, per table, the digest of its rows, incrementally.
//
// What a replica is known to hold is its cursor into the log of each of its
// groups (sync_memberships): so a change of 10,000 broadcast rows
// costs 10,000 log entries, not one row per replica, and an idle replica
// costs only its cursors.
//
// # Messages
//
// Messages are built lazily, at Next: the log entries after the replica's
// cursors, each key once, each row as the planner last planned it (its
// group and tuple in sync_rows; a row that has left the replica's groups
// goes as a delete: a replica never receives a row meant only for
// others), under
// Options.MaxMessageBytes. A built message is stored with its id (per
// replica, increasing, never reused) and returned again until acknowledged
// (Ack, or the replica's report of the last message applied); then the
// cursors move. A group's range of log is built once for all its members
// at the same position (a bounded cache). Next waits without polling: a
// pass wakes the waiters of the groups it appended to and of the replicas
// whose plan it changed (added, removed, moved to other groups), a filing
// those of its replica; Run LISTENs for what other processes did.
//
// What many replicas ask at once is done together. The replicas woken by
// a change to their groups' logs have their messages built in one
// transaction (a message built and encoded once for all at the same
// cursors, each getting it under its own id), and the acknowledgements
// that arrive while one batch of them commits are committed together in
// the next: a broadcast to a fleet costs a few statements and one commit
// per batch, not per replica. At most two batches of each run at once;
// the callers run them themselves, each one batch, so nothing runs in the
// background and no caller waits on others' work for long. A poll that
// says exactly the last message this process issued the replica, as
// issued, costs no statement (see the memo below); any other reads, in one
// statement, where the replica stands. A poll is written (when the replica
// was last seen, how long it waits) at most once a second for all
// replicas together, and again for one replica only once half its window
// passed.
//
// # Many processes, and what each remembers
//
// Any number of processes may serve one database, any of them any
// replica's poll, upload or acknowledgement. Each remembers, per replica,
// what it issued or read itself (memo.go: the last message issued and its
// sum, the last acknowledged, the groups), and trusts it only while the
// replica's word is exactly that message and Run's listener hears: it sends
// itself a heartbeat every second, and PostgreSQL delivers notifications
// in commit order, so hearing it means every change committed before was
// heard. Every change to what a replica's next message is — a message
// issued by any process ("i:", announced by the statement that records the
// ids), an upload filed, a plan changed ("r:"), a group's log grown ("g:")
// — drops the entries concerned and wakes the polls parked on them, which
// read again; an entry filled from a read is kept only if nothing
// concerning it was dropped since the read began. A listener that loses its
// connection, or whose heartbeat comes late, forgets everything and wakes
// every waiter. A database restored from an older backup closes the
// connections (everything is forgotten), a logical restore changes
// sync_replicas' oid (the heartbeat notices), and as a last guard a build
// that finds a replica's ids behind what this process issued forgets
// everything and fails the poll: the replica retries and its word is
// judged against the database. Writes stay the database's: a stale entry
// costs at most a retry or the lag of a notification, never a wrong
// message. A process SIGKILLed loses only its memory. Without Run nothing
// is remembered. While Run hears, a known replica's credentials are kept
// for ten minutes, a rotation anywhere ("c:") forgetting them at once.
//
// # Provisioning
//
// A replica is provisioned — sent everything it should hold, staged and
// switched in at EndSnapshot — when it is new (a row added to the replicas
// table), when its groups change (the members table's trigger; the pass
// comparing a replica's groups with its memberships waits for a
// provisioning of it under way, so that a change committed while one is
// built is compared with the groups it chose), when a
// digest it reports disagrees with the sum of its groups' digests (compared
// only when nothing is in flight: its outbox empty, its cursors at the
// heads, no keys of the table waiting for a pass; less the rows it could
// not take, which it leaves out of its digest too — and likewise for a
// setting, the rows either side set aside), or
// when it reports applying a message the server never issued (the server
// restored from an older backup; its ids move past it). Its cursors are set
// to the heads first (the groups' rows locked until the build commits, so
// that no pass moves the heads and no trim of the logs passes them
// meanwhile), then the snapshot is paged by key over its groups'
// rows, one message at a time, so memory stays bounded; what changes
// meanwhile follows through the log. The pages are read from sync_rows
// alone, each row as the planner last logged it (a row's tuple there is
// never older than the replica's cursor), not probed in the host's table
// row by row; while the replica applies one part, Run builds the next. The
// reason is kept for Status.
//
// # Filing
//
// Receive files what a replica sends up in one transaction, idempotent per
// (replica, lane, sequence), set-based (INSERT ... SELECT FROM unnest ...
// ON CONFLICT), the newer version winning, or any version when the replica
// resends after a provisioning. Rows of another replica, of catalogs, of
// undeclared tables, that do not decode or that the database refuses are
// refused and reported back in Filed; nothing else is blocked by them.
// The Filed messages of a lane merge while they wait to be handed out: one
// confirms every upload filed since (Filed.earlier), so that a stream of
// uploads over a lossy link never piles confirmations up, and a repeated
// upload adds none. A catalog change waits behind at most one Filed per
// lane: when only Filed messages are queued and the replica is behind, the
// next delta is built anyway.
//
// The record of a filed upload (what makes a repeat a repeat) is kept
// until the replica has applied its Filed — it sends that upload no more —
// and a day has passed, for copies still on the network; the newest of
// each lane is always kept. Run forgets the others. An upload with rows at
// a sequence forgotten is taken, like a kept sequence with other content,
// for a replica restored from an older copy: filed, and the replica
// provisioned again.
//
// The rows a replica reports it could not take are kept (Status) until it
// applies a later message carrying the same row, or a provisioning ends
// that began after the message it could not take; a report of a message
// older than the replica's current or last provisioning, arriving late, is
// not kept at all. A report of an own row the replica could not read
// (message 0) is kept until the replica says it cleared it (Up.Cleared):
// the row was written again, or deleted.
//
// A replica that cannot decode a message at all neither applies nor
// acknowledges it, and reports it (Up.Undecodable, its id and why). A
// report of a message the server issued it, not acknowledged, since its
// last provisioning began, drops what the server queued for it and
// provisions it again under new ids (Status says why); any other report
// changes nothing, so one sent again after that provisioning does not
// start another (undecodable.go).
//
// # A server restored from a backup
//
// Every poll may say which message the replica applied last, and the
// SHA-256 of its bytes (Next; the HTTP transport sends both). A
// replica that applied a message the server never issued, or another
// message than the one the server issued under that id, shows that the
// server was restored from an older backup and lost what the replica told
// it since: before anything more is handed out, the replica's ids move
// past its own and it is provisioned again, which makes it send all its
// own rows again — the receipts the restore lost among them. An upload's
// report of the last message applied (Up.LastApplied) naming an id the
// server never issued does the same. An acknowledgement does not: Ack
// refuses an id it never issued (ErrNotIssued) and changes nothing. Every
// path judges an id alike (ids.go): an id the server issued is taken; a
// report of one it never issued is taken below 2^62 only, and one at or
// beyond the bound is refused (ErrNotIssued) and changes nothing, so no
// report moves a replica's ids past the bound.
//
// # Wishes
//
// A setting is a record with desired columns: the replica owns the row,
// and the server may wish its desired columns other values (Desire, in
// the host's own transaction; Withdraw takes a wish back). The wish is a
// row of the engine's sync_wishes, which the planner treats as a catalog
// assigned to the replica that owns the setting: a wish goes only to that
// replica, is logged, sent, acknowledged and provisioned again as catalog
// rows are, and travels as the protocol's Wish. The replica answers in its
// uploads; an answer is taken only for the wish the server holds now, so
// that an answer to an older wish never overwrites a newer one; of two
// answers to the same wish the later in time stands, except that answers
// sent again after a provisioning are taken whatever their time. WishesOf
// (or WishesOfRows) reads the wishes of given rows; Wishes lists a
// scope's, those needing attention first. A wish withdrawn (Withdraw,
// WithdrawRow, a rollout aborted) stays listed, WishWithdrawn, with where
// it stood then, until a new wish of the row replaces it. A provisioning's
// end names the wishes whose answers the server records, and the replica
// sends its other answers again.
//
// # Rollouts
//
// A rollout is one wish of many replicas' setting rows: Roll, in the
// host's transaction, wishes a setting's desired columns the same values
// on every replica of a scope (RolloutScope: a group, a list of replicas,
// or all), each replica's row named by the key given with the replica's id
// in its origin column — or found by columns' values among the rows the
// replica filed (RolloutOptions.By: a setting keyed by an id of each
// replica's own, found by its name) — each wish based on the version the
// replica last filed (IfUnchanged). Its wishes are ordinary wishes, and its table,
// sync_rollouts (with sync_rollout_replicas, the wish it made of each
// replica), lets RolloutStatus and Rollouts read its counts by state in
// one query. RolloutOptions stage it (FirstStage: the rest is wished once
// the first stage answered for good) and bound its refusals
// (AbortAbovePercent, judged after AbortAfter answers). Run moves running
// rollouts on every PassEvery (AdvanceRollouts): the next stage, the
// replicas of a rollout By columns that have filed their row since, the
// end, or the abort, which wishes no further replica and takes back the
// rollout's wishes not carried out yet, as AbortRollout does.
//
// # Commands
//
// A command is a one-shot action a replica runs at most once, with a
// result: print a test page, recount the drawer. With Options.Commands
// set, IssueCommand writes one in the host's transaction, with its
// params and an optional deadline, to the engine's sync_commands, which
// the planner routes to its replica as it routes the wishes table — so a
// command is recorded before it is sent, confirmed and provisioned again
// like a catalog row — and which travels as the protocol's Command. The
// replica records it, runs it through the handler registered under its
// name (replica.Settings.Commands), and answers delivered, running, then
// succeeded (with the handler's result), failed (with why) or
// interrupted (it stopped while the handler ran; a command is never run
// twice). A command that ends leaves sync_commands for
// sync_commands_done, and the replica is told it is withdrawn.
// CancelCommand takes back one not started; Run expires, every
// PassEvery, those not started by their deadline (ExpireCommands), and a
// replica does not start one past it by its own clock. CommandOf reads
// one; Commands lists a scope's, those needing attention first.
//
// # Where things live
//
//   - server.go: New, Options, Server, the errors, and New's check of the
//     host's schema.
//   - run.go: Run and its services, one loop each: the planner's passes,
//     the watch (watch.go), the listener (listen.go), the builder ahead
//     (outbox_build.go), the poll recorder (polls.go), the rollouts (rollout.go)
//     and the trimmer (trim.go); and how a failing service logs (outage).
//   - watch.go: reading how far the triggers' notes went, to kick a pass.
//   - capture.go: the two ways of capture (Options.Capture), what
//     CaptureLogical needs of the database and New's check of it,
//     Publication and Slots; logical.go: reading the replication slot
//     into notes, and the slot's making, seeding and invalidation.
//   - listen.go: hearing the other processes (the wake channel) and the
//     listener's heartbeat, which keeps the memo trusted.
//   - polls.go: the polls seen, written in batches (Status's last seen).
//   - plan.go: the pass (pass): touched keys into the groups' logs; replicas
//     adopted, let go of and regrouped. Its state in the process is a
//     planner.
//   - the outbox, in files named outbox*.go: outbox.go, Next (what a
//     replica is handed next); outbox_seen.go, what a poll says, recorded
//     in batches; outbox_build.go, building a replica's next message;
//     outbox_deltas.go, many replicas' deltas in one transaction;
//     outbox_batch.go, the group commit those share; outbox_cache.go, the
//     cache of built log ranges; outbox_wake.go, waking waiting Next
//     calls; outbox_ack.go, Ack. Its state beside the database is an
//     outbox: the range cache, the replicas to build ahead for, the
//     batchers.
//   - provision.go: starting, building and ending a provisioning, and
//     detecting a server or replica restored from an older copy.
//   - ids.go: judging a message id a replica names, the same way on
//     every path (Ack, Next, Up.LastApplied).
//   - receiving an upload, a step a file: receive.go, Receive's pipeline
//     (decode, lock, repeat or new, commit); filing.go, filing its rows and
//     refusing the ones it cannot take; reports.go, what the replica
//     reports; digests.go (below), comparing its digests; confirm.go,
//     queueing and merging the confirmation (Filed).
//   - undecodable.go: a replica's report of a message it cannot decode.
//   - digests.go: keeping the digests per group and table, and comparing a
//     replica's.
//   - trim.go: forgetting acknowledged log entries, filed uploads, and the
//     records of rows a replica could not take.
//   - auth.go: Credentials and Authenticate, with their cache (credsCache).
//   - wishes.go: Desire, Withdraw, WishesOf and Wishes; the wishes table
//     as the planner sees it, and filing answers.
//   - commands.go: IssueCommand, CancelCommand, ExpireCommands,
//     CommandOf and Commands; the commands table as the planner sees it,
//     and filing their answers.
//   - rollout.go: Roll, RolloutStatus, Rollouts, AbortRollout and
//     AdvanceRollouts: one wish of many replicas, in stages;
//     rollout_by.go: finding each replica's row by columns' values.
//   - status.go: Ping and Status.
//   - memo.go: what a process remembers of the replicas it served, and
//     why it is correct across processes, restores and SIGKILL.
//   - model.go: the model of the declarations: tables, routes and groups.
//   - routes.go: Follows, Active and Retired: which rows are held, the
//     planning order, and following a parent that moved.
//   - schema.go: Schema, the declarations as the protocol's message.
//   - rows.go: reading the host's rows and their canonical values.
//   - triggers.go: Triggers, the triggers on the host's tables: what each
//     notes of which table.
//   - migrate.go: Migrate, MigrateSchema and Steps: the engine's schema
//     steps (migrations/).
//
// The server's SQL text lives in two files (and the schema steps in
// migrations/); every other file calls them:
//
//   - queries.go: the engine's fixed statements, named: on its sync_*
//     tables, and its reads of PostgreSQL's catalog; how they are rendered
//     for the engine's schema.
//   - sqlgen.go: the SQL generated at run time for the host's tables: the
//     fragments, the statements on one host table, the engine's templates
//     filled in with the host's names, and the triggers' SQL.
//
// # Follows, Active, Retired and replica_owned
//
// A Follows(col) row is held wherever the row its column points at is
// held, through any chain: its group is that row's, as sync_rows holds it.
// Which catalog it follows is named by the column's foreign key, which New
// requires (and it refuses routes that follow each other round in a
// cycle). The planner plans every followed catalog before its followers;
// when a pass moves a row to another group, lets it go or takes it in, it
// notes the keys of the rows following it (a query on the follower's
// column: index it), which the same pass plans. A change to one row costs
// its followers, not the fleet; a follower whose row is held nowhere (not
// yet written, NULL, not shown by an Active view, retired) is held nowhere
// and arrives with it. In every group's log a follower arrives after the
// row it follows and leaves before it, so a replica applying messages in
// order, however they are cut, never holds a follower without its row,
// however many follow it: a pass plans every follower of the rows it
// moved before it ends, 50,000 keys at a time, while the other keys it
// was noted beyond its batch wait for the next pass.
// A follower goes where its row is planned: read by a pass a moment after
// its row moved in the host's tables, and before that move was planned,
// it goes where the row was, and the next pass moves both.
//
// An Active view decides which rows are held at all: the planner holds a
// row only while the view shows its key. It learns of a change through
// the triggers: those of the table itself, and those of the tables the
// view reads, which the declaration names in ActiveReads with the columns
// holding the table's key (e.g. "shop.promotions(product_id)"); Triggers
// installs them too, noting the keys each write names, old and new. A view
// whose rows change without any write (one reading now(), say) is seen
// when the rows concerned are written again.
//
// A Retired column (bool) takes a retired row out of every group: it is
// sent to no replica that lacks it, and no provisioning sends it; a
// replica that holds it is sent a delete, which a replica whose own rows
// point at the row answers by keeping it, marked retired, until nothing
// points at it. Un-retired, it is sent again.
//
// A catalog's replica_owned columns are the replicas' alone: the server
// never reads, writes or sends them, its table need not have them, and
// digests leave them out.
package server
