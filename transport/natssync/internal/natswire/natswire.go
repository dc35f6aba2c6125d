// Package natswire holds what both ends of the NATS transport share: the
// subjects, the header names, the statuses a reply carries and how the
// token travels. Package natssync (the replica's client) and package
// headoffice (the head office's responder) name them for their users;
// neither imports the other, so that a replica's program links nothing of
// the server.
package natswire

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// DefaultPrefix is the first token of every subject of the protocol.
const DefaultPrefix = "magicsync"

// The exchanges, the last token of a request's subject.
const (
	Next   = "next"
	Ack    = "ack"
	Up     = "up"
	Schema = "schema"
)

// Header names of the protocol.
const (
	// HeaderAuthorization carries "Bearer <token>" on every request.
	HeaderAuthorization = "Authorization"
	// HeaderStatus carries, on every reply, its status as a decimal HTTP
	// status code: 200 a message or schema in the body, 204 done or
	// nothing came, a 4xx or 5xx a refusal, judged as over HTTP.
	HeaderStatus = "Sync-Status"
	// HeaderReason carries a refusal's reason.
	HeaderReason = "Sync-Reason"
	// HeaderRetryAfter carries, on a 429 or 503, the seconds to wait
	// before trying again.
	HeaderRetryAfter = "Retry-After"
	// HeaderMessageID carries the id of a message, as a decimal uint64:
	// on a reply to next, the message's; on an ack, the one acknowledged.
	HeaderMessageID = "Message-Id"
	// HeaderLane names the lane of an upward message.
	HeaderLane = "Sync-Lane"
	// HeaderProtocol names, on every reply, the protocol the head office
	// speaks; on an upload, the protocol the message speaks.
	HeaderProtocol = "Sync-Protocol"
	// HeaderWait is how long a next may wait for a message, in decimal
	// seconds ("25", "0.5").
	HeaderWait = "Sync-Wait"
	// HeaderApplied is, on a next, the id of the last message the replica
	// applied.
	HeaderApplied = "Sync-Applied"
	// HeaderSHA256 is, on a next, the hex SHA-256 of the message named by
	// HeaderApplied, as the replica received it.
	HeaderSHA256 = "Sync-Sha256"
)

// DefaultLane is the lane of an upward message without a Sync-Lane header.
const DefaultLane = "main"

// Subject is the subject of replica's exchange verb under prefix:
// "<prefix>.<replica uuid>.<verb>".
func Subject(prefix string, replica uuid.UUID, verb string) string {
	return prefix + "." + replica.String() + "." + verb
}

// Wildcard is the subject a head office subscribes to under prefix: every
// exchange of every replica.
func Wildcard(prefix string) string { return prefix + ".*.*" }

// ErrSubject is wrapped by ParseSubject's error.
var ErrSubject = errors.New("magicsync/natssync: not a subject of the protocol")

// ParseSubject splits a request's subject under prefix into the replica
// and the exchange.
func ParseSubject(prefix, subject string) (uuid.UUID, string, error) {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return uuid.UUID{}, "", ErrSubject
	}
	id, verb, ok := strings.Cut(rest, ".")
	if !ok || len(id) != 36 || strings.Contains(verb, ".") {
		return uuid.UUID{}, "", ErrSubject
	}
	replica, err := uuid.Parse(id)
	if err != nil {
		return uuid.UUID{}, "", ErrSubject
	}
	return replica, verb, nil
}

// InboxPrefix is the inbox prefix of replica's connection: its replies
// come on subjects under it, which its NATS permissions may restrict it to.
func InboxPrefix(replica uuid.UUID) string { return "_INBOX." + replica.String() }

// Bearer returns the token of an Authorization header's value.
func Bearer(v string) (string, bool) {
	scheme, token, found := strings.Cut(v, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// ParseWait reads a Sync-Wait header as the HTTP transport reads its
// wait parameter: seconds in plain decimal, one or more ASCII digits,
// optionally followed by "." and one or more digits ("25", "0.5"). Any
// other form — a unit, a sign, an exponent, ".5", "Inf", "NaN" — is
// refused. Seconds beyond a million are a million.
func ParseWait(v string) (time.Duration, bool) {
	whole, frac, dot := strings.Cut(v, ".")
	if !digits(whole) || (dot && !digits(frac)) {
		return 0, false
	}
	secs, err := strconv.ParseFloat(v, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return time.Duration(min(secs, 1e6) * float64(time.Second)), true
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FormatWait writes a Sync-Wait header.
func FormatWait(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
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
		for cut > 0 && (reason[cut]&0xC0) == 0x80 {
			cut--
		}
		reason = reason[:cut] + "…"
	}
	return reason
}

// JoinToken makes the token a replica presents from its id and the secret
// the server issued it: "<replica uuid>.<secret>", as over HTTP.
func JoinToken(replica uuid.UUID, secret string) string {
	return replica.String() + "." + secret
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
