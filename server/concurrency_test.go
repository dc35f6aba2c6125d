package server_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// async runs f in a goroutine and hands its error over.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// nextResult is what a Next run in the background returned.
type nextResult struct {
	msg *syncpb.ToReplica
	ok  bool
	err error
	at  time.Time
}

// nextAsync runs s.Next for a replica in the background, waiting up to d.
func nextAsync(ctx context.Context, s *server.Server, id uuid.UUID, d time.Duration) <-chan nextResult {
	ch := make(chan nextResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		msg, ok, err := s.Endpoint().Next(ctx, id, server.Applied{})
		res := nextResult{ok: ok, err: err, at: time.Now()}
		if err == nil && ok {
			res.msg, res.err = wire.DecodeToReplica(msg.Body)
		}
		ch <- res
	}()
	return ch
}

// blockedOrDone waits until the work behind done finished or some session
// of the test's database waits for a lock (what the fixes under test make
// it do), whichever comes first. It reports whether it finished, and its
// error.
func blockedOrDone(t *testing.T, sh *shop, done <-chan error) (bool, error) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-done:
			return true, err
		case <-deadline:
			t.Fatal("the work neither finished nor waited for a lock")
		default:
		}
		var waiting bool
		if err := sh.pool.QueryRow(sh.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return false, nil
		}
		select {
		case err := <-done:
			return true, err
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// holdProvisioning holds the first build of replica id that starts a
// provisioning open, before it commits: reached closes once it is held,
// release lets it go on.
func holdProvisioning(s *server.Server, id uuid.UUID) (reached <-chan struct{}, release func()) {
	r, rel := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.OnProvisionBuilt(func(replica uuid.UUID) {
		if replica != id {
			return
		}
		once.Do(func() {
			close(r)
			<-rel
		})
	})
	var relOnce sync.Once
	return r, func() { relOnce.Do(func() { close(rel) }) }
}

// PlacedProduct is a product grouped by a members table of its own (not
// the replicas table): placed.placements says which shop a register serves.
type PlacedProduct struct {
	ID         uuid.UUID `db:"id" sync:"key"`
	ShopID     uuid.UUID `db:"shop_id"`
	Name       string    `db:"name"`
	PriceCents int64     `db:"price_cents"`
	UpdatedAt  time.Time `db:"updated_at" sync:"version"`
}

func (PlacedProduct) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "placed", Name: "products", Mirror: magicsync.Catalog,
		Sync: magicsync.Grouped("placed.placements(register_id, shop_id)", "shop_id")}
}

// placedShop is a shop whose products are grouped through placed.placements.
func placedShop(t *testing.T) *shop {
	t.Helper()
	ctx := context.Background()
	pool := newCapturePool(t)
	if _, err := pool.Exec(ctx, `
		CREATE SCHEMA placed;
		CREATE TABLE placed.placements (register_id uuid PRIMARY KEY REFERENCES shop.registers, shop_id uuid NOT NULL REFERENCES shop.shops);
		CREATE TABLE placed.products (id uuid PRIMARY KEY, shop_id uuid NOT NULL REFERENCES shop.shops, name text NOT NULL,
			price_cents bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());`); err != nil {
		t.Fatal(err)
	}
	codecs, err := magicsync.NewCodecs(PlacedProduct{})
	if err != nil {
		t.Fatal(err)
	}
	return openShop(t, pool, codecs)
}

// A register moved to shop B and back to A while its provisioning for B is
// being built is provisioned for A in the end: the pass that plans the
// move back waits for the build and compares with what it committed. Both
// where the replicas table says which shop a register serves, and where a
// table of its own does.
func TestGroupMovedBackDuringProvisioningEndsInTheRightGroup(t *testing.T) {
	t.Parallel()
	layouts := []struct {
		name    string
		shop    func(*testing.T) *shop
		product string // the products table
		move    string // moves a register ($2) to a shop ($1)
	}{
		{"members in the replicas table", func(t *testing.T) *shop { return newShop(t, shopOptions) },
			"shop.products", `UPDATE shop.registers SET shop_id = $1 WHERE id = $2`},
		{"members in a table of their own", placedShop,
			"placed.products", `INSERT INTO placed.placements VALUES ($2, $1) ON CONFLICT (register_id) DO UPDATE SET shop_id = excluded.shop_id`},
	}
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			sh := l.shop(t)
			r := sh.register(sh.shopA)
			sh.exec(l.move, sh.shopA, r.id)
			sh.exec(`INSERT INTO `+l.product+` (id, shop_id, name, price_cents) VALUES (gen_random_uuid(), $1, 'apple', 1), (gen_random_uuid(), $2, 'banana', 2)`,
				sh.shopA, sh.shopB)
			sh.pass()
			settle(t, sh, r)
			r.expect("products", "apple")

			sh.exec(l.move, sh.shopB, r.id)
			sh.pass()
			reached, release := holdProvisioning(sh.s, r.id)
			defer release()
			next := nextAsync(sh.ctx, sh.s, r.id, 30*time.Second)
			select {
			case <-reached:
			case res := <-next:
				t.Fatalf("Next returned without starting a provisioning: %v %v", res.msg, res.err)
			}
			// While the build for shop B is open, the register moves back.
			sh.exec(l.move, sh.shopA, r.id)
			pass := async(func() error { return sh.s.Pass(sh.ctx) })
			passed, passErr := blockedOrDone(t, sh, pass)
			release()
			res := <-next
			if res.err != nil || !res.ok {
				t.Fatalf("Next: %v %v", res.ok, res.err)
			}
			if !passed {
				passErr = <-pass
			}
			if passErr != nil {
				t.Fatal(passErr)
			}
			r.apply(res.msg)
			if err := sh.s.Endpoint().Ack(sh.ctx, r.id, res.msg.Id); err != nil {
				t.Fatal(err)
			}
			settle(t, sh, r)
			r.expect("products", "apple")
			if st := statusOf(t, sh, r.id); st.Provisioning {
				t.Errorf("still provisioning: %s", st.ProvisionReason)
			}
		})
	}
}

// A change appended to a group's log while a replica joining the group is
// being provisioned (its cursor not yet committed) reaches it, even when
// the logs are trimmed meanwhile and its snapshot had already passed the
// row.
func TestChangeDuringProvisioningSurvivesLogTrim(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	p := sh.product(sh.shopA, "apple", 1)
	sh.pass()
	r := sh.register(sh.shopA) // the only member of shop A's group
	sh.pass()
	reached, release := holdProvisioning(sh.s, r.id)
	defer release()
	next := nextAsync(sh.ctx, sh.s, r.id, 30*time.Second)
	select {
	case <-reached: // the first part, with the apple as it was, is built
	case res := <-next:
		t.Fatalf("Next returned without starting a provisioning: %v %v", res.msg, res.err)
	}
	sh.exec(`UPDATE shop.products SET name = 'apple 2' WHERE id = $1`, p)
	pass := async(func() error { return sh.s.Pass(sh.ctx) })
	passed, passErr := blockedOrDone(t, sh, pass)
	trim := async(func() error { return sh.s.TrimLogs(sh.ctx) })
	trimmed, trimErr := blockedOrDone(t, sh, trim)
	release()
	res := <-next
	if res.err != nil || !res.ok {
		t.Fatalf("Next: %v %v", res.ok, res.err)
	}
	if !passed {
		passErr = <-pass
	}
	if !trimmed {
		trimErr = <-trim
	}
	if passErr != nil || trimErr != nil {
		t.Fatal(passErr, trimErr)
	}
	r.apply(res.msg)
	if err := sh.s.Endpoint().Ack(sh.ctx, r.id, res.msg.Id); err != nil {
		t.Fatal(err)
	}
	settle(t, sh, r)
	r.expect("products", "apple 2")
}

// A Next waiting for changes returns as soon as a pass finds its replica's
// group changed, not at its deadline.
func TestGroupChangeWakesWaitingNext(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.product(sh.shopB, "banana", 2)
	sh.pass()
	settle(t, sh, r)
	const wait = 20 * time.Second
	next := nextAsync(sh.ctx, sh.s, r.id, wait)
	waitUntilWaiting(t, sh.s, r.id, next)
	start := time.Now()
	sh.exec(`UPDATE shop.registers SET shop_id = $1 WHERE id = $2`, sh.shopB, r.id)
	sh.pass()
	res := <-next
	if res.err != nil || !res.ok {
		t.Fatalf("Next returned %v, %v %v after the group change: it was not woken", res.ok, res.err, res.at.Sub(start))
	}
	if d := res.at.Sub(start); d > wait/2 {
		t.Errorf("Next returned %v after the group change, near its %v deadline", d, wait)
	}
	r.apply(res.msg)
	if err := sh.s.Endpoint().Ack(sh.ctx, r.id, res.msg.Id); err != nil {
		t.Fatal(err)
	}
	settle(t, sh, r)
	r.expect("products", "banana")
}

// waitUntilWaiting returns once a Next of the replica waits for changes in
// s; it fails if the Next returned first.
func waitUntilWaiting(t *testing.T, s *server.Server, id uuid.UUID, next <-chan nextResult) {
	t.Helper()
	for !s.WaitingForChanges(id) {
		select {
		case res := <-next:
			t.Fatalf("Next returned before waiting: %v %v %v", res.ok, res.msg, res.err)
		case <-time.After(time.Millisecond):
		}
	}
}

// A bulk move marks every moved register for provisioning, each with its
// own reason, and leaves the others alone.
func TestBulkMoveProvisionsEveryMovedRegister(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	var moved, stay []*fake
	for range 12 {
		moved = append(moved, sh.register(sh.shopA))
	}
	for range 2 {
		stay = append(stay, sh.register(sh.shopA))
	}
	sh.product(sh.shopB, "banana", 2)
	sh.pass()
	for _, r := range append(moved, stay...) {
		settle(t, sh, r)
	}
	ids := make([]uuid.UUID, len(moved))
	for i, r := range moved {
		ids[i] = r.id
	}
	sh.exec(`UPDATE shop.registers SET shop_id = $1 WHERE id = ANY($2)`, sh.shopB, ids)
	sh.pass()
	st, err := sh.s.Status(sh.ctx)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[uuid.UUID]server.ReplicaStatus{}
	for _, s := range st {
		byID[s.ID] = s
	}
	for _, r := range moved {
		s := byID[r.id]
		if !s.Provisioning || !strings.Contains(s.ProvisionReason, "joined shop_id = "+sh.shopB.String()) ||
			!strings.Contains(s.ProvisionReason, "left shop_id = "+sh.shopA.String()) {
			t.Fatalf("moved register %s: provisioning %v, %q", r.id, s.Provisioning, s.ProvisionReason)
		}
	}
	for _, r := range stay {
		if s := byID[r.id]; s.Provisioning {
			t.Errorf("register %s that stayed is provisioning: %s", r.id, s.ProvisionReason)
		}
	}
	settle(t, sh, moved[0])
	moved[0].expect("products", "banana")
}

// settle syncs the replica until the server has nothing queued for it.
func settle(t *testing.T, sh *shop, r *fake) {
	t.Helper()
	r.sync()
}
