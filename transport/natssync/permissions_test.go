package natssync_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/natssync"
	"github.com/magicsync/magicsync/transport/natssync/embedded"
)

// With a NATS user per replica, restricted by ReplicaPermissions, a
// register syncs as ever over its own subjects, but the NATS server
// refuses it another's: it can neither send as another register, even
// with that register's token, nor listen to the fleet's requests or
// another's replies.
func TestAReplicasNATSPermissionsConfineItToItsOwnSubjects(t *testing.T) {
	t.Parallel()
	o := newOffice(t)
	a, tokenA := o.addRegister()
	b, tokenB := o.addRegister()
	permsA := natssync.ReplicaPermissions("", a)
	permsB := natssync.ReplicaPermissions("", b)
	ns := startNATS(t, embedded.Options{Users: []embedded.User{
		{Name: "office", Password: "office-secret"},
		{Name: a.String(), Password: "a-secret", Permissions: &permsA},
		{Name: b.String(), Password: "b-secret", Permissions: &permsB},
	}})
	o.serve(ns.URL(), nats.UserInfo("office", "office-secret"))
	coffee := o.addProduct("coffee", 250)

	g := startRegister(t, o.codecs, ns.URL(), a, tokenA, nats.UserInfo(a.String(), "a-secret"))
	eventually(t, "the coffee reaches register A over its own subjects", func() bool { return g.price(coffee) == 250 })
	sale := g.sell(300)
	eventually(t, "register A's sale is filed", func() bool {
		return o.count(`SELECT count(*) FROM shop.receipts WHERE id = $1`, sale) == 1
	})

	violations := make(chan error, 16)
	nc, err := natssync.Connect(ns.URL(), a, nats.UserInfo(a.String(), "a-secret"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case violations <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	violated := func(what string) {
		t.Helper()
		select {
		case err := <-violations:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("%s: the NATS server said %v; want a permissions violation", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no permissions violation within 10 s", what)
		}
	}
	// As register B, with B's own token: the server does not forward it.
	asB := natssync.NewClient(nc, b, tokenB, natssync.ClientOptions{RequestTimeout: 500 * time.Millisecond, Logger: quiet()})
	err = asB.Send(context.Background(), b, "main", []byte{1})
	if se, ok := errors.AsType[*replica.SendError](err); !ok || !se.Retryable {
		t.Fatalf("sending as B on A's connection: %v; want a retryable failure", err)
	}
	violated("publishing to B's subject")
	if _, err := nc.SubscribeSync("magicsync.>"); err != nil {
		t.Fatal(err)
	}
	violated("listening to every replica's requests")
	if _, err := nc.SubscribeSync(natssync.InboxPrefix(b) + ".>"); err != nil {
		t.Fatal(err)
	}
	violated("listening to B's replies")
	if n := o.count(`SELECT count(*) FROM shop.receipts WHERE register_id = $1`, b); n != 0 {
		t.Fatalf("%d receipts filed as B", n)
	}
	if !strings.HasPrefix(permsA.Publish[0], "magicsync."+a.String()) {
		t.Fatalf("ReplicaPermissions publish %v", permsA.Publish)
	}
}
