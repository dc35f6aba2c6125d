// The protocol's names, and what a replica needs to connect.

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
	// Publish lists the subjects the user may publish to.
	Publish []string
	// Subscribe lists the subjects the user may subscribe to.
	Subscribe []string
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
