-- magicsync server, step 8: rollouts, one wish made of many replicas.
--
-- A rollout wishes the same values of one setting row on every replica of
-- a scope (a group, a list of replicas, or all of them), in stages: the
-- first stage in the host's transaction (Roll), the rest once the first
-- has answered (Run, or AdvanceRollouts). Its wishes are ordinary rows of
-- sync_wishes; sync_rollout_replicas remembers which wish it made of
-- which replica, so that its counts are read in one query and an answer
-- to a newer wish of the same row (a Desire, another rollout) is not
-- counted as its.
CREATE TABLE {schema}.sync_rollouts (
    id            bigserial   PRIMARY KEY,
    -- tbl names the setting table; template is the row as the host gave
    -- it (every column, its origin the nil uuid), from which each
    -- replica's row is made; wanted the tuple of its desired columns.
    tbl           text        NOT NULL,
    template      bytea       NOT NULL,
    wanted        bytea       NOT NULL,
    note          text        NOT NULL DEFAULT '',
    -- The scope as the host named it: a group's value, every replica, or
    -- a list of replicas (neither: scope_group '' and scope_all false).
    scope_group   text        NOT NULL DEFAULT '',
    scope_all     boolean     NOT NULL DEFAULT false,
    first_stage   integer     NOT NULL DEFAULT 0,
    abort_percent double precision NOT NULL DEFAULT 0,
    abort_after   integer     NOT NULL DEFAULT 0,
    -- state: running, done or aborted; reason says why it was aborted.
    state         text        NOT NULL DEFAULT 'running',
    reason        text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz
);
CREATE INDEX sync_rollouts_running ON {schema}.sync_rollouts (id) WHERE state = 'running';

-- One row per replica in a rollout's scope: its stage (1 the first, 2 the
-- rest), the key of its setting row (hex, as sync_wishes holds it), and
-- the number of the wish the rollout made of it (NULL: not wished yet).
CREATE TABLE {schema}.sync_rollout_replicas (
    rollout bigint   NOT NULL REFERENCES {schema}.sync_rollouts ON DELETE CASCADE,
    replica uuid     NOT NULL,
    stage   smallint NOT NULL,
    key     text     NOT NULL,
    wish    bigint,
    PRIMARY KEY (rollout, replica)
);
