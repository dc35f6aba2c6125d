-- magicsync replica, step 5: rows of a catalog declaring Retired that the
-- server let go while a row of the replica still points at them.
--
-- sync_retained lists, per catalog (tbl) and canonical key tuple (key),
-- a row the server deleted — or a provisioning did not stage — that the
-- replica keeps, its Retired column set, because a row of the file points
-- at it by a foreign key. The engine lets the row go, and forgets it here,
-- once nothing points at it any more; it forgets it too once the server
-- sends the row again, no longer retired.
CREATE TABLE sync_retained (
	tbl TEXT NOT NULL,
	key BLOB NOT NULL,
	PRIMARY KEY (tbl, key)
) WITHOUT ROWID;
