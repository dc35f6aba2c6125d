package replica

import "context"

// Endpoint is the replica as a transport sees it: the calls that hand it
// a message from the server (Receive), say where it stands (LastApplied)
// and report a message that does not decode (ReportUndecodable). A host
// hands it to a transport — httpsync's Client.ReceiveLoop takes it — and
// calls none of it itself; the transport's other half is the Uplink the
// host gives New.
//
// Its methods are safe for concurrent use, as the Replica's are.
type Endpoint struct {
	r *Replica
}

// Endpoint returns the calls a transport makes of the replica.
func (r *Replica) Endpoint() Endpoint {
	return Endpoint{r: r}
}

// Receive applies one message from the server in one transaction, committed
// before it returns, and records its id in that transaction. Acknowledge
// the message to the transport only after Receive returned a nil error: a
// message at or below the last one applied changes nothing
// (Received.Redelivered). Received.LastApplied says where the replica
// stands: the transport tells the server on its next request for a
// message, which is how a server restored from an older backup, issuing
// old ids again, learns that it was.
//
// A row this replica cannot take — it does not decode, or a constraint
// refuses it — is left out, recorded with its reason and reported up, and
// the rest applies. An error means the replica's storage failed (the
// message comes again), that the message speaks a newer protocol
// (*magicsync.ProtocolError: do not acknowledge it), or that it does not decode at
// all (ErrMalformed).
func (e Endpoint) Receive(ctx context.Context, msg []byte) (Received, error) {
	return e.r.receive(ctx, msg)
}

// LastApplied returns the id of the last message the replica applied, 0
// before the first: what a transport tells the server as it asks for the
// next message (httpsync's ReceiveLoop asks it once, as it starts).
func (e Endpoint) LastApplied(ctx context.Context) (uint64, error) {
	return e.r.lastApplied(ctx)
}

// ReportUndecodable records that message id — as the transport named it,
// its bytes handed to Receive, which failed with an error wrapping
// ErrMalformed — does not decode, and why: the main lane reports it up,
// and the server, once it hears of it, drops the message and provisions
// the replica again under new ids, so that the replica never waits on a
// message it cannot take. Do not acknowledge the message. Reporting it
// again changes nothing. Status lists the report among the rows the
// replica could not take, with no table. httpsync's ReceiveLoop reports a
// message that failed to decode twice in a row.
func (e Endpoint) ReportUndecodable(ctx context.Context, id uint64, reason string) error {
	return e.r.reportUndecodable(ctx, id, reason)
}
