-- magicsync server, step 9: wishes withdrawn stay visible, and rollouts
-- may find each replica's row by a column's value.
--
-- A wish withdrawn (Withdraw, or a rollout aborted) leaves sync_wishes —
-- the planner then tells its replica — and is kept here, as it stood, so
-- that a page can show it withdrawn; a new wish of the row forgets it.
CREATE TABLE {schema}.sync_wishes_withdrawn (
    tbl          text        NOT NULL,
    key          text        NOT NULL,
    replica      uuid        NOT NULL,
    wish         bigint      NOT NULL,
    wanted       bytea       NOT NULL,
    note         text        NOT NULL DEFAULT '',
    wished_at    timestamptz NOT NULL,
    -- The answer it had when withdrawn (state 1, pending: none).
    state        smallint    NOT NULL DEFAULT 1,
    reason       text        NOT NULL DEFAULT '',
    answered_at  timestamptz,
    withdrawn_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tbl, key)
);
CREATE INDEX sync_wishes_withdrawn_replica ON {schema}.sync_wishes_withdrawn (replica);

-- by_columns names the columns whose values, as the rollout's template
-- holds them, find each replica's row (empty: its key columns but the
-- origin). A replica in whose filed rows none or several match is
-- unmatched: not wished, and tried again as the rollout advances.
ALTER TABLE {schema}.sync_rollouts ADD COLUMN by_columns text[] NOT NULL DEFAULT '{}';
ALTER TABLE {schema}.sync_rollout_replicas ADD COLUMN unmatched boolean NOT NULL DEFAULT false;
