-- magicsync replica, step 8: wishes that expire.
--
-- deadline is a wish's, in UTC microseconds (0: none): past it by the
-- replica's clock, the wish is not carried out; it is answered expired
-- (state 7).
ALTER TABLE sync_wishes ADD COLUMN deadline INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_staged_wishes ADD COLUMN deadline INTEGER NOT NULL DEFAULT 0;
