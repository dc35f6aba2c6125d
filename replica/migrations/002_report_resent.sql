-- magicsync replica, step 2: a report of a row the replica could not take
-- is sent again when not confirmed in time, and set aside when refused for
-- good.
--
-- reported_at is when the main lane's message reported it; held, the build
-- that set the report aside after the server refused its message for good.
ALTER TABLE sync_rejected ADD COLUMN reported_at INTEGER;
ALTER TABLE sync_rejected ADD COLUMN held TEXT;
