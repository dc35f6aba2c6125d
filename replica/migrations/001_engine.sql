-- magicsync replica, step 1: the engine's own tables, every name sync_*.

-- The one row of the replica's own state. schema_version is the number of
-- the last step run on this database.
CREATE TABLE sync_replica (
	one INTEGER PRIMARY KEY CHECK (one = 1),
	schema_version INTEGER NOT NULL,
	id TEXT,
	known INTEGER NOT NULL DEFAULT 0,
	applying INTEGER NOT NULL DEFAULT 0,
	last_applied INTEGER NOT NULL DEFAULT 0,
	reported_applied INTEGER NOT NULL DEFAULT 0,
	build TEXT NOT NULL DEFAULT '',
	digests_at INTEGER NOT NULL DEFAULT 0
);
INSERT INTO sync_replica (one, schema_version) VALUES (1, 1);

CREATE TABLE sync_lanes (
	lane TEXT PRIMARY KEY,
	next_seq INTEGER NOT NULL DEFAULT 1
);

-- sync_pending notes every write to the replica's own tables by key.
-- row_id is the rowid the row had when noted, NULL once it is deleted; the
-- engine reads rows by key, never by it (a rebuilt table numbers its rows
-- anew). change counts writes; sent_change is the count a send carried, so
-- a row written again after it was sent is sent again.
CREATE TABLE sync_pending (
	tbl TEXT NOT NULL,
	key TEXT NOT NULL,
	row_id INTEGER,
	change INTEGER NOT NULL DEFAULT 1,
	sent_lane TEXT,
	sent_seq INTEGER,
	sent_change INTEGER,
	sent_at INTEGER,
	resent INTEGER NOT NULL DEFAULT 0,
	held TEXT,
	held_reason TEXT,
	PRIMARY KEY (tbl, key)
) WITHOUT ROWID;
CREATE INDEX sync_pending_sent ON sync_pending (sent_lane, sent_seq);

-- sync_rejected keeps the rows this replica could not take, with why.
-- reported_seq says which message of the main lane reported one; filed,
-- that the server confirmed it.
CREATE TABLE sync_rejected (
	id INTEGER PRIMARY KEY,
	tbl TEXT NOT NULL,
	key BLOB,
	reason TEXT NOT NULL,
	message INTEGER NOT NULL,
	at INTEGER NOT NULL,
	reported_seq INTEGER,
	filed INTEGER NOT NULL DEFAULT 0
);

-- sync_staged holds the parts of a provisioning until its EndSnapshot.
CREATE TABLE sync_staged (
	snapshot INTEGER NOT NULL,
	tbl TEXT NOT NULL,
	key BLOB NOT NULL,
	columns TEXT NOT NULL,
	row BLOB NOT NULL,
	message INTEGER NOT NULL,
	PRIMARY KEY (snapshot, tbl, key)
) WITHOUT ROWID;
