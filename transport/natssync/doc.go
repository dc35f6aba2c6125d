// Package natssync is the replica's end of magicsync's NATS transport: the
// client a device carries (Client), which sends up what its replica
// writes and takes what the head office sends down, as request and reply
// over NATS (github.com/nats-io/nats.go). It links nothing of the head
// office — neither package server nor PostgreSQL's driver, nor the NATS
// server. The head office's end, the responder serving the exchanges as a
// queue group, is package headoffice; package embedded starts a NATS
// server inside the process, for tests, demos and a shop's leaf node.
//
// # Protocol
//
// The exchanges are httpsync's, each a NATS request on a subject of the
// replica's own, "<prefix>.<replica uuid>.<exchange>" (prefix
// "magicsync" unless ClientOptions.Prefix says otherwise), each carrying
// the replica's token as "Authorization: Bearer <token>" in a header:
//
//	magicsync.<id>.next    Sync-Wait, Sync-Applied, Sync-Sha256 headers;
//	                       the reply carries the next message, its id in
//	                       Message-Id (status 200), or nothing (204) once
//	                       the wait passed. The same message comes again
//	                       until acknowledged.
//	magicsync.<id>.ack     Message-Id header: acknowledges the message,
//	                       once applied and committed (204).
//	magicsync.<id>.up      Files the request's data, one upward message,
//	                       in the lane the Sync-Lane header names ("main"
//	                       when absent) (204 once filed).
//	magicsync.<id>.schema  The head office's declarations as the
//	                       protocol's Schema message (200).
//
// Every reply carries its status in the Sync-Status header, an HTTP status
// code judged as over HTTP (5xx, 408 and 429 retryable, any other 4xx
// permanent for that request, none judging the rows of an upload), the
// reason of a refusal in Sync-Reason, and the head office's protocol in
// Sync-Protocol. No reply at all — no responders, or none before the
// timeout — is a head office out of reach: retryable. proto/PROTOCOL.md,
// section 11a, lists the whole mapping.
//
// # Guarantees
//
// The engine's own queues keep what is unacknowledged, so the transport
// needs no JetStream: a message is handed out again until the replica
// acknowledges it, and an upload the replica sends again after a lost
// reply is filed once (filing is idempotent). Several head-office
// processes serve the same fleet as a queue group: each request goes to
// one of them, and one that dies leaves its requests unanswered, which
// the replica retries once they time out — a next after its wait and 5
// seconds more, an upload or an acknowledgement after
// ClientOptions.RequestTimeout (15 seconds) — and another answers.
//
// # Authentication
//
// The head office checks the engine's token on every request, as over
// HTTP: it works with any NATS server, needs no NATS account per replica,
// and is rotated with server.Server.Credentials. Per-replica NATS
// credentials can be added on top, so that a replica can publish only to
// its own subjects and receive only its own replies: Connect gives the
// connection the replica's own inbox prefix ("_INBOX.<replica uuid>"),
// and ReplicaPermissions lists the subjects to allow.
//
// # Payload
//
// A NATS server takes at most max_payload bytes (1 MiB by default) of a
// message and its headers. Set it above the server's MaxMessageBytes (1
// MiB by default) with room for headers — package embedded sets 8 MiB — or
// lower MaxMessageBytes under it; Send refuses an upload that would not
// fit as replica.TooLarge, so that the replica sends its rows in smaller
// messages.
//
// # Conformance
//
// The command in conformance (go run ./transport/natssync/conformance
// -transport nats -replica "<command>") runs the conformance kit's cases
// over NATS, for a replica written in any language; conformance/goreplica
// is the Go replica over NATS.
package natssync
