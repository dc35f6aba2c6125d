-- magicsync server, step 11: commands, one-shot actions a replica runs at
-- most once.
--
-- sync_commands holds the commands still under way (queued, delivered,
-- running). The planner routes each row to its replica as it routes a
-- catalog row assigned to it: the command's columns travel down, the
-- answer's (state and after) never do. A command that ends — answered for
-- good, cancelled or expired — leaves it for sync_commands_done, which the
-- replica learns as the row's delete (a command withdrawn).
CREATE TABLE {schema}.sync_commands (
    id           uuid        PRIMARY KEY,
    replica      uuid        NOT NULL,
    name         text        NOT NULL,
    params       bytea       NOT NULL DEFAULT '',
    note         text        NOT NULL DEFAULT '',
    issued_at    timestamptz NOT NULL DEFAULT now(),
    deadline     timestamptz,
    -- started: the replica said it started the command (running, or an
    -- end): a replica restored from an older copy that holds no record of
    -- it answers it interrupted rather than run it.
    started      boolean     NOT NULL DEFAULT false,
    -- The answer: state as CommandState numbers it (1 queued ... 8
    -- cancelled), why, the handler's result, when.
    state        smallint    NOT NULL DEFAULT 1,
    reason       text        NOT NULL DEFAULT '',
    result       bytea,
    answered_at  timestamptz
);
CREATE INDEX sync_commands_replica ON {schema}.sync_commands (replica, state);
CREATE INDEX sync_commands_deadline ON {schema}.sync_commands (deadline) WHERE deadline IS NOT NULL;

-- sync_commands_done holds the commands that ended, as they ended, with
-- when they left sync_commands. A replica's later word still counts: a
-- command cancelled or expired here that the replica had started before
-- it heard takes the replica's state, which is what happened.
CREATE TABLE {schema}.sync_commands_done (
    id           uuid        PRIMARY KEY,
    replica      uuid        NOT NULL,
    name         text        NOT NULL,
    params       bytea       NOT NULL DEFAULT '',
    note         text        NOT NULL DEFAULT '',
    issued_at    timestamptz NOT NULL,
    deadline     timestamptz,
    started      boolean     NOT NULL DEFAULT false,
    state        smallint    NOT NULL,
    reason       text        NOT NULL DEFAULT '',
    result       bytea,
    answered_at  timestamptz,
    done_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sync_commands_done_replica ON {schema}.sync_commands_done (replica, state);

-- A command rollout is one command issued to every replica of a scope, in
-- stages, stopped when too many fail (as a rollout of a wish is). Its
-- commands are ordinary commands, each naming its rollout; the first
-- stage is issued in the host's transaction, the rest once the first
-- ended.
CREATE TABLE {schema}.sync_command_rollouts (
    id            bigserial   PRIMARY KEY,
    name          text        NOT NULL,
    params        bytea       NOT NULL DEFAULT '',
    note          text        NOT NULL DEFAULT '',
    deadline      timestamptz,
    scope_group   text        NOT NULL DEFAULT '',
    scope_all     boolean     NOT NULL DEFAULT false,
    first_stage   integer     NOT NULL DEFAULT 0,
    abort_percent double precision NOT NULL DEFAULT 0,
    abort_after   integer     NOT NULL DEFAULT 0,
    -- state: running, done or aborted; reason says why it was aborted.
    state         text        NOT NULL DEFAULT 'running',
    reason        text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz,
    -- start_at, when set, is when its first stage is issued.
    start_at      timestamptz
);
CREATE INDEX sync_command_rollouts_running ON {schema}.sync_command_rollouts (id) WHERE state = 'running';

-- One row per replica in a command rollout's scope: its stage (1 the
-- first, 2 the rest) and the command issued to it (NULL: not yet).
CREATE TABLE {schema}.sync_command_rollout_replicas (
    rollout bigint   NOT NULL REFERENCES {schema}.sync_command_rollouts ON DELETE CASCADE,
    replica uuid     NOT NULL,
    stage   smallint NOT NULL,
    command uuid,
    PRIMARY KEY (rollout, replica)
);
