// The top of the downward path: Endpoint.Receive decodes a message, applies
// it (apply.go; provision.go for a provisioning, filed.go for a Filed) and
// says what it brought, the transport then acknowledging its id;
// LastApplied is what a transport reports as applied.

package replica

import (
	"context"
	"errors"
	"fmt"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// receive is Endpoint.Receive.
func (r *Replica) receive(ctx context.Context, msg []byte) (Received, error) {
	if r.closed.Load() {
		return Received{}, ErrClosed
	}
	m, err := wire.DecodeToReplica(msg)
	if err != nil {
		if newer, ok := errors.AsType[*wire.NewerProtocolError](err); ok {
			return Received{}, &magicsync.ProtocolError{Got: newer.Got, Speak: newer.Speak}
		}
		return Received{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if _, _, err := r.whoAmI(ctx); err != nil {
		return Received{}, err
	}
	a, err := r.apply(ctx, m)
	if err != nil {
		return Received{}, err
	}
	// The main lane goes at once when there is news for the server: rows
	// left out, own rows to send again after a provisioning, rows it
	// filed (the lane may send on). The id of a message applied without
	// news needs no message of its own — the transport acknowledges it —
	// and goes with the lane's next message, at the latest on its idle
	// turn: an upward message per message received doubled the server's
	// work of a fan-out.
	if _, filed := m.Body.(*syncpb.ToReplica_Filed); filed || a.got.Rejected > 0 || a.got.Provisioned {
		r.lane("main").poke()
	}
	// Wishes are offered once the message that brought them committed,
	// outside its transaction; a message that changed none may still have
	// brought a row a wish waits for.
	if _, filed := m.Body.(*syncpb.ToReplica_Filed); !filed && !a.got.Redelivered {
		r.offers.ask(a.wishesChanged)
	}
	if a.commandsChanged {
		r.commands.ask()
	}
	got := a.got
	if !got.Redelivered {
		got.LastApplied = m.GetId()
	}
	return got, nil
}

// lastApplied is Endpoint.LastApplied.
func (r *Replica) lastApplied(ctx context.Context) (uint64, error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	var last uint64
	if err := r.db.QueryRowContext(ctx, selectLastApplied).Scan(&last); err != nil {
		return 0, fmt.Errorf("magicsync/replica: reading the last message applied: %w", err)
	}
	return last, nil
}
