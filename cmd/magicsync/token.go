package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/server"
)

const rotateTokenDoc = "Rotate-token issues a replica a new secret (server.RotateCredentials), as\n" +
	"Server.Credentials does: the old one stops working in every serving process\n" +
	"as soon as its Run hears of it. It prints the new secret alone on a line:\n" +
	"hand it to the replica now, only its hash is stored."

// rotateTokenFlags is magicsync rotate-token.
func rotateTokenFlags(fs *flag.FlagSet) body {
	db := addServerFlags(fs)
	asJSON := jsonFlag(fs, "write JSON, for scripts")
	return func(ctx context.Context, arg string, out io.Writer) error {
		id, err := uuid.Parse(arg)
		if err != nil {
			return usagef("replica id %q: %v: give the replica's UUID ('magicsync status' lists them)", arg, err)
		}
		return db.withPool(ctx, func(pool *pgxpool.Pool) error {
			return rotateToken(ctx, pool, *db.schema, id, *asJSON, out)
		})
	}
}

// rotateToken issues replica id a new secret and writes it.
func rotateToken(ctx context.Context, pool *pgxpool.Pool, schema string, id uuid.UUID, asJSON bool, out io.Writer) error {
	secret, err := server.RotateCredentials(ctx, pool, schema, id)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(out, struct {
			Replica string `json:"replica"`
			Secret  string `json:"secret"`
		}{id.String(), secret})
	}
	fmt.Fprintln(out, secret)
	return nil
}
