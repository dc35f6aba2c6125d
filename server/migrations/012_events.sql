-- magicsync server, step 12: events a host can follow (Server.Events).
--
-- The engine writes an event in its own transactions only — filing an
-- upload, filing answers to wishes, ending a provisioning, announcing a
-- replica online or offline — never in the host's. xid is the writing
-- transaction's id: a host's position is a snapshot, and the events after
-- it are those of the transactions it does not see, whatever their ids.
CREATE TABLE {schema}.sync_events (
    id       bigserial   PRIMARY KEY,
    xid      xid8        NOT NULL DEFAULT pg_current_xact_id(),
    at       timestamptz NOT NULL DEFAULT now(),
    -- kind as EventKind numbers it (1 records filed ... 6 provisioned).
    kind     smallint    NOT NULL,
    replica  uuid        NOT NULL,
    -- tbl and keys: the table and canonical keys of the rows filed, or of
    -- the setting row whose wish was answered; empty for the other kinds.
    tbl      text        NOT NULL DEFAULT '',
    keys     bytea[]     NOT NULL DEFAULT '{}',
    -- wish and state: the number of the wish answered, and the answer as
    -- WishState numbers it.
    wish     bigint      NOT NULL DEFAULT 0,
    state    smallint    NOT NULL DEFAULT 0,
    -- resent: filed from what a replica sent again after a provisioning.
    resent   boolean     NOT NULL DEFAULT false,
    -- command: the command answered (state then as CommandState numbers
    -- it).
    command  uuid
);
CREATE INDEX sync_events_xid ON {schema}.sync_events (xid, id);
CREATE INDEX sync_events_at ON {schema}.sync_events (at);

-- The highest transaction id whose events were trimmed: a position whose
-- snapshot's xmin is not above it may have missed events no longer kept.
CREATE TABLE {schema}.sync_events_trimmed (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    upto  xid8    NOT NULL
);

-- Whether each replica was last announced online (ReplicaOnline) or
-- offline (ReplicaOffline); replicas start as they stand now, so that
-- upgrading announces nothing.
ALTER TABLE {schema}.sync_replicas ADD COLUMN announced_online boolean NOT NULL DEFAULT false;
UPDATE {schema}.sync_replicas r SET announced_online = true
    WHERE coalesce(r.last_poll > now() - 2 * greatest(coalesce(r.poll_window, interval '30 seconds'), interval '2 seconds'), false);
