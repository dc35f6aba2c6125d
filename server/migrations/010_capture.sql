-- magicsync server, step 10: capture by logical replication.
--
-- CaptureLogical: the replication slot whose start the engine noted every
-- row for. A slot missing while its row is here was lost (a database
-- restored from a dump, a new primary after failover): the engine makes it
-- again and notes every row once more.
CREATE TABLE {schema}.sync_capture (
    slot       text PRIMARY KEY,
    seeded_at  timestamptz NOT NULL DEFAULT now()
);
