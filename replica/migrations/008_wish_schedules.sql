-- magicsync replica, step 8: wishes that expire, and wishes held to a
-- window of the day.
--
-- deadline is a wish's, in UTC microseconds (0: none): past it by the
-- replica's clock, the wish is not carried out; it is answered expired
-- (state 7).
ALTER TABLE sync_wishes ADD COLUMN deadline INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_staged_wishes ADD COLUMN deadline INTEGER NOT NULL DEFAULT 0;

-- window_from and window_to are a window of the replica's local day, in
-- minutes after its midnight (both 0: none): outside it, the wish waits.
ALTER TABLE sync_wishes ADD COLUMN window_from INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_wishes ADD COLUMN window_to INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_staged_wishes ADD COLUMN window_from INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_staged_wishes ADD COLUMN window_to INTEGER NOT NULL DEFAULT 0;
