// Creating the host's tables from the declarations, for a replica whose
// program leaves them to the engine: CreateTables.

package replica

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// CreateTables creates each table the declarations name that the database
// lacks, before Install, and returns the names of those it created. A
// table has the declared columns, in declaration order, each of the SQLite
// type the engine reads its kind back from (uuid, text and decimal TEXT,
// int and bool INTEGER, float REAL, bytes BLOB, time TIMESTAMP), NOT NULL
// unless the field is nullable or the column replica-owned, its key as
// its primary key, and the foreign keys among declared tables that the
// head office's tables have: schema, when set, returns the head office's
// encoded Schema message (httpsync.Client.Schema), and is called once,
// only when a table is missing. A foreign key is left out when its
// columns, or the table it references, are not this build's. A table that
// exists is left as it is (Install then checks it).
//
// It refuses a missing table with a generated column, whose expression
// the declarations do not hold: create that one yourself.
func CreateTables(ctx context.Context, db *sql.DB, codecs *magicsync.Codecs, schema func(context.Context) ([]byte, error)) ([]string, error) {
	var missing []*codec.TableCodec
	for _, tc := range codecs.Tables() {
		var n int
		if err := db.QueryRowContext(ctx, selectTableExists, tc.Name).Scan(&n); err != nil {
			return nil, fmt.Errorf("magicsync/replica: looking for table %q: %w", tc.Name, err)
		}
		if n == 0 {
			missing = append(missing, tc)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	for _, tc := range missing {
		for _, c := range tc.Columns {
			if c.Generated {
				return nil, fmt.Errorf("magicsync/replica: table %q is missing and its column %q is generated, by an expression the declarations do not hold: create the table yourself", tc.Name, c.Name)
			}
		}
	}
	var keys map[string][]*syncpb.ForeignKey
	if schema != nil {
		b, err := schema(ctx)
		if err != nil {
			return nil, fmt.Errorf("magicsync/replica: the head office's schema, for the foreign keys of the tables to create: %w", err)
		}
		var sc syncpb.Schema
		if err := proto.Unmarshal(b, &sc); err != nil {
			return nil, fmt.Errorf("%w: the head office's schema: %w", ErrMalformed, err)
		}
		keys = map[string][]*syncpb.ForeignKey{}
		for _, ts := range sc.Tables {
			keys[ts.Name] = ts.ForeignKeys
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("magicsync/replica: creating tables: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	var created []string
	for _, tc := range missing {
		ddl := createTableSQL(tc, keys[tc.Name], codecs)
		if _, err := tx.ExecContext(ctx, ddl); err != nil {
			return nil, fmt.Errorf("magicsync/replica: creating table %q: %w\n%s", tc.Name, err, ddl)
		}
		created = append(created, tc.Name)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("magicsync/replica: creating tables: %w", err)
	}
	return created, nil
}

// referencesDeclared reports whether fk's columns are among has and the
// columns it references are a declared table's.
func referencesDeclared(fk *syncpb.ForeignKey, has map[string]bool, codecs *magicsync.Codecs) bool {
	if len(fk.Columns) == 0 || len(fk.Columns) != len(fk.References) {
		return false
	}
	for _, c := range fk.Columns {
		if !has[c] {
			return false
		}
	}
	i := slices.IndexFunc(codecs.Tables(), func(t *codec.TableCodec) bool { return t.Name == fk.Table })
	if i < 0 {
		return false
	}
	ref := codecs.Tables()[i]
	for _, r := range fk.References {
		if !slices.ContainsFunc(ref.Columns, func(c codec.Column) bool { return c.Name == r }) {
			return false
		}
	}
	return true
}
