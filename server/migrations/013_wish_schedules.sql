-- magicsync server, step 13: wishes that expire, and scheduled rollouts.
--
-- A wish may carry a deadline (DesireWith, RolloutOptions.Deadline): not
-- carried out by then, it stands expired, and its replica, which is sent
-- the deadline, does not carry it out later. expired_at is when the
-- server found the deadline passed with the wish not answered for good;
-- the replica's own answer, when it comes, stands over it.
ALTER TABLE {schema}.sync_wishes ADD COLUMN deadline timestamptz;
ALTER TABLE {schema}.sync_wishes ADD COLUMN expired_at timestamptz;
CREATE INDEX sync_wishes_deadline ON {schema}.sync_wishes (deadline) WHERE deadline IS NOT NULL AND expired_at IS NULL;
ALTER TABLE {schema}.sync_wishes_withdrawn ADD COLUMN deadline timestamptz;
ALTER TABLE {schema}.sync_rollouts ADD COLUMN deadline timestamptz;

-- Scheduled rollouts: a rollout may start at a time (start_at: its first
-- stage is wished then), and its wishes, like a wish Desire makes, may
-- hold to a window of each replica's local day (window_from, window_to:
-- minutes after the replica's midnight; both 0: none), outside which the
-- replica does not carry them out.
ALTER TABLE {schema}.sync_wishes ADD COLUMN window_from smallint NOT NULL DEFAULT 0;
ALTER TABLE {schema}.sync_wishes ADD COLUMN window_to smallint NOT NULL DEFAULT 0;
ALTER TABLE {schema}.sync_rollouts ADD COLUMN start_at timestamptz;
ALTER TABLE {schema}.sync_rollouts ADD COLUMN window_from smallint NOT NULL DEFAULT 0;
ALTER TABLE {schema}.sync_rollouts ADD COLUMN window_to smallint NOT NULL DEFAULT 0;
