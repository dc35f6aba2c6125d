package server

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// forgetCleared forgets the rows a replica reported it could not take that
// it says it no longer holds as reported (Up.Cleared): own rows it could
// not read, written again or deleted since.
func forgetCleared(ctx context.Context, tx pgx.Tx, replica uuid.UUID, cleared []*syncpb.Rejected) error {
	if len(cleared) == 0 {
		return nil
	}
	tbls := make([]string, len(cleared))
	keys := make([][]byte, len(cleared))
	for i, c := range cleared {
		tbls[i], keys[i] = c.Table, c.Key
		if keys[i] == nil {
			keys[i] = []byte{}
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM public.sync_rejected j USING unnest($2::text[], $3::bytea[]) u(t, k)
		WHERE j.replica = $1 AND j.side = 'replica' AND j.tbl = u.t AND j.key = u.k`, replica, tbls, keys); err != nil {
		return fmt.Errorf("server: forgetting cleared reports: %w", err)
	}
	return nil
}
