-- magicsync replica, step 6: the engine's own tables refuse the host's
-- writes.
--
-- sync_replica.writing is set to 1 first thing in every transaction in
-- which the engine writes its own tables (as applying is in a message's),
-- and set back to 0 before it commits: it is never committed as 1. The
-- triggers that guard the engine's tables let a write through only while
-- one of the two is set, so the host's writes to them are refused, naming
-- the table, and the engine's pass.
ALTER TABLE sync_replica ADD COLUMN writing INTEGER NOT NULL DEFAULT 0;
