-- magicsync server, step 2: remember what each filed upload held, so that an
-- upload reusing a sequence with other content (a replica restored from an
-- older copy, or its database replaced) is filed, not taken for a repeat.
ALTER TABLE {schema}.sync_filed ADD COLUMN body_hash bytea;
