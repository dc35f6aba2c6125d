package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/server"
)

const migrateDoc = "Migrate applies the engine's own schema steps (its sync_* tables) that the\n" +
	"database lacks, as server.MigrateSchema does: idempotent, and safe while\n" +
	"servers run. With -print it prints the steps instead, for a host's own\n" +
	"migration tool (server.Steps): apply each once, in order, in one transaction.\n" +
	"The triggers on the host's tables need its declarations: print them from Go\n" +
	"with server.Triggers."

// migrateFlags is magicsync migrate.
func migrateFlags(fs *flag.FlagSet) body {
	db := addServerFlags(fs)
	printOnly := fs.Bool("print", false, "print the steps' SQL rather than apply them")
	asJSON := jsonFlag(fs, "with -print: write the steps as JSON, for scripts")
	return func(ctx context.Context, _ string, out io.Writer) error {
		if *printOnly {
			return printSteps(out, *db.schema, *asJSON)
		}
		if *asJSON {
			return usagef("-json goes with -print")
		}
		return db.withPool(ctx, func(pool *pgxpool.Pool) error {
			return migrate(ctx, pool, *db.schema, out)
		})
	}
}

// migrate applies the steps the database lacks and says where it stands.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string, out io.Writer) error {
	if err := server.MigrateSchema(ctx, pool, schema); err != nil {
		return err
	}
	steps, err := server.Steps(schema)
	if err != nil {
		return err
	}
	name := schema
	if name == "" {
		name = "public"
	}
	fmt.Fprintf(out, "The engine's tables in schema %s are at step %d (%s).\n", name, steps[len(steps)-1].Number, steps[len(steps)-1].Name)
	return nil
}

// stepJSON is a Step as JSON.
type stepJSON struct {
	Number int    `json:"number"`
	Name   string `json:"name"`
	SQL    string `json:"sql"`
}

// printSteps prints the steps for schema: as SQL, each under a comment
// naming it, or as JSON.
func printSteps(out io.Writer, schema string, asJSON bool) error {
	steps, err := server.Steps(schema)
	if err != nil {
		return usageError{fmt.Sprintf("-schema: %v", err)}
	}
	if asJSON {
		js := make([]stepJSON, len(steps))
		for i, s := range steps {
			js[i] = stepJSON(s)
		}
		return writeJSON(out, js)
	}
	for _, s := range steps {
		fmt.Fprintf(out, "-- magicsync step %d: %s (apply once, in one transaction)\n%s\n", s.Number, s.Name, s.SQL)
	}
	return nil
}
