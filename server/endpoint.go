package server

import (
	"context"

	"github.com/google/uuid"
)

// Endpoint is the server as a transport sees it: the calls that carry a
// replica's messages (Receive, Next, Ack), check who sends them
// (Authenticate) and describe the declared tables (Schema). A host hands
// it to a transport — transport/httpsync/headoffice.ForServer does — and
// calls none of it itself.
//
// Its methods are safe for concurrent use, as the Server's are.
type Endpoint struct {
	s *Server
}

// Endpoint returns the calls a transport makes of the server.
func (s *Server) Endpoint() Endpoint {
	return Endpoint{s: s}
}

// Receive files one upward message of a replica, in one transaction, and
// returns nil only once it is committed; then its Filed confirmation is
// queued for the replica.
//
// Filing is idempotent per (replica, lane, sequence): a message filed
// before changes nothing and only queues its Filed again, unless a queued
// one confirms it already. Confirmations of a lane still queued merge into
// one (queueFiled), so that they never pile up ahead of catalog changes
// when uploads come faster than the replica fetches. Rows of records
// and settings are upserted set-based, the newer version winning (an equal
// or older one changes nothing), or whatever their version when the
// replica sends them again after a provisioning (Up.Resent). A row whose
// origin is not the sending replica, of a catalog or of an undeclared
// table, or that does not decode or that the database refuses, is refused
// — never written — and named in Filed with why; the rest is filed. A
// replica deletes only its own rows.
//
// It also records what the replica reports: the rows it could not take,
// the last message it applied (an acknowledgement of every message up to
// it), its unsent counts, backlog and build, and its digests, which, when
// nothing is in flight, are compared with what the server expects: a
// disagreement provisions the replica again.
//
// Errors wrapping ErrPermanent mean the message will never be filed: it is
// malformed, speaks a newer protocol (a *magicsync.ProtocolError, for
// errors.As), names another replica or lane, or comes from an unknown
// replica. Errors wrapping ErrTooLarge (which wraps ErrPermanent) mean this
// message will never be filed, but its rows will in smaller ones: it holds
// more than MaxUploadRows rows, or the rows it refuses would not fit in one
// confirmation of MaxMessageBytes. Nothing of it was written.
//
// So one upload costs the server a bounded amount of memory and work: a
// message refused for its rows costs the scan of its bytes, which allocates
// nothing; one taken decodes into at most 8 times its size and 64 KiB
// besides (internal/wire), and its refusals take at most MaxMessageBytes
// encoded — in memory under 8 times that — before it is refused as too
// large. (Its rows taken cost more, by the row: at most MaxUploadRows.)
func (e Endpoint) Receive(ctx context.Context, replica uuid.UUID, lane string, body []byte) error {
	return e.s.receive(ctx, replica, lane, body)
}

// Next returns the next message for a replica, waiting for one until ctx
// ends; ok is false when none came (and the error nil, as it is when ctx
// ends). It looks at least once, even when ctx has ended already: a
// message already due is returned without waiting. It returns the oldest
// unacknowledged message again until Ack (or the replica's word, applied)
// acknowledges it; only then is the next one built — except that while
// the replica applies a part of its provisioning, Run (when it runs)
// builds the next part.
//
// Messages are built here, lazily: a provisioning's next part, or the
// changes of the replica's groups' logs after its cursors, read as the rows
// are now. An idle replica costs nothing but its cursors. Waiting costs no
// polling: a pass, or a filing, wakes the waiters it concerns (in this
// process directly, in others through Run's LISTEN).
//
// applied is the replica's word of the last message it applied, which the
// server takes before it hands out anything; the zero Applied says
// nothing, for a transport that does not know it (a server restored from
// an older backup learns that only from the replica, so a transport that
// knows should pass it on):
//
//   - An id the server issued acknowledges every message up to it, as Ack
//     does; an id at or below the last acknowledged changes nothing.
//   - An id at or beyond the next the server would issue means the server
//     was restored from an older backup (the replica applied messages the
//     server no longer knows it issued, among them the confirmations of
//     uploads the restore lost). The server drops what it queued for the
//     replica, moves its ids past applied.ID and provisions it again; at the
//     provisioning's end the replica sends all its own rows again, and they
//     are filed whatever their version. Status shows the reason.
//   - So does a Sum other than that of the message the server issued under
//     applied.ID (kept until a later message is acknowledged, even if the
//     message went since, merged into a later one, and even if an
//     acknowledgement or an Up.LastApplied without a sum took applied.ID
//     already): restored, the server issued that id again, to another
//     message, before the replica said where it stood.
//
// An id the server never issued the replica at or beyond 2^62 (the bound
// of what a replica may report, whatever the path: Ack and Up.LastApplied
// judge ids alike) is refused with an error wrapping ErrNotIssued, and a
// Sum that is not 32 bytes with one wrapping ErrPermanent; neither
// changes anything.
func (e Endpoint) Next(ctx context.Context, replica uuid.UUID, applied Applied) (Message, bool, error) {
	return e.s.next(ctx, replica, applied)
}

// Ack acknowledges every message to the replica up to id: they are not
// sent again, and the replica is known to hold what they brought. An id at
// or below the last acknowledged changes nothing. An id the server never
// issued the replica — 0, or beyond the last it issued — is refused with
// an error wrapping ErrNotIssued, and changes nothing: only the replica's
// report of the last message it applied (Next, Up.LastApplied) tells
// a server restored from an older backup.
//
// Acknowledgements that arrive while another batch of them commits are
// committed together, in one transaction: a fleet's acknowledgements cost
// a few statements and one commit per batch. Ack returns once its own is
// committed.
func (e Endpoint) Ack(ctx context.Context, replica uuid.UUID, id uint64) error {
	return e.s.ack(ctx, replica, id)
}

// Authenticate checks a replica's secret, in constant time. It returns an
// error wrapping ErrUnknownReplica for a replica the replicas table does
// not have, ErrUnauthorized for a wrong secret or a replica that was never
// issued one.
//
// Every path costs the same, so that its time says nothing of which
// replica ids exist: one statement reads the replica's stored hash and
// whether it is known — or, read less than Options.AuthCacheFor ago, the
// cache does — and the secret's hash is compared with the stored one or,
// when there is none, with a stand-in.
func (e Endpoint) Authenticate(ctx context.Context, replica uuid.UUID, secret string) error {
	return e.s.authenticate(ctx, replica, secret)
}

// Schema returns the declared tables as the protocol's Schema message,
// encoded (proto/sync.proto; PROTOCOL.md, section 13): each table's name,
// which side writes it, its columns with their kinds and roles, its key,
// origin and Retired column, and its foreign keys to declared tables as
// the host's database had them when New ran. A replica written in another
// language reads it to create and check its tables; the HTTP transport
// serves it at GET /sync/{id}/schema. It is the same for every replica,
// and the same bytes for the same declarations and foreign keys.
func (e Endpoint) Schema() []byte {
	return e.s.schemaMessage()
}
