// Package httpwire holds what both ends of the HTTP transport share: the
// protocol's header names and default lane, the form of a token, and how a
// refusal's reason is shortened. Package httpsync (the replica's client)
// and package headoffice (the server's handler) name them for their users;
// neither imports the other, so that a replica's program links nothing of
// the server.
package httpwire

import (
	"crypto/rand"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Header names of the protocol.
const (
	// HeaderMessageID carries the id of the message a GET next answers
	// with, as a decimal uint64.
	HeaderMessageID = "Message-Id"
	// HeaderLane names the lane of an upward message.
	HeaderLane = "Sync-Lane"
	// HeaderProtocol names, on every answer of the handler, the protocol
	// the server speaks (a decimal number); a replica sends it on an
	// upload to say which protocol the message speaks.
	HeaderProtocol = "Sync-Protocol"
)

// DefaultLane is the lane of an upward message without a Sync-Lane header.
const DefaultLane = "main"

// JoinToken makes the token a replica presents from its id and the secret
// the server issued it: "<replica uuid>.<secret>".
func JoinToken(replica uuid.UUID, secret string) string {
	return replica.String() + "." + secret
}

// NewToken returns a new token for replica, of the form JoinToken makes,
// with 128 random bits of secret.
func NewToken(replica uuid.UUID) string {
	return JoinToken(replica, rand.Text())
}

// TokenReplica returns the replica a token of the form
// "<replica uuid>.<secret>" claims to be. It says nothing of whether the
// token is valid.
func TokenReplica(token string) (uuid.UUID, bool) {
	prefix, secret, found := strings.Cut(token, ".")
	if !found || secret == "" || len(prefix) != 36 {
		return uuid.UUID{}, false
	}
	id, err := uuid.Parse(prefix)
	if err != nil {
		return uuid.UUID{}, false
	}
	return id, true
}

// MaxReasonLen bounds the reason text of a refusal.
const MaxReasonLen = 300

// Shorten keeps the first line of a reason, at most MaxReasonLen bytes of
// valid UTF-8.
func Shorten(reason string) string {
	reason, _, _ = strings.Cut(strings.TrimSpace(reason), "\n")
	reason = strings.ToValidUTF8(reason, "?")
	if len(reason) > MaxReasonLen {
		cut := MaxReasonLen
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut] + "…"
	}
	return reason
}
