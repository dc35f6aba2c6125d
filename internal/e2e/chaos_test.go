package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/testenv"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

// Uploads of a lane filed while a register fetches nothing leave one
// Filed, which confirms them all: the register, applying it, forgets
// every row they carried, and sets aside only the row the server refused,
// which an earlier upload than the Filed's own sequence carried.
func TestMergedFiledConfirmsEveryUploadOfALane(t *testing.T) {
	t.Parallel()
	h := newHeadOffice(t)
	// No row goes up again while the test looks: each stays sent in its
	// one upload.
	h.tune = func(s *replica.Settings) { s.ResendAfter = time.Hour }
	h.exec(`ALTER TABLE shop.receipts ADD CONSTRAINT receipts_total_check CHECK (total_cents >= 0)`)
	shop := h.addShop()
	h.addProduct(shop, "bread", 100) // to settle, the register applies its provisioning
	g := h.addRegister(shop, sqlitetest.Drivers()[0])
	settleAll(t, g)
	eventually(t, "the outbox emptied", func() (bool, string) {
		n := h.count(eng(`SELECT count(*) FROM public.sync_outbox WHERE replica = $1`), g.id)
		return n == 0, fmt.Sprintf("%d messages queued", n)
	})
	g.stalled.Store(true)
	// Each sale goes up in an upload of its own; the first is refused.
	for i, total := range []int64{-1, 200, 300} {
		g.ring(total)
		eventually(t, fmt.Sprintf("upload %d filed", i+1), func() (bool, string) {
			n := h.count(eng(`SELECT count(*) FROM public.sync_filed WHERE replica = $1`), g.id)
			return n == i+1, fmt.Sprintf("%d uploads filed", n)
		})
	}
	if n := h.count(eng(`SELECT count(*) FROM public.sync_outbox WHERE replica = $1`), g.id); n != 1 {
		t.Fatalf("%d messages queued for 3 uploads; want one Filed", n)
	}
	ctx := context.Background()
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, ok, err := h.s.Endpoint().Next(wait, g.id, server.Applied{})
	if err != nil || !ok {
		t.Fatalf("next: %v, %v", ok, err)
	}
	m, err := wire.DecodeToReplica(msg.Body)
	if err != nil {
		t.Fatal(err)
	}
	f := m.GetFiled()
	if f == nil || len(f.Earlier) != 2 || len(f.Refused) != 1 || f.Refused[0].Message != f.Earlier[0] {
		t.Fatalf("queued %v; want a Filed of three uploads, the row refused in the first", m)
	}
	if _, err := g.r.Endpoint().Receive(ctx, msg.Body); err != nil {
		t.Fatal(err)
	}
	if err := h.s.Endpoint().Ack(ctx, g.id, msg.ID); err != nil {
		t.Fatal(err)
	}
	if n := g.count("SELECT count(*) FROM sync_pending WHERE held IS NULL"); n != 0 {
		t.Errorf("%d rows still wait for a confirmation after the merged Filed", n)
	}
	if n := g.count("SELECT count(*) FROM sync_pending WHERE held IS NOT NULL"); n != 1 {
		t.Errorf("%d rows set aside; want the one the server refused", n)
	}
	st, err := g.r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Backlog != 1 {
		t.Errorf("backlog %d; want the refused row", st.Backlog)
	}
	if n := h.count(`SELECT count(*) FROM shop.receipts WHERE register_id = $1`, g.id); n != 2 {
		t.Errorf("%d receipts filed; want the 2 the server took", n)
	}
}

// The outside tests' drill: registers sell every 30 ms over a link that
// loses a fifth of what it carries before it arrives, a tenth of the
// answers to uploads after the server filed them, delivers a tenth twice,
// replays a few old messages, and takes 40 ms to bring a message down;
// meanwhile the head office adds products and raises prices. Products
// must keep reaching every register during the drill, not only once the
// link heals, and every receipt must end filed exactly once.
//
// The lag is bounded in messages, not in time, so that a slow machine does
// not fail the test: at each look (every 50 ms), for the oldest change a
// register does not hold yet, how many messages were handed down to it
// since the change was made. The pass (every 50 ms) that puts the change
// in the register's log, at most one confirmation per lane ahead of it,
// and its own message, each lost a fifth of the time, make a handful;
// the test allows 25. Confirmations queued one per upload, as before, grow
// faster than the link drains them: a change waits behind all of them,
// the count grows with the drill and the change never comes. The lag in
// time is logged; each register must have got some change of the drill
// during it (none comes at all would count no message); and the
// confirmations queued for a register are checked at every look: never
// more than one per lane after the newest catalog change queued.
//
// The faults are drawn from a seed of the run's own, logged;
// MAGICSYNC_SEED=s plays seed s again.
func TestChaosProductsArriveWhileSalesContinue(t *testing.T) {
	t.Parallel()
	const (
		drill    = 8 * time.Second
		maxDrill = 40 * time.Second
		saleEach = 30 * time.Millisecond
		lookEach = 50 * time.Millisecond
		maxTrips = 25
	)
	h := newHeadOffice(t)
	shop := h.addShop()
	var regs []*register
	type change struct {
		at    time.Time
		trips []int64 // each register's messages handed down when it was made
		id    uuid.UUID
		price int64
	}
	var changes []change
	made := func(id uuid.UUID, price int64) {
		c := change{at: time.Now(), id: id, price: price}
		for _, g := range regs {
			c.trips = append(c.trips, g.fetched.Load())
		}
		changes = append(changes, c)
	}
	price := int64(100)
	var products []uuid.UUID
	addProduct := func(name string) {
		price++
		id := uuid.New()
		h.exec("INSERT INTO shop.products VALUES ($1, $2, $3, $4, $5)", id, shop, name, price, at)
		products = append(products, id)
		made(id, price)
	}
	const before = 8 // changes made before the drill
	for i := range before {
		addProduct(fmt.Sprintf("product %d", i))
	}
	for i := range 3 {
		regs = append(regs, h.addRegister(shop, sqlitetest.Drivers()[i%len(sqlitetest.Drivers())]))
	}
	settleAll(t, regs...)

	seed := testenv.Seed(t)
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var rndMu sync.Mutex
	float := func() float64 {
		rndMu.Lock()
		defer rndMu.Unlock()
		return rnd.Float64()
	}
	for _, g := range regs {
		g.faults.set(float, 0.2, 0.1, 0.1, 0.02)
		g.faults.setLink(0.1, 40*time.Millisecond)
	}

	// Sales, on every register, all through the drill.
	var rungMu sync.Mutex
	rung := map[uuid.UUID]*register{}
	stop := make(chan struct{})
	var sales sync.WaitGroup
	for _, g := range regs {
		sales.Go(func() {
			tick := time.NewTicker(saleEach)
			defer tick.Stop()
			for n := int64(1); ; n++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				id := g.ring(n)
				rungMu.Lock()
				rung[id] = g
				rungMu.Unlock()
			}
		})
	}
	stopSales := sync.OnceFunc(func() { close(stop); sales.Wait() })
	t.Cleanup(stopSales)

	// The head office changes its catalog, and looks at what each register
	// holds and what waits for it.
	held := func(g *register) map[string]int64 {
		out := map[string]int64{}
		rows, err := g.db.Query("SELECT id, price_cents FROM products")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var p int64
			if err := rows.Scan(&id, &p); err != nil {
				t.Fatal(err)
			}
			out[id] = p
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	filedPerLane := func(g *register) map[string]int {
		rows, err := h.pool.Query(context.Background(), eng(`SELECT body FROM public.sync_outbox WHERE replica = $1 AND kind = 'filed'
			AND id > coalesce((SELECT max(id) FROM public.sync_outbox WHERE replica = $1 AND kind <> 'filed'), 0)`), g.id)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var body []byte
			if err := rows.Scan(&body); err != nil {
				t.Fatal(err)
			}
			m, err := wire.DecodeToReplica(body)
			if err != nil {
				t.Fatal(err)
			}
			out[m.GetFiled().GetLane()]++
		}
		return out
	}
	pending := make([]int, len(regs)) // the oldest change each lacks
	worstTrips := make([]int64, len(regs))
	worstLag := make([]time.Duration, len(regs))
	mostFiled := make([]int, len(regs))
	look := time.NewTicker(lookEach)
	defer look.Stop()
	// The drill goes on past its length, up to a cap, until some change
	// of it reached every register: on a loaded machine (the whole suite
	// under the race detector) a register may fetch only a message or two
	// in the drill's length, which proves nothing either way.
	reachedAll := func() bool {
		for i := range regs {
			if pending[i] <= before {
				return false
			}
		}
		return true
	}
	for start, step := time.Now(), 0; time.Since(start) < drill || !reachedAll() && time.Since(start) < maxDrill; step++ {
		<-look.C
		if step%3 == 0 {
			if step%2 == 0 {
				addProduct(fmt.Sprintf("new product %d", step))
			} else {
				id := products[int(float()*float64(len(products)))%len(products)]
				price++
				h.exec("UPDATE shop.products SET price_cents = $1, updated_at = updated_at + interval '1 ms' WHERE id = $2", price, id)
				made(id, price)
			}
		}
		for i, g := range regs {
			have := held(g)
			for pending[i] < len(changes) {
				if p, ok := have[changes[pending[i]].id.String()]; !ok || p < changes[pending[i]].price {
					break
				}
				pending[i]++
			}
			if pending[i] < len(changes) {
				c := changes[pending[i]]
				worstTrips[i] = max(worstTrips[i], g.fetched.Load()-c.trips[i])
				worstLag[i] = max(worstLag[i], time.Since(c.at))
			}
			for _, n := range filedPerLane(g) {
				mostFiled[i] = max(mostFiled[i], n)
			}
		}
	}
	stopSales()
	t.Logf("%d products, %d catalog changes, %d receipts rung; per register: most messages handed down while a change waited %v, longest wait %v, most Filed of a lane queued %v",
		len(products), len(changes), len(rung), worstTrips, worstLag, mostFiled)
	for i, n := range worstTrips {
		if n > maxTrips {
			t.Errorf("register %d: a catalog change waited while %d messages came down (for %v); want at most %d",
				i+1, n, worstLag[i].Round(time.Millisecond), maxTrips)
		}
		if pending[i] <= before {
			t.Errorf("register %d: no catalog change of the drill reached it during the drill", i+1)
		}
		if mostFiled[i] > 1 {
			t.Errorf("register %d: %d Filed of a lane queued after the newest catalog change; want one per lane", i+1, mostFiled[i])
		}
	}

	// Healed, everything settles, every receipt filed once.
	for _, g := range regs {
		g.faults.set(nil, 0, 0, 0, 0)
		g.faults.setLink(0, 0)
	}
	settleAll(t, regs...)
	if n := h.count("SELECT count(*) FROM shop.receipts"); n != len(rung) {
		t.Fatalf("%d receipts filed; %d were rung up", n, len(rung))
	}
	for id, g := range rung {
		if n := h.count("SELECT count(*) FROM shop.receipts WHERE id = $1 AND register_id = $2", id, g.id); n != 1 {
			t.Fatalf("receipt %v of register %v filed %d times", id, g.id, n)
		}
	}
}
