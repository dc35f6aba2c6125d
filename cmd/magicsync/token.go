package main

import (
	"context"
	"fmt"
	"io"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/server"
)

// runRotateToken is magicsync rotate-token.
func runRotateToken(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("rotate-token", "-database URL [-schema NAME] [-json] REPLICA-ID",
		"Rotate-token issues a replica a new secret (server.RotateCredentials), as\n"+
			"Server.Credentials does: the old one stops working in every serving process\n"+
			"as soon as its Run hears of it. It prints the new secret alone on a line:\n"+
			"hand it to the replica now, only its hash is stored.", out)
	database, schema := databaseFlag(fs)
	asJSON := fs.Bool("json", false, "write JSON, for scripts")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("name one replica id (got %d arguments)", len(rest))
	}
	id, err := uuid.Parse(rest[0])
	if err != nil {
		return usagef("replica id %q: %v: give the replica's UUID ('magicsync status' lists them)", rest[0], err)
	}
	pool, err := connect(ctx, *database)
	if err != nil {
		return err
	}
	defer pool.Close()
	secret, err := server.RotateCredentials(ctx, pool, *schema, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(out, struct {
			Replica string `json:"replica"`
			Secret  string `json:"secret"`
		}{id.String(), secret})
	}
	fmt.Fprintln(out, secret)
	return nil
}
