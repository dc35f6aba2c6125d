-- magicsync replica, step 7: commands, one-shot actions the replica runs
-- at most once.
--
-- sync_commands holds, per command (id: 16 bytes), the server's request
-- and what became of it here. The request is the server's: name, params,
-- note, issued_at and deadline (UTC microseconds; 0: none), message, the
-- id of the message that brought it; withdrawn is set once the server no
-- longer asks (the command ended there, was cancelled or expired).
--
-- The answer is the replica's: state as the protocol's CommandState
-- numbers it (2 delivered, 3 running, 4 succeeded, 5 failed, 6
-- interrupted, 7 expired, 8 cancelled), reason, result, answered_at. A
-- command is set running, and committed, before its handler is called:
-- a replica that finds one running as it starts was stopped while the
-- handler ran, and answers it interrupted rather than run it again. Each
-- new state goes up in the main lane, as a wish's answer does: answer_seq
-- is the message that carried it, answer_sent_at when, filed that the
-- server confirmed it; resent marks one sent again after a provisioning;
-- held, the build that set it aside after the server refused its message
-- for good.
--
-- A command that ended and was withdrawn is kept a while (Settings.
-- CommandsKept): a server restored from an older copy learns from the
-- answers sent again after its provisioning what became of it.
CREATE TABLE sync_commands (
	id BLOB PRIMARY KEY,
	name TEXT NOT NULL,
	params BLOB NOT NULL,
	note TEXT NOT NULL DEFAULT '',
	issued_at INTEGER NOT NULL,
	deadline INTEGER NOT NULL DEFAULT 0,
	message INTEGER NOT NULL,
	withdrawn INTEGER NOT NULL DEFAULT 0,
	state INTEGER NOT NULL DEFAULT 2,
	reason TEXT NOT NULL DEFAULT '',
	result BLOB,
	answered_at INTEGER,
	answer_seq INTEGER,
	answer_sent_at INTEGER,
	filed INTEGER NOT NULL DEFAULT 0,
	resent INTEGER NOT NULL DEFAULT 0,
	held TEXT
) WITHOUT ROWID;
CREATE INDEX sync_commands_state ON sync_commands (state, issued_at);
CREATE INDEX sync_commands_answer ON sync_commands (answer_seq);

-- sync_staged_commands holds the commands of a provisioning until its
-- EndSnapshot; started is the server's word that the replica started one.
CREATE TABLE sync_staged_commands (
	snapshot INTEGER NOT NULL,
	id BLOB NOT NULL,
	name TEXT NOT NULL,
	params BLOB NOT NULL,
	note TEXT NOT NULL DEFAULT '',
	issued_at INTEGER NOT NULL,
	deadline INTEGER NOT NULL DEFAULT 0,
	started INTEGER NOT NULL DEFAULT 0,
	message INTEGER NOT NULL,
	PRIMARY KEY (snapshot, id)
) WITHOUT ROWID;
