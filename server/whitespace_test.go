package server_test

import (
	"context"
	"testing"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/server"
)

// Till is a catalog whose key column's name holds a no-break space
// (U+00A0), which Go counts as white space and PostgreSQL's regular
// expressions do not.
type Till struct {
	Code string `db:"till code" sync:"key"`
	Name string `db:"name"`
}

func (Till) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "tills", Mirror: magicsync.Catalog, Sync: magicsync.Broadcast()}
}

// New accepts the triggers Triggers wrote right after they are installed,
// even when a key column's name holds a no-break space: the check of the
// trigger function's source folds white space the same way on both sides.
func TestNewAcceptsFreshTriggersOfAKeyColumnNamedWithANoBreakSpace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := shopserver.NewPool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE shop.tills ("till`+"\u00a0"+`code" text PRIMARY KEY, name text NOT NULL);`); err != nil {
		t.Fatal(err)
	}
	codecs, err := magicsync.NewCodecs(Till{})
	if err != nil {
		t.Fatal(err)
	}
	opts := server.Options{Replicas: shoptest.Replicas}
	sql, err := server.Triggers(codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, sql); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	if _, err := server.New(ctx, pool, codecs, opts); err != nil {
		t.Fatalf("New right after the triggers were installed: %v", err)
	}
}
