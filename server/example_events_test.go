package server_test

import (
	"context"
	"errors"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/server"
)

// A host keeping a live sales total from the receipts its registers file.
// It takes stock and a position in one REPEATABLE READ transaction, then
// follows the receipts filed, applying each batch and storing the position
// after it in one transaction of its own: a crash neither loses a receipt
// nor counts one twice. Its tables:
//
//	CREATE TABLE shop.sales (position text NOT NULL, total_cents bigint NOT NULL);
//	CREATE TABLE shop.counted (register_id uuid, id uuid, total_cents bigint NOT NULL,
//	    PRIMARY KEY (register_id, id));
func ExampleServer_FollowEvents() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://127.0.0.1:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	codecs, err := magicsync.NewCodecs(Receipt{})
	if err != nil {
		log.Fatal(err)
	}
	s, err := server.New(ctx, pool, codecs, server.Options{Replicas: "shop.registers(id)"})
	if err != nil {
		log.Fatal(err)
	}
	// Run's listener wakes FollowEvents as soon as a register's upload
	// is filed, by this process or another.
	go func() { _ = s.Run(ctx) }()

	var pos server.EventPosition
	err = pool.QueryRow(ctx, `SELECT position FROM shop.sales`).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) {
		pos, err = takeSalesStock(ctx, s, pool)
	}
	if err != nil {
		log.Fatal(err)
	}
	err = s.FollowEvents(ctx, pos, func(ctx context.Context, events []server.Event, next server.EventPosition) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
		for _, e := range events {
			if e.Kind != server.RecordsFiled || e.Table != "receipts" {
				continue
			}
			receipts, err := server.RowsOf[Receipt](ctx, s, tx, e.Keys)
			if err != nil {
				return err
			}
			for _, r := range receipts {
				// A receipt filed again (amended, or sent again after a
				// provisioning) counts at its latest amount, once.
				if _, err := tx.Exec(ctx, `WITH old AS (SELECT total_cents FROM shop.counted WHERE register_id = $1 AND id = $2),
					up AS (INSERT INTO shop.counted VALUES ($1, $2, $3)
						ON CONFLICT (register_id, id) DO UPDATE SET total_cents = excluded.total_cents)
					UPDATE shop.sales SET total_cents = total_cents + $3 - coalesce((SELECT total_cents FROM old), 0)`,
					r.RegisterID, r.ID, r.TotalCents); err != nil {
					return err
				}
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE shop.sales SET position = $1`, string(next)); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	if errors.Is(err, server.ErrEventsTrimmed) {
		// Down longer than Options.KeepEvents: take stock again.
		log.Fatal(err)
	}
}

// takeSalesStock counts the receipts filed so far, and returns the
// position of what it counted: the events after it are the receipts it
// did not see.
func takeSalesStock(ctx context.Context, s *server.Server, pool *pgxpool.Pool) (server.EventPosition, error) {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	// First in the transaction: its snapshot is the one the reads below see.
	pos, err := s.EventPositionNow(ctx, tx)
	if err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO shop.counted SELECT register_id, id, total_cents FROM shop.receipts`); err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO shop.sales SELECT $1, coalesce(sum(total_cents), 0) FROM shop.counted`, string(pos)); err != nil {
		return "", err
	}
	return pos, tx.Commit(ctx)
}
