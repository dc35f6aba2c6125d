package server

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// undecodable.go holds what the server makes of a replica's report of a
// message it cannot decode (Up.undecodable): a replica neither applies
// nor acknowledges such a message, so it would be handed the same bytes
// for ever, and the replica would wait on it for good.

// undecodable takes, in the filing's transaction (the replica's row
// locked), a replica's reports of messages it cannot decode. A report of
// a message the server issued it, has not seen acknowledged and issued
// since its last provisioning began drops what the server queued for the
// replica (the message among it) and provisions it again: the new
// messages come under new ids, and the provisioning brings whatever the
// message did. Any other report changes nothing — the replica moved past
// that message since, or it names none the server issued — so that a
// report sent again after the provisioning does not provision it again.
func (s *Server) undecodable(ctx context.Context, tx pgx.Tx, replica uuid.UUID, reports []*syncpb.Undecodable) error {
	if len(reports) == 0 {
		return nil
	}
	var nextID, acked, snapFirst int64
	if err := tx.QueryRow(ctx, s.sql.of(qUndecodableStanding), replica).Scan(&nextID, &acked, &snapFirst); err != nil {
		return fmt.Errorf("magicsync/server: filing: %w", err)
	}
	for _, u := range reports {
		id := u.GetMessage()
		if word, err := judgeID(replica, id, nextID, false); err != nil || word != idIssued {
			continue
		}
		if int64(id) <= acked || int64(id) < snapFirst {
			continue
		}
		why := clip(strings.ReplaceAll(u.GetReason(), "\x00", ""), maxReasonBytes)
		reason := fmt.Sprintf("the replica cannot decode message %d (%s): provisioning it again", id, why)
		s.log.Warn("magicsync/server: "+reason, "replica", replica, "message", id)
		if _, err := tx.Exec(ctx, s.sql.of(qDropOutbox), replica); err != nil {
			return fmt.Errorf("magicsync/server: filing: %w", err)
		}
		if _, err := tx.Exec(ctx, s.sql.of(qProvisionRestored), replica, reason); err != nil {
			return fmt.Errorf("magicsync/server: filing: %w", err)
		}
		return nil
	}
	return nil
}
