package natssync_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/natssync"
	"github.com/magicsync/magicsync/transport/natssync/embedded"
)

// A register over NATS is provisioned with its shop's products, takes the
// head office's later changes (a new product, a new price), and its sales
// are filed at the head office — PostgreSQL and SQLite both real, the NATS
// server embedded.
func TestRegisterIsProvisionedTakesDeltasAndItsSalesAreFiled(t *testing.T) {
	t.Parallel()
	o := newOffice(t)
	ns := startNATS(t, embedded.Options{})
	o.serve(ns.URL())
	coffee := o.addProduct("coffee", 250)
	id, token := o.addRegister()
	g := startRegister(t, o.codecs, ns.URL(), id, token)

	eventually(t, "the provisioning brings the coffee", func() bool { return g.price(coffee) == 250 })
	tea := o.addProduct("tea", 180)
	o.exec(`UPDATE shop.products SET price_cents = 260 WHERE id = $1`, coffee)
	eventually(t, "the tea and the coffee's new price reach the register", func() bool {
		return g.price(tea) == 180 && g.price(coffee) == 260
	})
	sales := []uuid.UUID{g.sell(260), g.sell(440)}
	eventually(t, "both sales are filed", func() bool {
		return o.count(`SELECT count(*) FROM shop.receipts WHERE register_id = $1 AND id = ANY($2)`, id, sales) == 2
	})
	if n := o.count(`SELECT sum(total_cents) FROM shop.receipts WHERE register_id = $1`, id); n != 700 {
		t.Fatalf("the head office holds %d cents of the register's sales; want 700", n)
	}
}

// An upload sent twice — its reply lost, say — is filed once, and the
// second Send succeeds as the first did.
func TestAnUploadSentTwiceIsFiledOnce(t *testing.T) {
	t.Parallel()
	o := newOffice(t)
	ns := startNATS(t, embedded.Options{})
	o.serve(ns.URL())
	id, token := o.addRegister()
	nc, err := natssync.Connect(ns.URL(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client := natssync.NewClient(nc, id, token, natssync.ClientOptions{Logger: quiet()})
	sale := shoptest.Receipt{RegisterID: id, ID: uuid.New(), TotalCents: 990, ChangedAt: at}
	msg := shoptest.Upload(t, id, "main", 1, &syncpb.Up{Tables: []*syncpb.TableChanges{shoptest.Changes(t, o.codecs, sale)}})
	ctx := context.Background()
	for i := range 2 {
		if err := client.Send(ctx, id, "main", msg); err != nil {
			t.Fatalf("Send #%d = %v", i+1, err)
		}
	}
	if n := o.count(`SELECT count(*) FROM shop.receipts WHERE register_id = $1`, id); n != 1 {
		t.Fatalf("%d receipts filed; want 1", n)
	}
	// The confirmation of the filing is queued once, merged.
	if n := o.count(`SELECT count(*) FROM shop.receipts WHERE id = $1 AND total_cents = 990`, sale.ID); n != 1 {
		t.Fatalf("the sale is filed %d times with its total; want once", n)
	}
}

// A wrong token is refused as over HTTP: 401 for a wrong secret, 403 for
// another replica's token, and Send marks it Misconfigured, so the rows
// stay queued. The right token is then taken.
func TestAWrongTokenIsRefused(t *testing.T) {
	t.Parallel()
	o := newOffice(t)
	ns := startNATS(t, embedded.Options{})
	o.serve(ns.URL())
	id, token := o.addRegister()
	_, other := o.addRegister()
	nc, err := natssync.Connect(ns.URL(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	sale := shoptest.Receipt{RegisterID: id, ID: uuid.New(), TotalCents: 100, ChangedAt: at}
	msg := shoptest.Upload(t, id, "main", 1, &syncpb.Up{Tables: []*syncpb.TableChanges{shoptest.Changes(t, o.codecs, sale)}})
	for _, c := range []struct {
		name  string
		token string
		code  int
	}{
		{"a wrong secret", natssync.JoinToken(id, "not-the-secret"), http.StatusUnauthorized},
		{"another register's token", other, http.StatusForbidden},
		{"no token of the form", "garbage", http.StatusUnauthorized},
	} {
		client := natssync.NewClient(nc, id, c.token, natssync.ClientOptions{Logger: quiet()})
		err := client.Send(ctx, id, "main", msg)
		se, isSend := errors.AsType[*replica.SendError](err)
		st, isStatus := errors.AsType[*natssync.StatusError](err)
		if !isSend || se.Refusal != replica.Misconfigured || !isStatus || st.Code != c.code {
			t.Errorf("%s: Send = %v; want a Misconfigured refusal with status %d", c.name, err, c.code)
		}
		if _, err := client.Schema(ctx); !errors.As(err, &st) || st.Code != c.code {
			t.Errorf("%s: Schema = %v; want status %d", c.name, err, c.code)
		}
	}
	if n := o.count(`SELECT count(*) FROM shop.receipts`); n != 0 {
		t.Fatalf("%d receipts filed under wrong tokens; want none", n)
	}
	client := natssync.NewClient(nc, id, token, natssync.ClientOptions{Logger: quiet()})
	if err := client.Send(ctx, id, "main", msg); err != nil {
		t.Fatalf("with the right token, Send = %v", err)
	}
	schema, err := client.Schema(ctx)
	if err != nil || !bytes.Equal(schema, o.s.Endpoint().Schema()) {
		t.Fatalf("Schema = %d bytes, %v; want the head office's %d", len(schema), err, len(o.s.Endpoint().Schema()))
	}
}

// rawNext asks for the next message on the wire, as a replica would.
func rawNext(t *testing.T, nc *nats.Conn, id uuid.UUID, token string, applied string) *nats.Msg {
	t.Helper()
	m := nats.NewMsg(natssync.Subject(natssync.DefaultPrefix, id, "next"))
	m.Header.Set(natssync.HeaderAuthorization, "Bearer "+token)
	m.Header.Set(natssync.HeaderWait, "0.2")
	if applied != "" {
		m.Header.Set(natssync.HeaderApplied, applied)
	}
	resp, err := nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A message is handed out again, the same bytes under the same id, until
// it is acknowledged; once it is, the next is another (or none).
func TestAMessageComesAgainUntilAcknowledged(t *testing.T) {
	t.Parallel()
	o := newOffice(t)
	ns := startNATS(t, embedded.Options{})
	o.serve(ns.URL())
	o.addProduct("coffee", 250)
	id, token := o.addRegister()
	nc, err := natssync.Connect(ns.URL(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var first *nats.Msg
	eventually(t, "a message for the register", func() bool {
		first = rawNext(t, nc, id, token, "")
		return first.Header.Get(natssync.HeaderStatus) == "200"
	})
	msgID := first.Header.Get(natssync.HeaderMessageID)
	if first.Header.Get(natssync.HeaderProtocol) == "" || len(first.Data) == 0 || msgID == "" {
		t.Fatalf("the reply lacks the protocol, the message or its id: %v, %d bytes", first.Header, len(first.Data))
	}
	for range 2 {
		again := rawNext(t, nc, id, token, "")
		if again.Header.Get(natssync.HeaderMessageID) != msgID || !bytes.Equal(again.Data, first.Data) {
			t.Fatalf("unacknowledged, message %s came back as %q, %d bytes", msgID, again.Header.Get(natssync.HeaderMessageID), len(again.Data))
		}
	}
	ack := nats.NewMsg(natssync.Subject(natssync.DefaultPrefix, id, "ack"))
	ack.Header.Set(natssync.HeaderAuthorization, "Bearer "+token)
	ack.Header.Set(natssync.HeaderMessageID, msgID)
	resp, err := nc.RequestMsg(ack, 10*time.Second)
	if err != nil || resp.Header.Get(natssync.HeaderStatus) != "204" {
		t.Fatalf("ack: %v, %v", err, resp)
	}
	after := rawNext(t, nc, id, token, "")
	if after.Header.Get(natssync.HeaderMessageID) == msgID {
		t.Fatalf("message %s came again after it was acknowledged", msgID)
	}
	// An acknowledgement of a message never issued is refused, 409.
	ack = nats.NewMsg(natssync.Subject(natssync.DefaultPrefix, id, "ack"))
	ack.Header.Set(natssync.HeaderAuthorization, "Bearer "+token)
	ack.Header.Set(natssync.HeaderMessageID, "999999")
	if resp, err := nc.RequestMsg(ack, 10*time.Second); err != nil || resp.Header.Get(natssync.HeaderStatus) != "409" {
		t.Fatalf("ack of a message never issued: %v, %v; want 409", err, resp)
	}
}

// Without a head office, Send fails at once, retryably (no responders):
// the rows stay queued.
func TestWithoutAHeadOfficeSendIsUnreachable(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, embedded.Options{})
	id := uuid.New()
	nc, err := natssync.Connect(ns.URL(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client := natssync.NewClient(nc, id, natssync.JoinToken(id, "s"), natssync.ClientOptions{Logger: quiet()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = client.Send(ctx, id, "main", []byte{1})
	se, ok := errors.AsType[*replica.SendError](err)
	if !ok || !se.Retryable || se.Refusal != replica.Unreachable || !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("Send = %v; want a retryable Unreachable failure wrapping nats.ErrNoResponders", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Send waited for its deadline; want it to fail at once")
	}
}

// An upload larger than the NATS server takes is refused as TooLarge,
// without a request, so that the replica sends smaller ones.
func TestAnUploadLargerThanTheMaxPayloadIsTooLarge(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, embedded.Options{MaxPayload: 64 << 10})
	id := uuid.New()
	nc, err := natssync.Connect(ns.URL(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client := natssync.NewClient(nc, id, natssync.JoinToken(id, "s"), natssync.ClientOptions{Logger: quiet()})
	err = client.Send(context.Background(), id, "main", make([]byte, 64<<10))
	if se, ok := errors.AsType[*replica.SendError](err); !ok || se.Refusal != replica.TooLarge {
		t.Fatalf("Send = %v; want a TooLarge refusal", err)
	}
}

// A register whose token the head office refuses keeps selling, and its
// sales stay queued in its database (the refusal is Misconfigured, not a
// judgement of its rows); started again with its right token, over the
// same database, it sends them, and each is filed once.
func TestARefusedRegisterKeepsItsSalesUntilItsTokenIsMended(t *testing.T) {
	t.Parallel()
	o := newOffice(t)
	ns := startNATS(t, embedded.Options{})
	o.serve(ns.URL())
	id, token := o.addRegister()
	db := registerDB(t, o.codecs)
	g := startRegisterOn(t, db, o.codecs, ns.URL(), id, natssync.JoinToken(id, "a-stale-secret"))
	sales := []uuid.UUID{g.sell(100), g.sell(200), g.sell(300)}
	var problem string
	eventually(t, "the register's sends are refused and its sales stay queued", func() bool {
		st, err := g.engine.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range st.Lanes {
			if l.Name == "main" && l.Unsent == 3 && l.Problem != "" {
				problem = l.Problem
				return true
			}
		}
		return false
	})
	if !strings.Contains(problem, "401") {
		t.Errorf("the lane's problem is %q; want the head office's 401", problem)
	}
	if n := o.count(`SELECT count(*) FROM shop.receipts`); n != 0 {
		t.Fatalf("%d sales filed under a refused token", n)
	}
	g.stop()

	startRegisterOn(t, db, o.codecs, ns.URL(), id, token)
	eventually(t, "with the right token, every sale is filed", func() bool {
		return o.count(`SELECT count(*) FROM shop.receipts WHERE register_id = $1 AND id = ANY($2)`, id, sales) == 3
	})
	if n := o.count(`SELECT count(*) FROM shop.receipts`); n != 3 {
		t.Fatalf("%d sales filed; want each of the 3 once", n)
	}
}
