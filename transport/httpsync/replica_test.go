package httpsync

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/replica"
)

// downMessage builds message id, upserting rows, as the server does.
func downMessage(t *testing.T, codecs *magicsync.Codecs, id uint64, rows ...shoptest.Product) []byte {
	t.Helper()
	tc, err := codecs.Of(shoptest.Product{})
	if err != nil {
		t.Fatal(err)
	}
	ch := &syncpb.TableChanges{Table: tc.Name, Columns: tc.ColumnNames(nil)}
	for _, row := range rows {
		vals, err := tc.Values(row, nil)
		if err != nil {
			t.Fatal(err)
		}
		ch.Upserts = append(ch.Upserts, wire.AppendTuple(nil, vals))
		ch.UpsertKeys = append(ch.UpsertKeys, []byte(tc.KeyOfRow(vals)))
	}
	msg, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: id, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Tables: []*syncpb.TableChanges{ch}}}})
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func products(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM products").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// ackChecker is the fake engine, checking on every acknowledgement that the
// message is committed in the replica's database by then.
type ackChecker struct {
	*fakeEngine
	db       *sql.DB
	want     map[uint64]int // products committed once message id is applied
	problems chan string
}

func (a *ackChecker) Ack(ctx context.Context, id uuid.UUID, msg uint64) error {
	var last uint64
	if err := a.db.QueryRowContext(ctx, "SELECT last_applied FROM sync_replica").Scan(&last); err != nil {
		a.problems <- err.Error()
	} else if last < msg {
		a.problems <- fmt.Sprintf("message %d acknowledged while the replica has applied up to %d", msg, last)
	}
	var n int
	if err := a.db.QueryRowContext(ctx, "SELECT count(*) FROM products").Scan(&n); err != nil || n != a.want[msg] {
		a.problems <- fmt.Sprintf("message %d acknowledged with %d products committed; want %d (%v)", msg, n, a.want[msg], err)
	}
	return a.fakeEngine.Ack(ctx, id, msg)
}

func TestReceiveLoopAppliesRealMessagesAndAcknowledgesAfterCommit(t *testing.T) {
	codecs, err := magicsync.NewCodecs(shoptest.Product{})
	if err != nil {
		t.Fatal(err)
	}
	db := sqlitetest.Open(t, sqlitetest.Modernc())
	if _, err := db.Exec(shoptest.SQLiteDDL); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := replica.Install(ctx, db, codecs); err != nil {
		t.Fatal(err)
	}
	e := &ackChecker{fakeEngine: newFakeEngine(), db: db, want: map[uint64]int{1: 2, 2: 3}, problems: make(chan string, 10)}
	srv, _ := serve(t, e, HandlerOptions{PollWait: 200 * time.Millisecond})
	client := fastClient(srv, replicaA, e.token(replicaA), ClientOptions{})
	r, err := replica.New(ctx, db, codecs, replica.Me(replicaA), client,
		replica.Settings{Logger: quiet(), DigestsEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := func(n int, price int64) shoptest.Product {
		return shoptest.Product{ID: uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "product %d", n)), Name: fmt.Sprintf("product %d", n), PriceCents: price, UpdatedAt: t0}
	}
	e.push(replicaA, 1, downMessage(t, codecs, 1, p(1, 100), p(2, 200)))
	e.push(replicaA, 2, downMessage(t, codecs, 2, p(3, 300)))
	stop := runLoop(t, client, r.Endpoint())
	eventually(t, "both messages acknowledged", func() bool { return len(e.ackedIDs()) == 2 })
	stop()
	close(e.problems)
	for p := range e.problems {
		t.Error(p)
	}
	if n := products(t, db); n != 3 {
		t.Fatalf("%d products in the replica; want 3", n)
	}
	var name string
	if err := db.QueryRow("SELECT name FROM products WHERE price_cents = 300").Scan(&name); err != nil || name != "product 3" {
		t.Fatalf("the third product reads %q, %v", name, err)
	}
}
