package natssync_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/transport/natssync"
	"github.com/magicsync/magicsync/transport/natssync/embedded"
)

// uplink is a shop's line to the head office: a TCP proxy the test cuts
// and mends.
type uplink struct {
	t      *testing.T
	addr   string // where the leaf node dials
	target string // the hub's leaf port
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newUplink(t *testing.T, target string) *uplink {
	t.Helper()
	u := &uplink{t: t, target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = ln.Addr().String()
	u.serve(ln)
	t.Cleanup(u.cut)
	return u
}

// serve forwards the connections ln accepts to the target.
func (u *uplink) serve(ln net.Listener) {
	u.mu.Lock()
	u.ln = ln
	u.mu.Unlock()
	u.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", u.target)
			if err != nil {
				c.Close()
				continue
			}
			u.mu.Lock()
			u.conns[c], u.conns[up] = true, true
			u.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			u.wg.Go(func() { pipe(up, c) })
			u.wg.Go(func() { pipe(c, up) })
		}
	})
}

// cut closes the line: its listener and every connection through it.
func (u *uplink) cut() {
	u.mu.Lock()
	if u.ln != nil {
		u.ln.Close()
		u.ln = nil
	}
	for c := range u.conns {
		c.Close()
	}
	clear(u.conns)
	u.mu.Unlock()
	u.wg.Wait()
}

// mend opens the line again, on the same address.
func (u *uplink) mend() {
	u.t.Helper()
	ln, err := net.Listen("tcp", u.addr)
	if err != nil {
		u.t.Fatal(err)
	}
	u.serve(ln)
}

// A hub NATS server at the head office and a leaf node in the shop, the
// registers connected to their shop's leaf. The shop's uplink is cut for
// a while: the registers keep selling (their requests find no head office
// and are retried), and the head office's changes wait. Once the uplink
// is back, everything flows: every sale filed once, every change on the
// registers — nothing lost, nothing doubled.
func TestAShopsLeafNodeRidesOutACutUplink(t *testing.T) {
	t.Parallel()
	o := newOffice(t)
	// The hub keeps its own leaf address to itself, or the leaf would
	// reconnect there, around the uplink.
	hub := startNATS(t, embedded.Options{Name: "hub", LeafListen: true, LeafNoAdvertise: true})
	o.serve(hub.URL())
	line := newUplink(t, hub.LeafURL()[len("nats-leaf://"):])
	leaf := startNATS(t, embedded.Options{Name: "shop", Hubs: []string{"nats-leaf://" + line.addr}, LeafReconnect: 100 * time.Millisecond})
	eventually(t, "the shop's leaf node joins the hub", func() bool { return hub.LeafNodes() == 1 })

	coffee := o.addProduct("coffee", 250)
	var regs []*register
	for range 2 {
		id, token := o.addRegister()
		regs = append(regs, startRegister(t, o.codecs, leaf.URL(), id, token))
	}
	sold := 0
	sell := func() {
		for range 10 {
			for _, g := range regs {
				g.sell(100)
				sold++
			}
		}
	}
	filed := func() int { return o.count(`SELECT count(*) FROM shop.receipts`) }
	sell()
	eventually(t, "the coffee reaches the registers and their first sales are filed", func() bool {
		return regs[0].price(coffee) == 250 && regs[1].price(coffee) == 250 && filed() == sold
	})

	line.cut()
	eventually(t, "the leaf node sees its uplink gone", func() bool { return leaf.LeafNodes() == 0 && hub.LeafNodes() == 0 })
	probe, err := nats.Connect(leaf.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if _, err := probe.Request(natssync.Subject(natssync.DefaultPrefix, uuid.New(), "schema"), nil, 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("with the uplink cut, a request in the shop got %v; want no responders", err)
	}
	before := filed()
	sell() // the registers keep selling
	tea := o.addProduct("tea", 180)
	o.exec(`UPDATE shop.products SET price_cents = 260 WHERE id = $1`, coffee)
	if n := filed(); n != before {
		t.Fatalf("%d sales filed while the uplink was cut; want the %d of before", n, before)
	}
	for _, g := range regs {
		if g.price(tea) != -1 {
			t.Fatal("the tea reached a register while the uplink was cut")
		}
	}

	line.mend()
	eventually(t, "the leaf node joins the hub again", func() bool { return hub.LeafNodes() == 1 })
	eventually(t, "every sale is filed and every change reaches the registers", func() bool {
		for _, g := range regs {
			if g.price(tea) != 180 || g.price(coffee) != 260 {
				return false
			}
		}
		return filed() == sold
	})
	if n := o.count(`SELECT count(DISTINCT (register_id, id)) FROM shop.receipts`); n != sold {
		t.Fatalf("%d distinct sales filed; want %d", n, sold)
	}
}
