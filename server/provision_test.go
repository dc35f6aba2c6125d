package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

func statusOf(t testing.TB, sh *shop, id uuid.UUID) server.ReplicaStatus {
	t.Helper()
	st, err := sh.s.Status(sh.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("no status of %s", id)
	return server.ReplicaStatus{}
}

func TestGroupChangeProvisionsAgain(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopB)
	sh.product(sh.shopA, "apple", 1)
	sh.product(sh.shopB, "banana", 2)
	sh.pass()
	r.sync()
	r.expect("products", "banana")
	sh.exec(`UPDATE shop.registers SET shop_id = $1 WHERE id = $2`, sh.shopA, r.id)
	sh.pass()
	st := statusOf(t, sh, r.id)
	if !st.Provisioning || !strings.Contains(st.ProvisionReason, "group changed") {
		t.Errorf("status %+v: want provisioning for a group change", st)
	}
	r.sync()
	r.expect("products", "apple")
	if _, ok := r.msgs[len(r.msgs)-1].Body.(*syncpb.ToReplica_EndSnapshot); !ok {
		t.Errorf("the last message is %T, want the end of a snapshot", r.msgs[len(r.msgs)-1].Body)
	}
	if st := statusOf(t, sh, r.id); st.Provisioning {
		t.Errorf("still provisioning after the snapshot: %+v", st)
	}
	// Later changes of the new group arrive; of the old, not.
	sh.product(sh.shopA, "apricot", 3)
	sh.product(sh.shopB, "blueberry", 4)
	sh.pass()
	r.sync()
	r.expect("products", "apple", "apricot")
}

func TestLargeDifferenceGoesAsSeveralMessages(t *testing.T) {
	t.Parallel()
	sh := newShop(t, server.Options{MaxMessageBytes: 4096})
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	sh.exec(`INSERT INTO shop.products (id, shop_id, name, price_cents)
		SELECT gen_random_uuid(), $1, 'p' || lpad(i::text, 4, '0'), i FROM generate_series(1, 500) i`, sh.shopA)
	sh.pass()
	n := r.sync()
	if n < 5 {
		t.Errorf("%d messages for 500 rows under 4096 bytes", n)
	}
	if got := len(r.names("products")); got != 500 {
		t.Errorf("holds %d products, want 500", got)
	}
	// A new replica is provisioned over several messages too.
	r2 := sh.register(sh.shopA)
	sh.pass()
	if n := r2.sync(); n < 5 {
		t.Errorf("%d messages to provision 500 rows under 4096 bytes", n)
	}
	if got := len(r2.names("products")); got != 500 {
		t.Errorf("provisioned %d products, want 500", got)
	}
}

func TestCommitOrder(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	ctx := context.Background()
	early, err := sh.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Rollback(ctx) //nolint:errcheck
	if _, err := early.Exec(ctx, `INSERT INTO shop.products (id, shop_id, name, price_cents) VALUES ($1, $2, 'early', 1)`, uuid.New(), sh.shopA); err != nil {
		t.Fatal(err)
	}
	// Started later, committed first.
	sh.product(sh.shopA, "late", 2)
	sh.pass()
	r.sync()
	r.expect("products", "late")
	if err := early.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sh.pass()
	r.sync()
	r.expect("products", "early", "late")
}

func TestNextSameUntilAcked(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "apple", 1)
	sh.pass()
	m1, ok := r.next(time.Second)
	if !ok {
		t.Fatal("no message")
	}
	m2, ok := r.next(time.Second)
	if !ok || m2.Id != m1.Id || fmt.Sprint(m1) != fmt.Sprint(m2) {
		t.Fatalf("second Next gave %v, want %v again", m2, m1)
	}
	if err := sh.s.Endpoint().Ack(sh.ctx, r.id, m1.Id); err != nil {
		t.Fatal(err)
	}
	m3, ok := r.next(time.Second)
	if !ok || m3.Id <= m1.Id {
		t.Fatalf("after the ack: %v", m3)
	}
	// Up.LastApplied acknowledges too: m3 does not come again, and a
	// message without rows asks no Filed.
	if err := r.send(&syncpb.Up{LastApplied: m3.Id}); err != nil {
		t.Fatal(err)
	}
	if m4, ok := r.next(300 * time.Millisecond); ok {
		t.Fatalf("after LastApplied %d: %v, want nothing", m3.Id, m4)
	}
}

func TestStatusHoldsOfShould(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	for i := range 5 {
		sh.product(sh.shopA, fmt.Sprint("p", i), int64(i))
	}
	sh.pass()
	r.sync()
	if err := r.send(&syncpb.Up{LastApplied: r.applied, Digests: []*syncpb.Digest{r.digest("products")}}); err != nil {
		t.Fatal(err)
	}
	// The replica goes offline; two products more.
	sh.product(sh.shopA, "p5", 5)
	sh.product(sh.shopA, "p6", 6)
	sh.pass()
	st := statusOf(t, sh, r.id)
	var products *server.TableStatus
	for i := range st.Tables {
		if st.Tables[i].Table == "products" {
			products = &st.Tables[i]
		}
	}
	if products == nil || products.Holds != 5 || products.Should != 7 {
		t.Fatalf("status tables %+v: want products holds 5 of 7", st.Tables)
	}
	if st.Provisioning || st.Queued < 1 || st.LastApplied != r.applied {
		t.Errorf("status %+v", st)
	}
}

func TestDigestDisagreementProvisions(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	for i := range 7 {
		sh.product(sh.shopA, fmt.Sprint("p", i), int64(i))
	}
	sh.pass()
	r.sync()
	// The replica lost two rows (restored from a backup, say).
	n := 0
	for k := range r.held["products"] {
		if n < 2 {
			delete(r.held["products"], k)
		}
		n++
	}
	r.sync() // the Filed of nothing
	if err := r.send(&syncpb.Up{LastApplied: r.applied, Digests: []*syncpb.Digest{r.digest("products")}}); err != nil {
		t.Fatal(err)
	}
	st := statusOf(t, sh, r.id)
	if !st.Provisioning || st.ProvisionReason != "digest of products disagrees: replica holds 5 rows, server expects 7" {
		t.Fatalf("status %+v", st)
	}
	r.sync()
	if got := len(r.names("products")); got != 7 {
		t.Errorf("holds %d after provisioning, want 7", got)
	}
	if err := r.send(&syncpb.Up{LastApplied: r.applied, Digests: []*syncpb.Digest{r.digest("products")}}); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, sh, r.id); st.Provisioning {
		t.Errorf("provisioning again: %s", st.ProvisionReason)
	}
}

func TestReplicaAheadOfServer(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.product(sh.shopA, "apple", 1)
	sh.pass()
	r.sync()
	// The server was restored from an older backup: the replica applied
	// message 100.
	r.applied = 100
	if err := r.send(&syncpb.Up{LastApplied: 100}); err != nil {
		t.Fatal(err)
	}
	st := statusOf(t, sh, r.id)
	if !st.Provisioning || !strings.Contains(st.ProvisionReason, "issued only up to") {
		t.Fatalf("status %+v", st)
	}
	r.sync()
	if r.applied <= 100 {
		t.Errorf("ids did not move past 100: %d", r.applied)
	}
	r.expect("products", "apple")
}

func TestMigrateIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions) // migrated once
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- server.Migrate(sh.ctx, sh.pool) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := sh.pool.QueryRow(sh.ctx, `SELECT count(*) FROM public.sync_schema`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	var steps int
	if err := sh.pool.QueryRow(sh.ctx, `SELECT count(DISTINCT step) FROM public.sync_schema`).Scan(&steps); err != nil {
		t.Fatal(err)
	}
	if n != steps || n < 2 {
		t.Errorf("%d schema steps recorded for %d distinct steps; want each step once", n, steps)
	}
}

func TestMigrateConcurrentOnFreshDatabase(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- server.Migrate(context.Background(), pool) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestCredentials(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	if err := sh.s.Endpoint().Authenticate(sh.ctx, r.id, "x"); !errorsIs(err, server.ErrUnauthorized) {
		t.Errorf("before credentials: %v", err)
	}
	secret, err := sh.s.Credentials(sh.ctx, r.id)
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.s.Endpoint().Authenticate(sh.ctx, r.id, secret); err != nil {
		t.Errorf("the secret: %v", err)
	}
	if err := sh.s.Endpoint().Authenticate(sh.ctx, r.id, secret+"x"); !errorsIs(err, server.ErrUnauthorized) || !errorsIs(err, server.ErrPermanent) {
		t.Errorf("a wrong secret: %v", err)
	}
	again, err := sh.s.Credentials(sh.ctx, r.id)
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.s.Endpoint().Authenticate(sh.ctx, r.id, secret); !errorsIs(err, server.ErrUnauthorized) {
		t.Errorf("the rotated-out secret: %v", err)
	}
	if err := sh.s.Endpoint().Authenticate(sh.ctx, r.id, again); err != nil {
		t.Errorf("the new secret: %v", err)
	}
	unknown := uuid.New()
	if _, err := sh.s.Credentials(sh.ctx, unknown); !errorsIs(err, server.ErrUnknownReplica) {
		t.Errorf("credentials of an unknown replica: %v", err)
	}
	if err := sh.s.Endpoint().Authenticate(sh.ctx, unknown, "x"); !errorsIs(err, server.ErrUnknownReplica) || !errorsIs(err, server.ErrPermanent) {
		t.Errorf("an unknown replica: %v", err)
	}
	ctx, cancel := context.WithTimeout(sh.ctx, 100*time.Millisecond)
	defer cancel()
	if _, _, err := sh.s.Endpoint().Next(ctx, unknown, server.Applied{}); !errorsIs(err, server.ErrUnknownReplica) {
		t.Errorf("Next of an unknown replica: %v", err)
	}
}
