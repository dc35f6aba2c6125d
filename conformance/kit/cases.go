package kit

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// kase is one scripted case: its name, what it checks, and its script,
// which returns why the replica failed it.
type kase struct {
	name, checks string
	run          func(ctx context.Context, r *run) error
}

// cases are run in this order, over the same replica: each starts from
// where the one before left it. The digest mismatch comes before the rows
// the replica cannot take: the head office compares no digest of a table
// while it records a row of it the replica could not take.
var cases = []kase{
	{"provisioning in several parts", "a new replica stages every part of its first snapshot, switches them in at EndSnapshot, and then holds exactly the head office's products", provisioning},
	{"deltas", "an update, an insert and a delete at the head office reach the replica as they are, without a new provisioning", deltas},
	{"a message served twice", "a message whose acknowledgement was lost comes again: the replica acknowledges it again and holds the same rows", servedTwice},
	{"redelivery of an older message", "an older message served again after a newer one changes nothing (it is at or below the last applied id) and is acknowledged", redelivery},
	{"a digest mismatch", "a replica that lost a row on the way sends a digest that disagrees, is provisioned again and comes to hold the head office's rows", digestMismatch},
	{"a newer protocol", "a message of a newer protocol is neither applied nor acknowledged; the same change, in the protocol the replica speaks, then is", newerProtocol},
	{"resend with the same sequence", "an upload answered 503 is sent again with the same sequence and the same bytes, and is then filed", resend},
	{"a lost Filed", "when the Filed of an upload never arrives, the replica sends the upload's rows again until a Filed confirms them", lostFiled},
	{"an undecodable row", "a row whose tuple does not decode is left out, the rest of its message applied and acknowledged, and the row reported up as rejected", undecodable},
	{"a constraint refusal", "a row the replica's CHECK refuses is left out, the rest applied and acknowledged, and the row reported up as rejected", constraint},
	{"a retired row kept while pointed at", "a retired row one of the replica's rows points at is kept, marked retired, unreported and out of the digest, and let go once nothing points at it; one nothing points at goes at once", retired},
	{"a wish of a row not held", "a wish of a setting row the replica does not hold is answered WAITING with a reason, and carried out (APPLIED, the version moved on) once the replica's application writes the row", wishOfARowNotHeld},
	{"commands", "the echo command runs once and succeeds with its params as its result; a command of a name without a handler fails with a reason; one past its deadline expires, never run", commands},
	{"a message that cannot be decoded", "a message damaged every time it is served is neither applied nor acknowledged, but reported up (Up.undecodable); provisioned again, the replica holds what it brought", undecodableMessage},
	{"a restore of the head office", "after the head office is restored from an older backup, the replica is provisioned again, holds the backup's rows and sends again the receipts the backup lacks", restore},
}

// marks are where the proxy's records stood when a case began.
type marks struct{ served, acks, ups int }

func (r *run) mark() marks {
	s, a, u, _ := r.p.snapshot()
	return marks{len(s), len(a), len(u)}
}

// since returns the records made after m.
func (r *run) since(m marks) (srv []served, acks []uint64, ups []upload) {
	s, a, u, _ := r.p.snapshot()
	return s[min(m.served, len(s)):], a[min(m.acks, len(a)):], u[min(m.ups, len(u)):]
}

// carries says whether a Down upserts or deletes the product id.
func carries(m *syncpb.ToReplica, id string) bool {
	key := productKey(id)
	for _, t := range m.GetDown().GetTables() {
		if !strings.HasSuffix(t.GetTable(), "products") {
			continue
		}
		for _, k := range append(slices.Clone(t.GetUpsertKeys()), t.GetDeletes()...) {
			if bytes.Equal(k, key) {
				return true
			}
		}
	}
	return false
}

// upCarries says whether an upload carries the receipt key.
func upCarries(u upload, key []byte) bool {
	for _, t := range u.msg.GetUp().GetTables() {
		if !strings.HasSuffix(t.GetTable(), "receipts") {
			continue
		}
		for _, k := range t.GetUpsertKeys() {
			if bytes.Equal(k, key) {
				return true
			}
		}
	}
	return false
}

// confirms says whether a message is a Filed confirming seq of lane.
func confirms(m *syncpb.ToReplica, lane string, seq uint64) bool {
	f := m.GetFiled()
	return f != nil && f.GetLane() == lane && (f.GetSequence() == seq || slices.Contains(f.GetEarlier(), seq))
}

// holds reads the price of product id in the replica's file.
func (r *run) holds(ctx context.Context, id string) (product, bool, error) {
	got, err := r.replicaProducts(ctx)
	if err != nil {
		return product{}, false, err
	}
	p, ok := got[id]
	return p, ok, nil
}

func provisioning(ctx context.Context, r *run) error {
	return r.eventually(ctx, func() (bool, string) {
		srv, acks, _ := r.since(marks{})
		parts := map[uint64]int{}
		for _, s := range srv {
			if d := s.original.GetDown(); d != nil && d.GetSnapshot() != 0 && slices.Contains(acks, s.id) {
				parts[d.GetSnapshot()]++
			}
		}
		ended := false
		for _, s := range srv {
			if e := s.original.GetEndSnapshot(); e != nil && parts[e.GetSnapshot()] >= 2 && slices.Contains(acks, s.id) {
				ended = true
			}
		}
		if !ended {
			return false, fmt.Sprintf("no snapshot of several parts was acknowledged through its EndSnapshot (parts acknowledged per snapshot: %v)", parts)
		}
		return r.inSync(ctx)
	})
}

func deltas(ctx context.Context, r *run) error {
	m := r.mark()
	if err := r.exec(ctx, `UPDATE kit.products SET price = 111 WHERE id = 'p001';
		INSERT INTO kit.products (id, name, price) VALUES ('p100', 'a new product', 1000);
		DELETE FROM kit.products WHERE id = 'p002'`); err != nil {
		return err
	}
	if err := r.eventually(ctx, func() (bool, string) { return r.inSync(ctx) }); err != nil {
		return err
	}
	srv, _, _ := r.since(m)
	for _, s := range srv {
		if s.original.GetEndSnapshot() != nil {
			return fmt.Errorf("the head office provisioned the replica again (message %d) instead of sending deltas: did its digest disagree?", s.id)
		}
	}
	return nil
}

func servedTwice(ctx context.Context, r *run) error {
	m := r.mark()
	var once sync.Once
	var twice uint64
	r.p.hooks(nil, func(id uint64) int {
		code := 0
		srv, _, _ := r.since(m)
		for _, s := range srv {
			if s.id == id && !s.injected && carries(s.original, "p003") {
				once.Do(func() {
					code = 503
					twice = id
					r.p.serveNext(id, s.body)
				})
			}
		}
		return code
	}, nil)
	if err := r.exec(ctx, `UPDATE kit.products SET price = 333 WHERE id = 'p003'`); err != nil {
		return err
	}
	return r.eventually(ctx, func() (bool, string) {
		srv, acks, _ := r.since(m)
		var again bool
		for _, s := range srv {
			again = again || (s.injected && s.id == twice)
		}
		switch {
		case !again:
			return false, "the message carrying p003 was not served a second time (did the replica poll again after its acknowledgement failed?)"
		case !slices.Contains(acks, twice):
			return false, fmt.Sprintf("the replica did not acknowledge message %d when it came again (a redelivery must be acknowledged)", twice)
		}
		return r.inSync(ctx)
	})
}

// appliedMessage waits for the replica to acknowledge a message carrying
// product id, served after m, and returns it.
func (r *run) appliedMessage(ctx context.Context, m marks, id string) (served, error) {
	var found served
	err := r.eventually(ctx, func() (bool, string) {
		srv, acks, _ := r.since(m)
		for _, s := range srv {
			if !s.injected && s.body != nil && carries(s.original, id) && slices.Contains(acks, s.id) {
				found = s
				return true, ""
			}
		}
		return false, "the replica did not acknowledge a message carrying " + id
	})
	return found, err
}

func redelivery(ctx context.Context, r *run) error {
	m := r.mark()
	if err := r.exec(ctx, `UPDATE kit.products SET price = 1 WHERE id = 'p004'`); err != nil {
		return err
	}
	older, err := r.appliedMessage(ctx, m, "p004")
	if err != nil {
		return err
	}
	m = r.mark()
	if err := r.exec(ctx, `UPDATE kit.products SET price = 2 WHERE id = 'p004'`); err != nil {
		return err
	}
	newer, err := r.appliedMessage(ctx, m, "p004")
	if err != nil {
		return err
	}
	m = r.mark()
	r.p.serveNext(older.id, older.body)
	if err := r.eventually(ctx, func() (bool, string) {
		_, acks, _ := r.since(m)
		if slices.Contains(acks, older.id) {
			return true, ""
		}
		return false, fmt.Sprintf("the replica did not acknowledge message %d when it came again after %d (a redelivery must be acknowledged)", older.id, newer.id)
	}); err != nil {
		return err
	}
	p, ok, err := r.holds(ctx, "p004")
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("the replica lost products row p004 when message %d came again after %d", older.id, newer.id)
	case p.price != 2:
		return fmt.Errorf("the replica applied message %d again after %d (products row p004 holds price %d, want 2)", older.id, newer.id, p.price)
	}
	return nil
}

// refusedRow runs the cases of a row the replica cannot take: the head
// office inserts the product bad and the product good in one transaction,
// alter changes the message carrying them before the replica gets it
// (nil: as it is), and the replica must hold good, not bad, and report bad.
func refusedRow(ctx context.Context, r *run, insert, bad, good string, alter func(*syncpb.ToReplica) *syncpb.ToReplica) error {
	m := r.mark()
	var once sync.Once
	if alter != nil {
		r.p.hooks(func(msg *syncpb.ToReplica) verdict {
			var v verdict
			if carries(msg, bad) {
				once.Do(func() { v.replace = alter(proto.Clone(msg).(*syncpb.ToReplica)) })
			}
			return v
		}, nil, nil)
	}
	if err := r.exec(ctx, insert); err != nil {
		return err
	}
	err := r.eventually(ctx, func() (bool, string) {
		srv, acks, _ := r.since(m)
		var carrier uint64
		for _, s := range srv {
			if carries(s.original, bad) {
				carrier = s.id
			}
		}
		if carrier == 0 || !slices.Contains(acks, carrier) {
			return false, fmt.Sprintf("the replica did not acknowledge the message carrying %s (message %d): a row it cannot take must not hold back its message", bad, carrier)
		}
		got, err := r.replicaProducts(ctx)
		if err != nil {
			return false, "reading the replica's products: " + err.Error()
		}
		if p, ok := got[bad]; ok {
			return false, fmt.Sprintf("the replica holds %s (price %d), which it should have left out", bad, p.price)
		}
		if _, ok := got[good]; !ok {
			return false, fmt.Sprintf("the replica lacks %s, which came in the same message as %s: the other rows must be applied", good, bad)
		}
		if _, ok, err := r.rejected(ctx, bad); err != nil || !ok {
			return false, fmt.Sprintf("the head office's status lists no row %s the replica could not take: it must report it up as rejected", bad)
		}
		return true, ""
	})
	if err != nil {
		return err
	}
	// The row goes, so that the next cases compare whole catalogs.
	return r.exec(ctx, "DELETE FROM kit.products WHERE id = $1", bad)
}

func undecodable(ctx context.Context, r *run) error {
	return refusedRow(ctx, r, `INSERT INTO kit.products (id, name, price) VALUES ('pbad', 'damaged on the way', 10), ('pgood', 'whole', 20)`, "pbad", "pgood",
		func(msg *syncpb.ToReplica) *syncpb.ToReplica {
			for _, t := range msg.GetDown().GetTables() {
				for i, k := range t.GetUpsertKeys() {
					if bytes.Equal(k, productKey("pbad")) {
						t.Upserts[i] = []byte{0x01, 0x0a} // one value of kind 0x0a, which no tuple has
					}
				}
			}
			return msg
		})
}

func constraint(ctx context.Context, r *run) error {
	return refusedRow(ctx, r, fmt.Sprintf(`INSERT INTO kit.products (id, name, price) VALUES ('pbig', 'too dear for the replica', %d), ('pfine', 'fine', 30)`, 5*MaxReplicaPrice),
		"pbig", "pfine", nil)
}

func resend(ctx context.Context, r *run) error {
	m := r.mark()
	var once sync.Once
	id := fmt.Sprintf("r%03d", r.receipts+1)
	receipt := r.receiptKey(id)
	r.p.hooks(nil, nil, func(u upload) int {
		code := 0
		if upCarries(u, receipt) {
			once.Do(func() { code = 503 })
		}
		return code
	})
	if _, err := r.writeReceipt(ctx, 1250); err != nil {
		return err
	}
	return r.eventually(ctx, func() (bool, string) {
		_, _, ups := r.since(m)
		i := slices.IndexFunc(ups, func(u upload) bool { return u.status == 503 })
		if i < 0 {
			return false, "the replica did not send receipt " + id + " up"
		}
		refused := ups[i]
		j := slices.IndexFunc(ups[i+1:], func(u upload) bool { return u.lane == refused.lane })
		if j < 0 {
			return false, fmt.Sprintf("the replica did not send again its upload of lane %s, sequence %d, answered 503", refused.lane, refused.seq)
		}
		again := ups[i+1+j]
		switch {
		case again.seq != refused.seq:
			return false, fmt.Sprintf("after a 503, the replica sent sequence %d of lane %s where sequence %d was due again", again.seq, refused.lane, refused.seq)
		case again.sum != refused.sum:
			return false, fmt.Sprintf("after a 503, the replica sent sequence %d of lane %s again with other bytes: it must send the same upload", refused.seq, refused.lane)
		}
		if ok, err := r.filed(ctx, id); err != nil || !ok {
			return false, "the head office never filed receipt " + id
		}
		return true, ""
	})
}

func lostFiled(ctx context.Context, r *run) error {
	m := r.mark()
	var once sync.Once
	var lost upload
	id := fmt.Sprintf("r%03d", r.receipts+1)
	key := r.receiptKey(id)
	r.p.hooks(func(msg *syncpb.ToReplica) verdict {
		var v verdict
		_, _, ups := r.since(m)
		for _, u := range ups {
			if u.status == 0 && upCarries(u, key) && confirms(msg, u.lane, u.seq) {
				once.Do(func() { v.hide, lost = true, u })
			}
		}
		return v
	}, nil, nil)
	if _, err := r.writeReceipt(ctx, 990); err != nil {
		return err
	}
	return r.eventually(ctx, func() (bool, string) {
		srv, acks, ups := r.since(m)
		hidden := slices.IndexFunc(srv, func(s served) bool { return s.body == nil })
		if hidden < 0 {
			return false, "the head office never confirmed the upload of receipt " + id
		}
		first := slices.IndexFunc(ups, func(u upload) bool { return u.status == 0 && u.lane == lost.lane && u.seq == lost.seq })
		var resent *upload
		for k := first + 1; first >= 0 && k < len(ups); k++ {
			if ups[k].status == 0 && upCarries(ups[k], key) {
				resent = &ups[k]
			}
		}
		if resent == nil {
			return false, fmt.Sprintf("the replica never sent receipt %s again after the Filed of lane %s, sequence %d was lost (an upload never confirmed must be sent again)", id, lost.lane, lost.seq)
		}
		for _, s := range srv[hidden+1:] {
			if s.body != nil && confirms(s.original, resent.lane, resent.seq) && slices.Contains(acks, s.id) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("the replica did not acknowledge the Filed of its upload of receipt %s sent again (lane %s, sequence %d)", id, resent.lane, resent.seq)
	})
}

func newerProtocol(ctx context.Context, r *run) error {
	m := r.mark()
	var mu sync.Mutex
	flip := true
	r.p.hooks(func(msg *syncpb.ToReplica) verdict {
		mu.Lock()
		defer mu.Unlock()
		if !flip || !carries(msg, "p005") {
			return verdict{}
		}
		newer := proto.Clone(msg).(*syncpb.ToReplica)
		newer.Protocol = msg.GetProtocol() + 1
		return verdict{replace: newer}
	}, nil, nil)
	before, _, err := r.holds(ctx, "p005")
	if err != nil {
		return err
	}
	if err := r.exec(ctx, `UPDATE kit.products SET price = 555 WHERE id = 'p005'`); err != nil {
		return err
	}
	var id uint64
	if err := r.eventually(ctx, func() (bool, string) {
		srv, _, _ := r.since(m)
		n := 0
		for _, s := range srv {
			if carries(s.original, "p005") {
				n++
				id = s.id
			}
		}
		if n == 0 {
			return false, "the head office never sent the change of p005"
		}
		return n >= 2, fmt.Sprintf("the replica did not ask again for message %d, of a newer protocol, after it was served it", id)
	}); err != nil {
		return err
	}
	// Judged while the message is still served in the newer protocol:
	// once it is not, the replica may take it at any moment.
	_, acks, _ := r.since(m)
	p, _, err := r.holds(ctx, "p005")
	mu.Lock()
	flip = false
	mu.Unlock()
	if slices.Contains(acks, id) {
		return fmt.Errorf("the replica acknowledged message %d, which speaks a newer protocol than its own", id)
	}
	if err != nil {
		return err
	}
	if p.price != before.price {
		return fmt.Errorf("the replica applied message %d, which speaks a newer protocol (products row p005 holds price %d, want %d still)", id, p.price, before.price)
	}
	return r.eventually(ctx, func() (bool, string) {
		_, acks, _ := r.since(m)
		if !slices.Contains(acks, id) {
			return false, fmt.Sprintf("the replica did not acknowledge message %d once it came in its own protocol", id)
		}
		return r.inSync(ctx)
	})
}

func digestMismatch(ctx context.Context, r *run) error {
	m := r.mark()
	var once sync.Once
	r.p.hooks(func(msg *syncpb.ToReplica) verdict {
		var v verdict
		if msg.GetDown().GetSnapshot() != 0 || !carries(msg, "plost") {
			return v
		}
		once.Do(func() {
			out := proto.Clone(msg).(*syncpb.ToReplica)
			for _, t := range out.GetDown().GetTables() {
				if i := slices.IndexFunc(t.UpsertKeys, func(k []byte) bool { return bytes.Equal(k, productKey("plost")) }); i >= 0 {
					t.Upserts = slices.Delete(t.Upserts, i, i+1)
					t.UpsertKeys = slices.Delete(t.UpsertKeys, i, i+1)
				}
			}
			v.replace = out
		})
		return v
	}, nil, nil)
	if err := r.exec(ctx, `INSERT INTO kit.products (id, name, price) VALUES ('plost', 'lost on the way', 40), ('pkept', 'kept', 50)`); err != nil {
		return err
	}
	return r.eventually(ctx, func() (bool, string) {
		srv, acks, _ := r.since(m)
		provisioned := slices.ContainsFunc(srv, func(s served) bool { return s.original.GetEndSnapshot() != nil && slices.Contains(acks, s.id) })
		if !provisioned {
			return false, "the replica was not provisioned again after losing row plost: does it send digests (every MAGICSYNC_DIGESTS_EVERY), and are they right?"
		}
		return r.inSync(ctx)
	})
}

func restore(ctx context.Context, r *run) error {
	backup, err := r.o.backup(ctx)
	if err != nil {
		return fmt.Errorf("the kit could not back the head office up: %w", err)
	}
	if err := r.exec(ctx, `UPDATE kit.products SET price = 777 WHERE id = 'p007'`); err != nil {
		return err
	}
	id, err := r.writeReceipt(ctx, 4200)
	if err != nil {
		return err
	}
	if err := r.eventually(ctx, func() (bool, string) {
		if ok, err := r.filed(ctx, id); err != nil || !ok {
			return false, "the head office never filed receipt " + id
		}
		return r.inSync(ctx)
	}); err != nil {
		return err
	}
	m := r.mark()
	if err := r.o.restore(ctx, backup); err != nil {
		return fmt.Errorf("the kit could not restore the head office: %w", err)
	}
	return r.eventually(ctx, func() (bool, string) {
		srv, acks, _ := r.since(m)
		if !slices.ContainsFunc(srv, func(s served) bool { return s.original.GetEndSnapshot() != nil && slices.Contains(acks, s.id) }) {
			return false, "the replica was not provisioned again by the restored head office: does it say where it stands (applied, sha256) when it asks for its next message?"
		}
		if ok, err := r.filed(ctx, id); err != nil || !ok {
			return false, "the replica did not send receipt " + id + " again, which the restored head office lacks"
		}
		return r.inSync(ctx)
	})
}

// describe lists messages served, for a reason: "7 (down), 8 (filed)".
func describe(srv []served) string {
	var parts []string
	for _, s := range srv {
		kind := "down"
		switch {
		case s.original == nil:
			kind = "injected"
		case s.original.GetFiled() != nil:
			kind = "filed"
		case s.original.GetEndSnapshot() != nil:
			kind = "end of snapshot"
		case s.original.GetDown().GetSnapshot() != 0:
			kind = "snapshot part"
		}
		if s.body == nil {
			kind += ", dropped"
		}
		parts = append(parts, fmt.Sprintf("%d (%s)", s.id, kind))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// describeUps lists uploads, for a reason: "main/3 (503), main/4".
func describeUps(ups []upload) string {
	var parts []string
	for _, u := range ups {
		part := fmt.Sprintf("%s/%d", u.lane, u.seq)
		if u.status != 0 {
			part += fmt.Sprintf(" (%d)", u.status)
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
