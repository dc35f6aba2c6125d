-- magicsync server, step 6: when a replica last reported where it stands.
--
-- Every upload carries the replica's report (its unsent counts, backlog,
-- build); uploads with nothing to confirm are not kept in sync_filed, so
-- the time of the last report is kept here, for the dashboard's "as of".
ALTER TABLE {schema}.sync_replicas ADD COLUMN reported_at timestamptz;
