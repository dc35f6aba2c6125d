package main

import (
	"context"
	"fmt"
	"io"

	"github.com/magicsync/magicsync/server"
)

// runMigrate is magicsync migrate.
func runMigrate(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("migrate", "-database URL [-schema NAME] | -print [-schema NAME] [-json]",
		"Migrate applies the engine's own schema steps (its sync_* tables) that the\n"+
			"database lacks, as server.MigrateSchema does: idempotent, and safe while\n"+
			"servers run. With -print it prints the steps instead, for a host's own\n"+
			"migration tool (server.Steps): apply each once, in order, in one transaction.\n"+
			"The triggers on the host's tables need its declarations: print them from Go\n"+
			"with server.Triggers.", out)
	database, schema := databaseFlag(fs)
	printOnly := fs.Bool("print", false, "print the steps' SQL rather than apply them")
	asJSON := fs.Bool("json", false, "with -print: write the steps as JSON, for scripts")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return usagef("migrate takes no arguments (got %q)", rest)
	}
	if *printOnly {
		return printSteps(out, *schema, *asJSON)
	}
	if *asJSON {
		return usagef("-json goes with -print")
	}
	pool, err := connect(ctx, *database)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := server.MigrateSchema(ctx, pool, *schema); err != nil {
		return err
	}
	steps, err := server.Steps(*schema)
	if err != nil {
		return err
	}
	name := *schema
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
