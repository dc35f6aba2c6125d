package server_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// StatusOf, without the declarations, reads what Status reads — but for
// the tables' kinds, which it does not know.
func TestStatusOfReadsWhatStatusReadsWithoutDeclarations(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	apple := sh.product(sh.shopA, "apple", 1)
	sh.pass()
	settle(t, sh, r)
	appleKey := []byte(codec.KeyOfValues(wire.UUIDValue(apple)))
	if err := r.send(&syncpb.Up{
		LastApplied: r.applied,
		Tables:      []*syncpb.TableChanges{receiptsUp(t, sh, Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: 100, ChangedAt: time.Now()})},
		Unsent:      []*syncpb.Count{{Table: "receipts", Rows: 4}},
		Backlog:     2,
		Build:       "register 1.2.3",
		Rejected:    []*syncpb.Rejected{{Table: "products", Key: appleKey, Reason: "CHECK constraint failed: price", Message: r.applied}},
	}); err != nil {
		t.Fatal(err)
	}
	want, err := sh.s.Status(sh.ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := server.StatusOf(sh.ctx, sh.pool, "")
	if err != nil {
		t.Fatal(err)
	}
	byName := func(a, b server.TableStatus) int { return strings.Compare(a.Table, b.Table) }
	for i := range want {
		for j := range want[i].Tables {
			want[i].Tables[j].Mirror = 0
		}
		slices.SortFunc(want[i].Tables, byName)
	}
	for i := range got {
		slices.SortFunc(got[i].Tables, byName)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("StatusOf = %+v\nStatus   = %+v", got, want)
	}
	if len(got) != 1 || got[0].Backlog != 2 || got[0].Build != "register 1.2.3" || len(got[0].Rejected) != 1 {
		t.Fatalf("StatusOf = %+v; want the register's report", got)
	}
}

// StatusOf and RotateCredentials on a database without the engine's tables
// say to migrate.
func TestStatusOfADatabaseNotMigratedSaysToMigrate(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if _, err := server.StatusOf(ctx, pool, ""); err == nil || !strings.Contains(err.Error(), "magicsync migrate") {
		t.Fatalf("StatusOf = %v; want to be told to migrate", err)
	}
	if _, err := server.RotateCredentials(ctx, pool, "elsewhere", uuid.New()); err == nil || !strings.Contains(err.Error(), `"elsewhere"`) {
		t.Fatalf("RotateCredentials = %v; want to be told the schema has no engine tables", err)
	}
}

// RotateCredentials, without a Server, issues a new secret: the old one
// stops working in a serving process as soon as its Run hears of it, the
// new one works there. An id the engine does not know is refused.
func TestRotateCredentialsReachesTheServingProcesses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sh := newShop(t, shopOptions)
	id := sh.register(sh.shopA).id
	old, err := sh.s.Credentials(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := server.New(ctx, sh.pool, sh.codecs, server.Options{Replicas: shopOptions.Replicas, AuthCacheFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	listening := make(chan struct{}, 1)
	serving.OnListening(func() {
		select {
		case listening <- struct{}{}:
		default:
		}
	})
	done := make(chan error, 1)
	go func() { done <- serving.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-listening
	if err := serving.Endpoint().Authenticate(ctx, id, old); err != nil {
		t.Fatal(err) // now cached, for an hour
	}
	fresh, err := server.RotateCredentials(ctx, sh.pool, "", id)
	if err != nil {
		t.Fatal(err)
	}
	if fresh == old || len(fresh) < 40 {
		t.Fatalf("the new secret %q; want a fresh one of 32 random bytes", fresh)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := serving.Endpoint().Authenticate(ctx, id, old)
		if errors.Is(err, server.ErrUnauthorized) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("10s after the rotation, the old secret still works in the serving process")
		}
		time.Sleep(5 * time.Millisecond) // the notification has no signal here but its effect
	}
	if err := serving.Endpoint().Authenticate(ctx, id, fresh); err != nil {
		t.Fatalf("the new secret: %v", err)
	}
	if _, err := server.RotateCredentials(ctx, sh.pool, "", uuid.New()); !errors.Is(err, server.ErrUnknownReplica) {
		t.Fatalf("RotateCredentials of an unknown id = %v; want ErrUnknownReplica", err)
	}
}
