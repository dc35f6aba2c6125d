package server_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// upload encodes an upload of the fake replica on lane, as it sends it.
func (f *fake) upload(lane string, seq uint64, rs ...Receipt) []byte {
	f.sh.t.Helper()
	body, err := wire.EncodeToServer(&syncpb.ToServer{Replica: f.id[:], Lane: lane, Sequence: seq,
		Up: &syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(f.sh.t.(*testing.T), f.sh, rs...)}}})
	if err != nil {
		f.sh.t.Fatal(err)
	}
	return body
}

// deliver hands an upload of lane to the server, which must file it.
func (f *fake) deliver(lane string, body []byte) {
	f.sh.t.Helper()
	if err := f.sh.s.Endpoint().Receive(f.sh.ctx, f.id, lane, body); err != nil {
		f.sh.t.Fatal(err)
	}
}

// sale is a new receipt of the fake replica.
func (f *fake) sale(total int64) Receipt {
	return Receipt{RegisterID: f.id, ID: uuid.New(), TotalCents: total, ChangedAt: time.Now().UTC().Truncate(time.Microsecond)}
}

// queuedMsg is a message waiting in a replica's outbox.
type queuedMsg struct {
	id uint64
	m  *syncpb.ToReplica
}

// outbox lists what waits for the replica, oldest first.
func (f *fake) outbox() []queuedMsg {
	f.sh.t.Helper()
	rows, err := f.sh.pool.Query(f.sh.ctx, `SELECT id, body FROM public.sync_outbox WHERE replica = $1 ORDER BY id`, f.id)
	if err != nil {
		f.sh.t.Fatal(err)
	}
	defer rows.Close()
	var out []queuedMsg
	for rows.Next() {
		var id int64
		var body []byte
		if err := rows.Scan(&id, &body); err != nil {
			f.sh.t.Fatal(err)
		}
		m, err := wire.DecodeToReplica(body)
		if err != nil {
			f.sh.t.Fatal(err)
		}
		out = append(out, queuedMsg{uint64(id), m})
	}
	if err := rows.Err(); err != nil {
		f.sh.t.Fatal(err)
	}
	return out
}

// confirms lists the sequences a Filed confirms, ascending.
func confirms(f *syncpb.Filed) []uint64 {
	out := append([]uint64{f.GetSequence()}, f.GetEarlier()...)
	slices.Sort(out)
	return out
}

func describe(q []queuedMsg) string {
	var s []string
	for _, m := range q {
		if f := m.m.GetFiled(); f != nil {
			s = append(s, fmt.Sprintf("%d: Filed %s %v (%d refused)", m.id, f.Lane, confirms(f), len(f.Refused)))
		} else {
			s = append(s, fmt.Sprintf("%d: %T", m.id, m.m.Body))
		}
	}
	return fmt.Sprint(s)
}

// Uploads of a lane filed while the replica fetches nothing leave one
// Filed of the lane waiting, which confirms them all, each with the rows
// refused in it; a Filed handed out and replaced meanwhile is applied
// harmlessly, and the merged one comes after it.
func TestUploadsWhileNotFetchingLeaveOneFiledPerLane(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()

	// Upload 1 holds a row the database refuses.
	refused := r.sale(-1)
	r.deliver("main", r.upload("main", 1, refused, r.sale(1)))
	for seq := uint64(2); seq <= 5; seq++ {
		r.deliver("main", r.upload("main", seq, r.sale(int64(seq))))
	}
	q := r.outbox()
	if len(q) != 1 || q[0].m.GetFiled() == nil {
		t.Fatalf("after 5 uploads of a lane, queued %s; want one Filed", describe(q))
	}
	f := q[0].m.GetFiled()
	if f.Lane != "main" || f.Sequence != 5 || !slices.Equal(f.Earlier, []uint64{1, 2, 3, 4}) {
		t.Errorf("Filed of lane %q, sequence %d, earlier %v; want main, 5, [1 2 3 4]", f.Lane, f.Sequence, f.Earlier)
	}
	_, key := receiptTuple(t, sh, refused)
	if len(f.Refused) != 1 || f.Refused[0].Message != 1 || string(f.Refused[0].Key) != string(key) {
		t.Errorf("refused %v; want the row of upload 1, naming sequence 1", f.Refused)
	}
	// Every upload's record waits for the merged message to be applied.
	if n := sh.count(`SELECT count(*) FROM public.sync_filed WHERE replica = $1 AND lane = 'main' AND msg = $2`, r.id, int64(q[0].id)); n != 5 {
		t.Errorf("%d of 5 uploads recorded as confirmed by message %d", n, q[0].id)
	}

	// Another lane has its own.
	r.deliver("other", r.upload("other", 1, r.sale(10)))
	r.deliver("other", r.upload("other", 2, r.sale(11)))
	if q := r.outbox(); len(q) != 2 || q[0].m.GetFiled().GetLane() != "main" || q[1].m.GetFiled().GetLane() != "other" ||
		!slices.Equal(confirms(q[1].m.GetFiled()), []uint64{1, 2}) {
		t.Fatalf("queued %s; want one Filed of each lane", describe(q))
	}
	before := len(r.filed)
	r.sync()
	if got := r.filed[before:]; len(got) != 2 {
		t.Fatalf("the replica got %d Filed; want 2", len(got))
	}

	// A Filed handed out, then replaced by a merged one as another upload
	// comes: the replica applies the one it got, then the merged one,
	// under a higher id.
	r.deliver("main", r.upload("main", 6, r.sale(6)))
	handed, ok := r.next(time.Second)
	if !ok || !slices.Equal(confirms(handed.GetFiled()), []uint64{6}) {
		t.Fatalf("handed out %v; want the Filed of 6", handed)
	}
	r.deliver("main", r.upload("main", 7, r.sale(7)))
	q = r.outbox()
	if len(q) != 1 || q[0].id <= handed.Id || !slices.Equal(confirms(q[0].m.GetFiled()), []uint64{6, 7}) {
		t.Fatalf("queued %s after message %d was handed out; want one Filed of 6 and 7 after it", describe(q), handed.Id)
	}
	r.apply(handed)
	if err := sh.s.Endpoint().Ack(sh.ctx, r.id, handed.Id); err != nil {
		t.Fatal(err)
	}
	before = len(r.filed)
	r.sync()
	if got := r.filed[before:]; len(got) != 1 || !slices.Equal(confirms(got[0]), []uint64{6, 7}) {
		t.Errorf("after the handed-out Filed, got %v; want the merged Filed of 6 and 7", got)
	}
}

// A repeated upload adds no message while a queued Filed confirms it;
// once every Filed was applied, repeats are confirmed again, in one.
func TestRepeatedUploadAddsNoConfirmation(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()

	one := r.upload("main", 1, r.sale(1))
	r.deliver("main", one)
	first := r.outbox()
	for range 5 {
		r.deliver("main", one)
	}
	if q := r.outbox(); len(q) != 1 || q[0].id != first[0].id {
		t.Fatalf("after repeats, queued %s; want only %s", describe(q), describe(first))
	}
	two := r.upload("main", 2, r.sale(2))
	r.deliver("main", two)
	r.deliver("main", one)
	r.deliver("main", two)
	if q := r.outbox(); len(q) != 1 || !slices.Equal(confirms(q[0].m.GetFiled()), []uint64{1, 2}) {
		t.Fatalf("queued %s; want one Filed of 1 and 2", describe(q))
	}
	if n := sh.count(`SELECT count(*) FROM shop.receipts WHERE register_id = $1`, r.id); n != 2 {
		t.Errorf("%d receipts filed; want 2", n)
	}
	r.sync()
	// Copies arriving late, after the replica applied their Filed, are
	// confirmed again — all in one message.
	for range 3 {
		r.deliver("main", one)
		r.deliver("main", two)
	}
	if q := r.outbox(); len(q) != 1 || !slices.Equal(confirms(q[0].m.GetFiled()), []uint64{1, 2}) {
		t.Fatalf("late copies queued %s; want one Filed of 1 and 2", describe(q))
	}
}

// With confirmations queued and uploads coming faster than the replica
// fetches, a catalog change comes after at most one Filed per lane.
func TestCatalogChangeWaitsForAtMostOneFiledPerLane(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	lanes := []string{"main", "other"}
	seq := map[string]uint64{}
	upload := func() {
		for _, l := range lanes {
			seq[l]++
			r.deliver(l, r.upload(l, seq[l], r.sale(int64(seq[l]))))
		}
	}
	for range 5 {
		upload()
	}
	sh.product(sh.shopA, "apple", 1)
	sh.pass()
	filedBefore := 0
	for range 20 {
		upload() // two more uploads before each fetch
		m, ok := r.next(time.Second)
		if !ok {
			t.Fatalf("nothing to fetch; queued %s", describe(r.outbox()))
		}
		r.apply(m)
		if err := sh.s.Endpoint().Ack(sh.ctx, r.id, m.Id); err != nil {
			t.Fatal(err)
		}
		if m.GetFiled() == nil {
			break
		}
		filedBefore++
	}
	r.expect("products", "apple")
	if filedBefore > len(lanes) {
		t.Errorf("%d Filed came before the catalog change; want at most one per lane (%d)", filedBefore, len(lanes))
	}
	// And the confirmations still all come.
	r.sync()
	got := map[string][]uint64{}
	for _, f := range r.filed {
		got[f.Lane] = append(got[f.Lane], confirms(f)...)
	}
	for _, l := range lanes {
		s := slices.Compact(slices.Sorted(slices.Values(got[l])))
		if len(s) != int(seq[l]) || s[0] != 1 || s[len(s)-1] != seq[l] {
			t.Errorf("lane %s: confirmed %v; want 1 to %d", l, s, seq[l])
		}
	}
}

// An upload delivered while a provisioning runs is confirmed before the
// parts queued after it: merging the lane's confirmations never moves one
// behind a part built later, so the confirmations flow between the parts
// instead of waiting for the provisioning's end.
func TestProvisioningWithUploadsBetweenParts(t *testing.T) {
	t.Parallel()
	sh := newShop(t, server.Options{MaxMessageBytes: 4096})
	sh.exec(`INSERT INTO shop.products (id, shop_id, name, price_cents)
		SELECT gen_random_uuid(), $1, 'p' || lpad(i::text, 4, '0'), i FROM generate_series(1, 300) i`, sh.shopA)
	sh.pass()
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(sh.ctx)
	go func() { done <- sh.s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r := sh.register(sh.shopA)
	// queuedAt[s] is the newest message queued once upload s was filed.
	queuedAt := map[uint64]uint64{}
	var seq uint64
	for ended := false; !ended; {
		seq++
		r.deliver("main", r.upload("main", seq, r.sale(int64(seq))))
		for _, q := range r.outbox() {
			queuedAt[seq] = max(queuedAt[seq], q.id)
		}
		m, ok := r.next(2 * time.Second)
		if !ok {
			t.Fatalf("nothing to fetch during the provisioning; queued %s", describe(r.outbox()))
		}
		r.apply(m)
		if err := sh.s.Endpoint().Ack(sh.ctx, r.id, m.Id); err != nil {
			t.Fatal(err)
		}
		ended = m.GetEndSnapshot() != nil
		if seq > 1000 {
			t.Fatal("no end to the provisioning")
		}
	}
	r.sync()
	parts, ends := 0, 0
	var order []string
	var late []string
	for i, m := range r.msgs {
		switch {
		case m.GetDown().GetSnapshot() != 0:
			parts++
			order = append(order, fmt.Sprintf("%d:part", m.Id))
		case m.GetEndSnapshot() != nil:
			ends++
			order = append(order, fmt.Sprintf("%d:end", m.Id))
		case m.GetFiled() != nil:
			order = append(order, fmt.Sprintf("%d:filed%v", m.Id, confirms(m.GetFiled())))
			for _, s := range confirms(m.GetFiled()) {
				for _, before := range r.msgs[:i] {
					if before.GetFiled() == nil && before.Id > queuedAt[s] {
						late = append(late, fmt.Sprintf("upload %d after message %d", s, before.Id))
						break
					}
				}
			}
		}
	}
	if parts < 5 || ends != 1 {
		t.Errorf("%d parts, %d ends; want several parts and one end", parts, ends)
	}
	if len(late) > 0 {
		t.Errorf("confirmed behind parts queued after the upload was filed: %v; applied %v", late, order)
	}
	if got := len(r.names("products")); got != 300 {
		t.Errorf("provisioned %d products, want 300", got)
	}
}

// Confirmations whose refused rows would make one message larger than
// MaxMessageBytes are not merged: each queued Filed stays within it, and
// every upload is confirmed once among them.
func TestMergedFiledStaysWithinTheMessageBound(t *testing.T) {
	t.Parallel()
	const bound = 4096
	sh := newShop(t, server.Options{MaxMessageBytes: bound})
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	// Each upload holds 5 rows the database refuses (some 900 bytes of
	// refusals), and one it files.
	for seq := uint64(1); seq <= 6; seq++ {
		rows := []Receipt{r.sale(int64(seq))}
		for range 5 {
			rows = append(rows, r.sale(-1))
		}
		r.deliver("main", r.upload("main", seq, rows...))
	}
	q := r.outbox()
	if len(q) < 2 || len(q) > 3 {
		t.Fatalf("queued %s; want the confirmations merged only as far as the bound allows", describe(q))
	}
	var seqs []uint64
	for _, m := range q {
		f := m.m.GetFiled()
		if f == nil {
			t.Fatalf("queued %s: only Filed", describe(q))
		}
		b, err := wire.EncodeToReplica(m.m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > bound {
			t.Errorf("message %d of %d bytes; the bound is %d", m.id, len(b), bound)
		}
		if len(f.Refused) != 5*len(confirms(f)) {
			t.Errorf("message %d confirms %v with %d refused rows; want 5 each", m.id, confirms(f), len(f.Refused))
		}
		t.Logf("message %d: %d bytes, confirms %v", m.id, len(b), confirms(f))
		seqs = append(seqs, confirms(f)...)
	}
	slices.Sort(seqs)
	if !slices.Equal(seqs, []uint64{1, 2, 3, 4, 5, 6}) {
		t.Errorf("confirmed %v; want each of 1 to 6 once", seqs)
	}
}
