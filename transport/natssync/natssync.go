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
// the replica retries and another answers.
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
package natssync

import (
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/transport/natssync/internal/natswire"
)

// Header names of the protocol.
const (
	// HeaderAuthorization carries "Bearer <token>" on every request.
	HeaderAuthorization = natswire.HeaderAuthorization
	// HeaderStatus carries, on every reply, its status as a decimal HTTP
	// status code.
	HeaderStatus = natswire.HeaderStatus
	// HeaderReason carries a refusal's reason.
	HeaderReason = natswire.HeaderReason
	// HeaderRetryAfter carries, on a 429 or 503, the seconds to wait.
	HeaderRetryAfter = natswire.HeaderRetryAfter
	// HeaderMessageID carries the id of a message, a decimal uint64.
	HeaderMessageID = natswire.HeaderMessageID
	// HeaderLane names the lane of an upward message.
	HeaderLane = natswire.HeaderLane
	// HeaderProtocol names the protocol the head office speaks, on every
	// reply.
	HeaderProtocol = natswire.HeaderProtocol
	// HeaderWait is how long a next may wait, in decimal seconds.
	HeaderWait = natswire.HeaderWait
	// HeaderApplied is, on a next, the last message the replica applied.
	HeaderApplied = natswire.HeaderApplied
	// HeaderSHA256 is, on a next, the hex SHA-256 of that message.
	HeaderSHA256 = natswire.HeaderSHA256
)

// DefaultPrefix is the first token of the protocol's subjects.
const DefaultPrefix = natswire.DefaultPrefix

// DefaultLane is the lane of an upward message without a Sync-Lane header.
const DefaultLane = natswire.DefaultLane

// Subject returns the subject of one of replica's exchanges ("next",
// "ack", "up" or "schema") under prefix.
func Subject(prefix string, replica uuid.UUID, exchange string) string {
	return natswire.Subject(prefix, replica, exchange)
}

// JoinToken makes the token a replica presents from its id and the secret
// server.Server.Credentials issued it: "<replica uuid>.<secret>", the
// same as httpsync's.
func JoinToken(replica uuid.UUID, secret string) string { return natswire.JoinToken(replica, secret) }

// TokenReplica returns the replica a token of JoinToken's form claims to
// be. It says nothing of whether the token is valid.
func TokenReplica(token string) (uuid.UUID, bool) { return natswire.TokenReplica(token) }

// InboxPrefix is the inbox prefix Connect gives replica's connection, under
// which its replies come.
func InboxPrefix(replica uuid.UUID) string { return natswire.InboxPrefix(replica) }

// Permissions are the subjects a NATS user may publish and subscribe to.
type Permissions struct {
	Publish, Subscribe []string
}

// ReplicaPermissions returns what replica's NATS user needs, and all it
// needs, under prefix: to publish its own requests and to receive the
// replies under its own inbox prefix. Give them to the NATS server's
// authorization for the replica's user (server.Permissions, or
// "permissions" in its configuration file), so that a replica can neither
// send as another nor read another's replies.
func ReplicaPermissions(prefix string, replica uuid.UUID) Permissions {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Permissions{
		Publish:   []string{prefix + "." + replica.String() + ".>"},
		Subscribe: []string{InboxPrefix(replica) + ".>"},
	}
}

// Connect connects to the NATS server at url (a comma-separated list of
// servers) as replica: its replies come under InboxPrefix(replica), it
// reconnects for ever, and it retries a first connection that failed.
// opts come after, and may add credentials (nats.UserInfo,
// nats.UserCredentials) or change any of it.
func Connect(url string, replica uuid.UUID, opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{
		nats.Name("magicsync replica " + replica.String()),
		nats.CustomInboxPrefix(InboxPrefix(replica)),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
	}
	return nats.Connect(url, append(base, opts...)...)
}
