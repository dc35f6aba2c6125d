-- magicsync server, step 7: wishes, the server's half of a device twin.
--
-- One row per setting row the server wishes other values: the wish is the
-- server's (written by Desire in the host's transaction, taken back by
-- Withdraw), the answer the replica's (filed from its uploads). The
-- planner routes a wish to the replica that owns the setting row, as it
-- routes a catalog row assigned to it: the wish columns travel down, the
-- answer columns never do.
CREATE TABLE {schema}.sync_wishes (
    -- tbl names the setting table; key is its row's canonical key, in hex.
    tbl           text        NOT NULL,
    key           text        NOT NULL,
    replica       uuid        NOT NULL,
    -- wish numbers the wish: it grows with every new wish of the row, and
    -- past every number an older copy of this database issued.
    wish          bigint      NOT NULL,
    -- wanted is the tuple of the desired columns' values; based_on the
    -- one-value tuple of the row's version the wish is based on
    -- (IfUnchanged), NULL for Always.
    wanted        bytea       NOT NULL,
    based_on      bytea,
    note          text        NOT NULL DEFAULT '',
    wished_at     timestamptz NOT NULL DEFAULT now(),
    -- The answer to the wish numbered answered (0: none yet): state as
    -- WishState numbers it (1 pending ... 5 superseded).
    state         smallint    NOT NULL DEFAULT 1,
    reason        text        NOT NULL DEFAULT '',
    answered_at   timestamptz,
    answered      bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tbl, key)
);
CREATE INDEX sync_wishes_replica ON {schema}.sync_wishes (replica, state);
