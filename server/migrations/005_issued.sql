-- magicsync server, step 5: what each message issued was, until the
-- replica acknowledged it.
--
-- A replica says, as it asks for its next message, which message it applied
-- last and the SHA-256 of that message's bytes (Server.NextAfter). A server
-- restored from an older backup may have issued that id again, to another
-- message, before the replica said where it stood — and dropped that
-- message since (confirmations of a lane merge into one under a new id).
-- So the sum of every message issued is kept here, whatever became of the
-- message, until the replica acknowledged a later one (the sum of the last
-- acknowledged stays: an acknowledgement, or an Up.LastApplied, carries no
-- sum, and may take the id the server issued again for the replica's): the
-- server tells the message it issued under an id from the one the replica
-- applied under it. A trigger keeps it, so that every way of queueing a
-- message does.
CREATE TABLE {schema}.sync_issued (
    replica uuid   NOT NULL REFERENCES {schema}.sync_replicas ON DELETE CASCADE,
    id      bigint NOT NULL,
    sum     bytea  NOT NULL,
    PRIMARY KEY (replica, id)
);

INSERT INTO {schema}.sync_issued (replica, id, sum)
SELECT o.replica, o.id, sha256(o.body) FROM {schema}.sync_outbox o;

CREATE FUNCTION {schema}.sync_issued_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.sync_issued (replica, id, sum) VALUES (NEW.replica, NEW.id, sha256(NEW.body))
    ON CONFLICT (replica, id) DO UPDATE SET sum = excluded.sum;
    RETURN NULL;
END
$$;

CREATE TRIGGER sync_issued_note AFTER INSERT OR UPDATE OF body ON {schema}.sync_outbox
    FOR EACH ROW EXECUTE FUNCTION {schema}.sync_issued_note();
