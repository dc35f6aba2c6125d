-- magicsync server, step 4: forgetting what can no longer be asked for.
--
-- The Filed message queued when an upload was filed: once the replica has
-- applied it (acknowledged a message at or past it), the replica sends that
-- upload no more, and after a grace period for copies still on the network
-- its row may go (Server.Run trims them, keeping the newest of each lane).
ALTER TABLE {schema}.sync_filed ADD COLUMN msg bigint;
CREATE INDEX sync_filed_at ON {schema}.sync_filed (at);

-- Per replica and lane, the highest sequence whose filing was forgotten: an
-- upload at or below it that carries rows and is not kept cannot be told
-- from a repeat, and is taken for a replica restored from an older copy.
CREATE TABLE {schema}.sync_filed_trimmed (
    replica uuid   NOT NULL REFERENCES {schema}.sync_replicas ON DELETE CASCADE,
    lane    text   NOT NULL,
    upto    bigint NOT NULL,
    PRIMARY KEY (replica, lane)
);

-- The message that carried a row a replica could not take (0: unknown), so
-- that the row's record goes once the replica applied a later message
-- carrying the row.
ALTER TABLE {schema}.sync_rejected ADD COLUMN msg bigint NOT NULL DEFAULT 0;

-- The first message of the replica's current (or last) provisioning: what
-- it could not take of an earlier one goes when this one ends; what it
-- could not take of this one stays.
ALTER TABLE {schema}.sync_replicas ADD COLUMN snap_first bigint NOT NULL DEFAULT 0;
