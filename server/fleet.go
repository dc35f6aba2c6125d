package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
)

// fleet.go holds what an operator's tool does without the host's Go
// declarations: StatusOf and RotateCredentials, over the engine's own
// tables alone.

// StatusOf is Status read from the engine's tables in schema (empty means
// public), without a Server and its declarations: for an operator's tool.
// It reads what Status reads, with three differences. The tables are not
// declared: the catalogs the server routes (those with digests) come
// first, then at most [StatusOtherTables] others — the record and setting
// tables among them — and every TableStatus's Mirror is zero, the kind
// being unknown. The polls a serving process saw and has yet to write do
// not count (they are written within a second). Wishes and commands are
// counted whether or not a setting table is declared or commands are on.
func StatusOf(ctx context.Context, pool *pgxpool.Pool, schema string) ([]ReplicaStatus, error) {
	sq, err := statementsOf(schema)
	if err != nil {
		return nil, err
	}
	var routed []string
	if err := pool.QueryRow(ctx, sq.of(qRoutedTables)).Scan(&routed); err != nil {
		return nil, missingEngine(fmt.Errorf("magicsync/server: status: %w", err), sq)
	}
	out, err := readStatus(ctx, pool, sq, routed, func(string) magicsync.Mirror { return 0 })
	if err != nil {
		return nil, missingEngine(err, sq)
	}
	if err := countWishesAndCommands(ctx, pool, sq, out, true, true); err != nil {
		return nil, missingEngine(err, sq)
	}
	return out, nil
}

// RotateCredentials issues a new secret for a replica the engine knows in
// schema (empty means public), as Server.Credentials does, without a
// Server: the earlier secret stops working in every process serving the
// database as soon as its Run hears of it (a notification sent as the new
// secret commits; without Run, after Options.AuthCacheFor). Only its
// SHA-256 is stored: hand the secret to the replica now, it cannot be read
// again.
//
// Not knowing the host's replicas table, it refuses (ErrUnknownReplica) a
// replica the engine has not adopted yet — one added to that table since
// the last pass of a running server: run the server, or issue its first
// credentials with Server.Credentials.
func RotateCredentials(ctx context.Context, pool *pgxpool.Pool, schema string, replica uuid.UUID) (string, error) {
	sq, err := statementsOf(schema)
	if err != nil {
		return "", err
	}
	var known bool
	if err := pool.QueryRow(ctx, sq.of(qReplicaKnown), replica).Scan(&known); err != nil {
		return "", missingEngine(fmt.Errorf("magicsync/server: looking up replica %s: %w", replica, err), sq)
	}
	if !known {
		return "", fmt.Errorf("%w %s: %s.sync_replicas does not have it: check the id, or, for a replica just added to the replicas table, run the server (its pass adopts it) or issue its first credentials with Server.Credentials",
			ErrUnknownReplica, replica, sq.schema.sql)
	}
	return issueSecret(ctx, pool, sq, replica)
}

// statementsOf renders the engine's statements for schema (empty means
// public).
func statementsOf(schema string) (*statements, error) {
	es, err := parseSchema(schema)
	if err != nil {
		return nil, err
	}
	return &statements{schema: es}, nil
}

// missingEngine says what to do when the engine's tables are not there
// (PostgreSQL's undefined_table): migrate, or name the right schema.
func missingEngine(err error, sq *statements) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" {
		return fmt.Errorf("%w: the engine's tables are not in schema %s: apply them with Migrate (magicsync migrate), or name the schema the servers use (Options.Schema)", err, sq.schema.sql)
	}
	return err
}
