package server

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/migrate"
)

// migrate.go holds Migrate, which applies the engine's own schema steps.

//go:embed migrations/*.sql
var migrations embed.FS

// lockMigrate and lockPlan are the advisory lock keys of Migrate and of the
// planner ("msMIGRAT", "msPLANNR" as numbers).
const (
	lockMigrate int64 = 0x6d734d4947524154
	lockPlan    int64 = 0x6d73504c414e4e52
)

// steps lists the embedded schema steps, in order. Their SQL names the
// engine's schema by schemaPlaceholder, which Migrate renders.
func steps() ([]migrate.Step, error) {
	return migrate.Read(migrations, "migrations")
}

// latestStep is the number of the last schema step this build knows.
func latestStep() int {
	s, err := steps()
	if err != nil || len(s) == 0 {
		return 0
	}
	return s[len(s)-1].Number
}

// Migrate applies the engine's own schema steps (the sync_* tables in
// schema public) that the database lacks, each in the one transaction that
// records it in public.sync_schema. It is idempotent, and takes an advisory
// lock so that several processes may run it at once: the others wait, then
// find nothing to do. Run it before New, and before the SQL of Triggers.
//
// Migrate is MigrateSchema of the default schema; a Server whose
// Options.Schema names another needs MigrateSchema.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return MigrateSchema(ctx, pool, "")
}

// MigrateSchema is Migrate into schema, the Options.Schema of the servers
// that will use it (empty means public): it creates the schema if it does
// not exist, and keeps the engine's tables, functions and the record of
// its steps (sync_schema) there.
func MigrateSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	es, err := parseSchema(schema)
	if err != nil {
		return err
	}
	all, err := steps()
	if err != nil {
		return fmt.Errorf("magicsync/server: reading the schema steps: %w", err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("magicsync/server: migrate: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.Exec(ctx, qMigrateLock, lockMigrate); err != nil {
		return fmt.Errorf("magicsync/server: migrate: taking the lock: %w", err)
	}
	if es.name != defaultSchema {
		var exists bool
		if err := tx.QueryRow(ctx, es.render(qNamespaceExists)).Scan(&exists); err != nil {
			return fmt.Errorf("magicsync/server: migrate: looking for schema %s: %w", es.sql, err)
		}
		if !exists {
			if _, err := tx.Exec(ctx, es.render(qCreateNamespace)); err != nil {
				return fmt.Errorf("magicsync/server: migrate: creating schema %s: %w", es.sql, err)
			}
		}
	}
	if _, err := tx.Exec(ctx, es.render(qCreateSchemaTable)); err != nil {
		return fmt.Errorf("magicsync/server: migrate: creating %s.sync_schema: %w", es.sql, err)
	}
	// A database a later build migrated further is served as it is: its
	// steps only add, and the processes of a rolling upgrade run both
	// builds over it.
	if _, err := migrate.Up(ctx, all, pgSteps{tx: tx, es: es}, true); err != nil {
		return fmt.Errorf("magicsync/server: migrate: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("magicsync/server: migrate: %w", err)
	}
	return nil
}

// Step is one of the engine's own schema steps, as SQL a host's migration
// tool can apply in place of Migrate.
type Step struct {
	// Number orders the steps; a database holds every step up to the
	// highest it recorded.
	Number int
	// Name is the step's file name, e.g. "001_engine.sql".
	Name string
	// SQL creates the schema when it is not public (first step only),
	// applies the step and records it in the schema's sync_schema, as
	// Migrate would: apply it in one transaction.
	SQL string
}

// Steps returns the engine's schema steps rendered for schema (empty means
// public), in order, for hosts whose own migration tool applies every
// change to their database: give each step to the tool as a migration of
// its own, after the host's tables and before the SQL of Triggers. A
// database migrated so is the same to New as one migrated by Migrate, and
// Migrate afterwards finds nothing to do. The tool must apply each step
// once, in order; a database Migrate began continues with the steps after
// the highest it recorded in sync_schema.
func Steps(schema string) ([]Step, error) {
	es, err := parseSchema(schema)
	if err != nil {
		return nil, err
	}
	all, err := steps()
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: reading the schema steps: %w", err)
	}
	out := make([]Step, 0, len(all))
	for i, s := range all {
		var b strings.Builder
		if i == 0 && es.name != defaultSchema {
			b.WriteString(es.createNamespaceIfMissing())
		}
		b.WriteString(es.render(qCreateSchemaTable))
		b.WriteString(";\n")
		b.WriteString(strings.TrimSpace(es.render(s.SQL)))
		if !strings.HasSuffix(b.String(), ";") {
			b.WriteString(";")
		}
		b.WriteString("\n")
		fmt.Fprintf(&b, "%s;\n", es.recordStepLiteral(s.Number, s.Name))
		out = append(out, Step{Number: s.Number, Name: s.Name, SQL: b.String()})
	}
	return out, nil
}

// pgSteps is the record of the engine's steps in its schema's
// sync_schema, in Migrate's transaction.
type pgSteps struct {
	tx pgx.Tx
	es engineSchema
}

func (p pgSteps) Done(ctx context.Context) (int, error) {
	var done int
	if err := p.tx.QueryRow(ctx, p.es.render(qSchemaStep)).Scan(&done); err != nil {
		return 0, fmt.Errorf("reading %s.sync_schema: %w", p.es.sql, err)
	}
	return done, nil
}

func (p pgSteps) Apply(ctx context.Context, s migrate.Step) error {
	if _, err := p.tx.Exec(ctx, p.es.render(s.SQL)); err != nil {
		return err
	}
	if _, err := p.tx.Exec(ctx, p.es.render(qRecordStep), s.Number, s.Name); err != nil {
		return fmt.Errorf("recording it: %w", err)
	}
	return nil
}
