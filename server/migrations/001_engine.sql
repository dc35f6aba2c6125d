-- magicsync server, step 1: the engine's own tables.

-- Keys the host's writes touched, noted by the triggers in the writing
-- transaction and consumed by the planner (DELETE ... RETURNING).
CREATE TABLE {schema}.sync_touched (
    id  bigserial PRIMARY KEY,
    tbl text  NOT NULL,
    key jsonb NOT NULL
);
CREATE INDEX sync_touched_tbl ON {schema}.sync_touched (tbl, id);

-- A group is a set of replicas holding the same rows: "b" (broadcast),
-- "g:<members>:<value>" (grouped), "a:<replica>" (assigned). head is the
-- position of its log's last entry.
CREATE TABLE {schema}.sync_groups (
    id   bigserial PRIMARY KEY,
    name text   NOT NULL UNIQUE,
    head bigint NOT NULL DEFAULT 0
);

-- The ordered log of a group's changes: which key of which table changed.
CREATE TABLE {schema}.sync_log (
    grp bigint NOT NULL,
    pos bigint NOT NULL,
    tbl text   NOT NULL,
    key bytea  NOT NULL,
    PRIMARY KEY (grp, pos)
);

-- One row per catalog row the planner knows: its group, the hash of its
-- canonical tuple, and the log position of its last change.
CREATE TABLE {schema}.sync_rows (
    tbl  text   NOT NULL,
    key  bytea  NOT NULL,
    grp  bigint NOT NULL,
    hash bytea  NOT NULL,
    pos  bigint NOT NULL,
    PRIMARY KEY (tbl, key)
);
CREATE INDEX sync_rows_grp ON {schema}.sync_rows (grp, tbl, key);

-- The digest (internal/digest) of each group's rows of each table, kept
-- incrementally by the planner.
CREATE TABLE {schema}.sync_digests (
    grp  bigint NOT NULL,
    tbl  text   NOT NULL,
    sum  bytea  NOT NULL,
    rows bigint NOT NULL,
    PRIMARY KEY (grp, tbl)
);

-- Every replica the engine knows: its message ids, provisioning state and
-- what it last reported.
CREATE TABLE {schema}.sync_replicas (
    id               uuid PRIMARY KEY,
    next_id          bigint      NOT NULL DEFAULT 1,
    acked            bigint      NOT NULL DEFAULT 0,
    last_down        bigint      NOT NULL DEFAULT 0,
    secret           bytea,
    created_at       timestamptz NOT NULL DEFAULT now(),
    last_seen        timestamptz,
    last_poll        timestamptz,
    poll_window      interval,
    provision_needed boolean     NOT NULL DEFAULT false,
    provision_reason text,
    snapshot         bigint      NOT NULL DEFAULT 0,
    snap_grp         bigint      NOT NULL DEFAULT 0,
    snap_tbl         text        NOT NULL DEFAULT '',
    snap_key         bytea       NOT NULL DEFAULT '\x',
    snap_done        boolean     NOT NULL DEFAULT false,
    last_applied     bigint      NOT NULL DEFAULT 0,
    backlog          bigint      NOT NULL DEFAULT 0,
    build            text        NOT NULL DEFAULT ''
);

-- A replica's cursor into each group's log.
CREATE TABLE {schema}.sync_memberships (
    replica   uuid   NOT NULL REFERENCES {schema}.sync_replicas ON DELETE CASCADE,
    grp       bigint NOT NULL REFERENCES {schema}.sync_groups,
    acked_pos bigint NOT NULL,
    sent_pos  bigint NOT NULL,
    PRIMARY KEY (replica, grp)
);
CREATE INDEX sync_memberships_grp ON {schema}.sync_memberships (grp);

-- Messages built and not yet acknowledged, with the positions they bring
-- the replica's cursors to.
CREATE TABLE {schema}.sync_outbox (
    replica uuid     NOT NULL REFERENCES {schema}.sync_replicas ON DELETE CASCADE,
    id      bigint   NOT NULL,
    kind    text     NOT NULL,
    body    bytea    NOT NULL,
    grps    bigint[] NOT NULL DEFAULT '{}',
    poss    bigint[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (replica, id)
);

-- Upward messages filed, so that a repeat changes nothing; filed holds the
-- Filed confirmation to send again.
CREATE TABLE {schema}.sync_filed (
    replica  uuid        NOT NULL REFERENCES {schema}.sync_replicas ON DELETE CASCADE,
    lane     text        NOT NULL,
    sequence bigint      NOT NULL,
    filed    bytea       NOT NULL,
    at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (replica, lane, sequence)
);

-- Rows one side could not take: side 'replica' (it could not apply them) or
-- 'server' (it refused to file them).
CREATE TABLE {schema}.sync_rejected (
    replica uuid        NOT NULL REFERENCES {schema}.sync_replicas ON DELETE CASCADE,
    side    text        NOT NULL,
    tbl     text        NOT NULL,
    key     bytea       NOT NULL,
    reason  text        NOT NULL,
    at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (replica, side, tbl, key)
);

-- What a replica reported per table, and what was filed from it.
CREATE TABLE {schema}.sync_replica_tables (
    replica    uuid   NOT NULL REFERENCES {schema}.sync_replicas ON DELETE CASCADE,
    tbl        text   NOT NULL,
    held       bigint,
    held_sum   bytea,
    held_as_of bigint,
    unsent     bigint NOT NULL DEFAULT 0,
    filed      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (replica, tbl)
);

CREATE SEQUENCE {schema}.sync_snapshots;
