-- magicsync replica, step 6: the engine's own tables refuse the host's
-- writes, and rows set aside leave their tables' digests on.
--
-- sync_replica.writing is set to 1 first thing in every transaction in
-- which the engine writes its own tables (as applying is in a message's),
-- and set back to 0 before it commits: it is never committed as 1. The
-- triggers that guard the engine's tables let a write through only while
-- one of the two is set, so the host's writes to them are refused, naming
-- the table, and the engine's pass.
ALTER TABLE sync_replica ADD COLUMN writing INTEGER NOT NULL DEFAULT 0;

-- sync_rejected.settled is set once a later message brought the row again
-- (or a provisioning replaced what the message brought): the record stays,
-- but the replica holds the row as the server sent it. A catalog's row
-- whose record is not settled is left out of the catalog's digest, as the
-- server leaves it out of what it expects, so that one row the replica
-- could not take does not keep the whole table from being compared.
ALTER TABLE sync_rejected ADD COLUMN settled INTEGER NOT NULL DEFAULT 0;
CREATE INDEX sync_rejected_unsettled ON sync_rejected (tbl) WHERE settled = 0;
