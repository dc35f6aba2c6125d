-- magicsync replica, step 3: an own row the engine cannot read is set
-- aside until it is written again or deleted, and reported; so is its
-- clearing.
--
-- sync_pending.unreadable is the change count of a row set aside as
-- unreadable: written again, its count moves on and it is read anew.
-- sync_rejected.note is the key as the note triggers wrote it, for an own
-- row the engine could not read (message 0); cleared, that the row was
-- written again or deleted since, which is reported in turn and forgotten
-- once the server confirms it.
ALTER TABLE sync_pending ADD COLUMN unreadable INTEGER;
ALTER TABLE sync_rejected ADD COLUMN note TEXT;
ALTER TABLE sync_rejected ADD COLUMN cleared INTEGER NOT NULL DEFAULT 0;
