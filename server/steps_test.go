package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/server"
)

// The steps Steps prints, applied one by one as a host's migration tool
// would, leave the same engine objects as Migrate, recorded so that Migrate
// afterwards finds nothing to do; in public and in another schema.
func TestStepsAppliedByAHostToolMatchMigrate(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{"", "magicsync_engine"} {
		t.Run(fmt.Sprintf("schema=%q", schema), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			byTool, byMigrate := pgtest.NewPool(t), pgtest.NewPool(t)
			steps, err := server.Steps(schema)
			if err != nil {
				t.Fatal(err)
			}
			if len(steps) < 8 || steps[0].Number != 1 || !strings.HasSuffix(steps[0].Name, ".sql") {
				t.Fatalf("Steps = %d steps, first %d %q; want every step from 001", len(steps), steps[0].Number, steps[0].Name)
			}
			for _, s := range steps {
				tx, err := byTool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, s.SQL); err != nil {
					t.Fatalf("step %s: %v\n%s", s.Name, err, s.SQL)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := server.MigrateSchema(ctx, byMigrate, schema); err != nil {
				t.Fatal(err)
			}
			want, got := engineDefinition(t, byMigrate), engineDefinition(t, byTool)
			if !slices.Equal(got, want) {
				t.Errorf("after Steps:\n%s\nafter MigrateSchema:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if err := server.MigrateSchema(ctx, byTool, schema); err != nil {
				t.Fatalf("MigrateSchema after the steps: %v", err)
			}
			var recorded int
			where := schema
			if where == "" {
				where = "public"
			}
			if err := byTool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.sync_schema", where)).Scan(&recorded); err != nil {
				t.Fatal(err)
			}
			if recorded != len(steps) {
				t.Errorf("%d steps recorded after the steps and MigrateSchema; want %d, each once", recorded, len(steps))
			}
		})
	}
}

func TestStepsRefuseABadSchemaName(t *testing.T) {
	t.Parallel()
	if _, err := server.Steps(`a"b`); err == nil || !strings.Contains(err.Error(), "Schema") {
		t.Errorf("Steps(a\"b) = %v; want an error naming the schema option", err)
	}
}

// engineDefinition lists the engine's tables with their columns, and its
// functions, wherever they are.
func engineDefinition(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT format('%s.%s %s %s', table_schema, table_name, column_name, data_type)
		FROM information_schema.columns WHERE table_name LIKE 'sync\_%'
		UNION ALL
		SELECT format('%s.%s()', n.nspname, p.proname)
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.proname LIKE 'sync\_%'
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no engine objects at all")
	}
	return out
}

// A role given a schema made for it, without the privilege to create
// schemas in the database, applies the steps into it.
func TestStepsNeedNoCreateOnTheDatabaseForASchemaMadeForTheEngine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	role := fmt.Sprintf("magicsync_steps_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN; CREATE SCHEMA engine AUTHORIZATION %s`, role, role)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(context.Background(), fmt.Sprintf(`DROP SCHEMA engine CASCADE; DROP ROLE %s`, role)) //nolint:errcheck // the database goes too
	})
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var canCreate bool
	if err := pool.QueryRow(ctx, `SELECT has_database_privilege(current_database(), 'CREATE')`).Scan(&canCreate); err != nil {
		t.Fatal(err)
	}
	if canCreate {
		t.Fatalf("role %s may create schemas; the test needs one that may not", role)
	}
	steps, err := server.Steps("engine")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		if _, err := pool.Exec(ctx, s.SQL); err != nil {
			t.Fatalf("step %s as a role without CREATE on the database: %v", s.Name, err)
		}
	}
}
