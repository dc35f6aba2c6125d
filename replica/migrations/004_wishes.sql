-- magicsync replica, step 4: wishes, the replica's half of a device twin.
--
-- sync_wishes holds, per setting row (tbl, key: its canonical key tuple),
-- the server's current wish and the replica's answer to it. The wish is
-- the server's: wish numbers it (a newer number replaces an older), columns
-- names the desired columns (separated by the unit separator, 0x1f) whose
-- values wanted holds as a canonical tuple, based_on is the one-value tuple
-- of the row's version the wish was made on (IfUnchanged; NULL otherwise),
-- wished_at is in UTC microseconds, and message is the id of the message
-- that brought it.
--
-- The answer is the replica's: state as the protocol's WishState numbers
-- it (1 pending: not answered yet; 2 waiting, 3 applied, 4 refused, 5
-- superseded), reason, answered_at (UTC microseconds). It goes up in the
-- main lane: answer_seq is the message that carried it, answer_sent_at
-- when, filed that the server confirmed it; resent marks an answer sent
-- again after a provisioning; held, the build that set it aside after the
-- server refused its message for good. needs_row marks a wish waiting for
-- the replica to hold its row.
CREATE TABLE sync_wishes (
	tbl TEXT NOT NULL,
	key BLOB NOT NULL,
	wish INTEGER NOT NULL,
	columns TEXT NOT NULL,
	wanted BLOB NOT NULL,
	based_on BLOB,
	note TEXT NOT NULL DEFAULT '',
	wished_at INTEGER NOT NULL,
	message INTEGER NOT NULL,
	state INTEGER NOT NULL DEFAULT 1,
	reason TEXT NOT NULL DEFAULT '',
	answered_at INTEGER,
	needs_row INTEGER NOT NULL DEFAULT 0,
	answer_seq INTEGER,
	answer_sent_at INTEGER,
	filed INTEGER NOT NULL DEFAULT 0,
	resent INTEGER NOT NULL DEFAULT 0,
	held TEXT,
	PRIMARY KEY (tbl, key)
) WITHOUT ROWID;
CREATE INDEX sync_wishes_answer ON sync_wishes (answer_seq);

-- sync_staged_wishes holds the wishes of a provisioning until its
-- EndSnapshot, which replaces the wishes held with them.
CREATE TABLE sync_staged_wishes (
	snapshot INTEGER NOT NULL,
	tbl TEXT NOT NULL,
	key BLOB NOT NULL,
	wish INTEGER NOT NULL,
	columns TEXT NOT NULL,
	wanted BLOB NOT NULL,
	based_on BLOB,
	note TEXT NOT NULL DEFAULT '',
	wished_at INTEGER NOT NULL,
	message INTEGER NOT NULL,
	PRIMARY KEY (snapshot, tbl, key)
) WITHOUT ROWID;
