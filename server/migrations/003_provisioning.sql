-- magicsync server, step 3: provisioning at the speed of the log.
--
-- Keep each catalog row's down tuple as the planner read it, beside its
-- hash, so that a provisioning reads its pages from {schema}.sync_rows alone,
-- in key order, rather than probing the host's table row by row. shape
-- names the column layout the tuple was encoded in (the declaration's down
-- columns and kinds); a tuple of another shape, or none (a row planned
-- before this step), is read from the host's table.
ALTER TABLE {schema}.sync_rows ADD COLUMN tuple bytea, ADD COLUMN shape bigint;

-- A message's body is protobuf, mostly keys and values that do not
-- compress: stored as it is, it is written four times faster than through
-- PostgreSQL's attempt at compressing it.
ALTER TABLE {schema}.sync_outbox ALTER COLUMN body SET STORAGE EXTERNAL;
