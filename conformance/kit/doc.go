// Package kit is magicsync's conformance kit: it runs a real head office
// with a small scripted catalog and judges, case by case, whether a replica
// — written in any language — keeps the promises of the protocol
// (proto/PROTOCOL.md), by what the replica sends and what it holds.
//
// Run starts the head office (server.New over a fresh PostgreSQL database
// of its own, dropped at the end; the httpsync handler on a loopback
// listener, behind a proxy that injects faults), starts the replica under
// test as a process, runs every case in order and returns one Report per
// case. The command conformance (go run ./conformance -replica "<command>")
// prints them.
//
// # The contract a replica under test follows
//
// The kit starts the replica with sh -c "<command>", in its own process
// group, which it signals (SIGTERM, then SIGKILL after 5 s) at the end. It
// sets these environment variables:
//
//	MAGICSYNC_URL            the head office's base URL, e.g. http://127.0.0.1:41234:
//	                         the HTTP transport of transport/httpsync lives
//	                         under it (GET {url}/sync/{id}/next, POST
//	                         {url}/sync/{id}/ack/{msg}, POST {url}/sync/{id}/up,
//	                         and GET {url}/sync/{id}/schema: the Schema
//	                         message describing the tables below)
//	                         (with Config.Front, the URL the front gives:
//	                         nats://host:port for the NATS transport of
//	                         transport/natssync, PROTOCOL.md section 11a)
//	MAGICSYNC_REPLICA        the replica's id, a UUID in its text form
//	MAGICSYNC_TOKEN          the token to send as "Authorization: Bearer <token>"
//	MAGICSYNC_DB             the SQLite file the replica must use, and only it
//	MAGICSYNC_DIGESTS_EVERY  how often to send digests (a Go duration: "1s")
//	MAGICSYNC_RESEND_AFTER   how long an upload may go unconfirmed before its
//	                         rows are sent again (a Go duration: "2s")
//	MAGICSYNC_WISHES_EVERY   how often to try again a wish that waits (a Go
//	                         duration: "1s")
//
// The kit creates MAGICSYNC_DB before it starts the replica, holding the
// catalog's tables (SQLiteSchema): products, a catalog the head office
// broadcasts (key id); coupons, a catalog it broadcasts whose Retired
// column is retired (key id); receipts, the replica's record (key
// replica_id, id; replica_id is the replica's own id, as text);
// redemptions, a record whose coupon_id points at a coupon by a foreign
// key (key replica_id, id); and settings, the replica's setting (key
// replica_id, name; value desired, version its version, every wish carried
// out). A replica runs one command, echo, whose result is its params as
// they came (EchoCommand). The replica takes the tables as they are, adds whatever it keeps
// of its own, and syncs them: the declarations are Product, Coupon,
// Receipt, Redemption and Setting (Codecs returns them for a Go replica;
// the schema endpoint describes them for any other). The products table
// has a CHECK the head office lacks: a replica takes no price above
// MaxReplicaPrice. A wish of a setting is carried out by writing it: the
// replica writes the wanted value and moves the version on.
//
// The replica polls for its messages with a long-poll of at most a few
// seconds, saying where it stands (applied, sha256) on every poll, and
// sends its own rows within a second or so of their being written. The
// kit writes receipts into MAGICSYNC_DB itself, through a connection of
// its own, as the replica's application would (INSERT INTO receipts);
// the replica must notice them and send them up. A replica whose engine
// notes writes with triggers (as the Go one does) sees them as its own
// application's.
//
// Besides, the kit reads MAGICSYNC_DB read-only (mode=ro) to see what the
// replica holds, and asks the head office (server.Status and its database)
// what the replica sent. A replica may keep its tables in WAL mode; it
// must not hold an exclusive lock on the file between its transactions.
//
// # The cases
//
// They run in this order, over one replica, each within Config.CaseTimeout:
//
//   - provisioning in several parts: the catalog is larger than one message
//     of the head office (whose bound the kit sets to 2 KiB): the replica
//     stages every part, switches them in at EndSnapshot and then holds
//     exactly the head office's products.
//   - deltas: an update, an insert and a delete reach the replica, without
//     a new provisioning.
//   - a message served twice: the acknowledgement of a message is answered
//     503 and the message served again at the replica's next poll: the
//     replica must poll again (it may try the acknowledgement again first,
//     but must not wait on it), acknowledge the message when it comes
//     again, and hold the same rows.
//   - redelivery of an older message: after messages m1 and then m2 changed
//     one product, m1 is served again: the replica must acknowledge it and
//     change nothing (its id is at or below the last applied).
//   - a digest mismatch: one row is taken out of a message on the way: the
//     replica's digest must disagree, the head office provisions it again,
//     and it must come to hold the row.
//   - a newer protocol: a message is served with a protocol number above 1:
//     the replica must neither apply nor acknowledge it, and ask again; the
//     same message in protocol 1 is then applied.
//   - resend with the same sequence: an upload carrying a receipt is
//     answered 503: the replica must send that upload again with the same
//     lane, sequence and bytes; it is then filed.
//   - a lost Filed: the Filed confirming an upload is taken away: the
//     replica must send the receipt again, and take the Filed of that.
//   - an undecodable row: one row's tuple in a message is made malformed:
//     the replica must leave that row out, apply the rest, acknowledge the
//     message and report the row up as rejected (the head office's status
//     lists it).
//   - a constraint refusal: the same, for a row its CHECK refuses.
//   - a retired row kept while pointed at: the head office retires two
//     coupons the replica holds, one of them pointed at by a redemption the
//     kit wrote into the replica's file. The replica must let the other go,
//     keep the pointed-at one with retired true, report nothing of it and
//     leave it out of its digests (the head office must not provision it
//     again); once the kit deletes the redemption, the replica must let the
//     coupon go without a message from the head office.
//   - a wish of a row not held: the head office wishes a value of the
//     replica's settings row footer, which the replica does not hold. The
//     replica must answer WAITING with a reason (the Go replica: "the
//     replica holds no such row yet"); once the kit writes the row into
//     the replica's file, it must carry the wish out — the wanted value
//     written, the version moved on, the row sent up — and answer APPLIED.
//   - commands: the head office issues the replica three commands: echo
//     (EchoCommand) with params "hello from the kit", which the replica
//     must run once and answer SUCCEEDED with the params, as they came,
//     as its result; one of a name the replica has no handler for, which
//     it must answer FAILED with a reason; and echo again with a deadline
//     already past, which it must not run, answering EXPIRED (the head
//     office may end it first).
//   - a message that cannot be decoded: the first message carrying a new
//     product is cut in half (ending in a byte no decoder takes) every
//     time it is served: the replica must neither apply nor acknowledge
//     it, report it up (an Up whose undecodable names its id), and,
//     provisioned again, hold the product.
//   - a restore of the head office: the head office is backed up, changes
//     and a receipt are synced, and the head office is restored from the
//     backup: the replica must be provisioned again (it says where it
//     stands), hold the backup's rows and send the lost receipt again.
//
// A case fails with the reason the kit saw, and what it saw of the
// messages and uploads meanwhile.
//
// # The Go replica
//
// conformance/goreplica is the Go engine (package replica with the
// httpsync client) as a program that follows this contract; the kit's
// tests run it. With -break=idempotent it sets its last applied id back to
// 0 before every message, so that a message served again is applied
// again: the kit's self-test sees "redelivery of an older message" fail.
package kit
