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
