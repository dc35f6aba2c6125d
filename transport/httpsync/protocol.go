package httpsync

import (
	"github.com/google/uuid"

	"github.com/magicsync/magicsync/transport/httpsync/internal/httpwire"
)

// Header names of the protocol.
const (
	// HeaderMessageID carries the id of the message a GET next answers
	// with, as a decimal uint64.
	HeaderMessageID = httpwire.HeaderMessageID
	// HeaderLane names the lane of an upward message.
	HeaderLane = httpwire.HeaderLane
	// HeaderProtocol names, on every answer of the head office, the
	// protocol it speaks (a decimal number): a replica learns it from its
	// first call, before it sends anything. On a refusal of a message
	// speaking a newer protocol than the server's, the replica keeps the
	// message's rows until the server is upgraded. A replica sends it on
	// an upload to say which protocol the message speaks.
	HeaderProtocol = httpwire.HeaderProtocol
)

// DefaultLane is the lane of an upward message without a Sync-Lane header.
const DefaultLane = httpwire.DefaultLane

// JoinToken makes the token a replica presents from its id and the secret
// server.Server.Credentials issued it: "<replica uuid>.<secret>". The
// head office's handler splits it again, and reads the replica a token
// claims from it, to answer 403 rather than 401 for a valid token used
// under another replica's id; OpenReplica reads the replica's id from it.
func JoinToken(replica uuid.UUID, secret string) string {
	return httpwire.JoinToken(replica, secret)
}

// NewToken returns a new token for replica, of the form JoinToken makes,
// with 128 random bits of secret: for an engine other than package
// server's, which keeps (a hash of) the whole token.
func NewToken(replica uuid.UUID) string {
	return httpwire.NewToken(replica)
}

// TokenReplica returns the replica a token of the form
// "<replica uuid>.<secret>" claims to be. It says nothing of whether the
// token is valid.
func TokenReplica(token string) (uuid.UUID, bool) {
	return httpwire.TokenReplica(token)
}

// shorten keeps the first line of a reason, at most 300 bytes of valid
// UTF-8.
func shorten(reason string) string { return httpwire.Shorten(reason) }
