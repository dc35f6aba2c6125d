package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// receiptTuple encodes a receipt as the replica sends it.
func receiptTuple(t *testing.T, sh *shop, r Receipt) (tuple, key []byte) {
	t.Helper()
	tc, err := codec.TableOf[Receipt](sh.codecs)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := tc.Values(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tc.EncodeRow(nil, vals, nil), []byte(tc.KeyOfRow(vals))
}

func receiptsUp(t *testing.T, sh *shop, rs ...Receipt) *syncpb.TableChanges {
	return shoptest.Changes(t, sh.codecs, rs...)
}

func (sh *shop) total(register, id uuid.UUID) (int64, bool) {
	sh.t.Helper()
	var total int64
	err := sh.pool.QueryRow(sh.ctx, `SELECT total_cents FROM shop.receipts WHERE register_id = $1 AND id = $2`, register, id).Scan(&total)
	if err != nil {
		return 0, false
	}
	return total, true
}

func (sh *shop) count(sql string, args ...any) int {
	sh.t.Helper()
	var n int
	if err := sh.pool.QueryRow(sh.ctx, sql, args...).Scan(&n); err != nil {
		sh.t.Fatal(err)
	}
	return n
}

func lastFiled(t *testing.T, f *fake) *syncpb.Filed {
	t.Helper()
	before := len(f.filed)
	f.sync()
	if len(f.filed) == before {
		t.Fatal("no Filed came down")
	}
	return f.filed[len(f.filed)-1]
}

func TestFiling(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	other := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 678901000, time.UTC)
	id := uuid.New()
	rec := Receipt{RegisterID: r.id, ID: id, TotalCents: 100, ChangedAt: t0}

	if err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, rec)}}); err != nil {
		t.Fatal(err)
	}
	if got, ok := sh.total(r.id, id); !ok || got != 100 {
		t.Fatalf("filed total %d %v, want 100", got, ok)
	}
	f := lastFiled(t, r)
	if f.Lane != "main" || f.Sequence != r.seq || len(f.Refused) != 0 {
		t.Errorf("Filed %v", f)
	}

	// Newer wins.
	newer := rec
	newer.TotalCents, newer.ChangedAt = 200, t0.Add(time.Second)
	if err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, newer)}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := sh.total(r.id, id); got != 200 {
		t.Errorf("after a newer version: %d, want 200", got)
	}
	// Older and equal change nothing.
	for _, v := range []time.Time{t0, t0.Add(time.Second)} {
		old := rec
		old.TotalCents, old.ChangedAt = 999, v
		if err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, old)}}); err != nil {
			t.Fatal(err)
		}
		if got, _ := sh.total(r.id, id); got != 200 {
			t.Errorf("after version %v: %d, want 200", v, got)
		}
	}
	// Resent after a provisioning: taken whatever the version.
	resent := rec
	resent.TotalCents = 150
	if err := r.send(&syncpb.Up{Resent: true, Tables: []*syncpb.TableChanges{receiptsUp(t, sh, resent)}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := sh.total(r.id, id); got != 150 {
		t.Errorf("after a resend: %d, want 150", got)
	}

	// Another replica's row is refused, and nothing of it written.
	foreign := Receipt{RegisterID: other.id, ID: uuid.New(), TotalCents: 5, ChangedAt: t0}
	mine := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: 6, ChangedAt: t0}
	if err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, foreign, mine)}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := sh.total(other.id, foreign.ID); ok {
		t.Error("a foreign row was written")
	}
	if _, ok := sh.total(r.id, mine.ID); !ok {
		t.Error("the replica's own row beside a foreign one was not written")
	}
	f = lastFiled(t, r)
	if len(f.Refused) != 1 || !strings.Contains(f.Refused[0].Reason, "not the sending replica") {
		t.Errorf("Filed %v: want the foreign row refused", f)
	}
	// A catalog row, a row the database refuses, and one that does not
	// decode are refused; the rest is filed.
	bad := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: -1, ChangedAt: t0}
	good := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: 7, ChangedAt: t0}
	part := receiptsUp(t, sh, bad, good)
	part.Upserts = append(part.Upserts, []byte{0x05, 0xff})
	part.UpsertKeys = append(part.UpsertKeys, part.UpsertKeys[0])
	catalog := &syncpb.TableChanges{Table: "products", Deletes: [][]byte{part.UpsertKeys[0]}}
	if err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{part, catalog}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := sh.total(r.id, good.ID); !ok {
		t.Error("a good row beside bad ones was not filed")
	}
	if _, ok := sh.total(r.id, bad.ID); ok {
		t.Error("a row the database refuses was written")
	}
	f = lastFiled(t, r)
	if len(f.Refused) != 3 {
		t.Errorf("Filed %v: want 3 refused", f)
	}

	// The same upload twice changes nothing, and adds no confirmation to
	// the one queued: confirmations of a lane merge while they wait.
	again := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: 8, ChangedAt: t0}
	if err := r.sendSeq(1000, &syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, again)}}); err != nil {
		t.Fatal(err)
	}
	sh.exec(`UPDATE shop.receipts SET total_cents = 9 WHERE id = $1`, again.ID)
	if err := r.sendSeq(1000, &syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, again)}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := sh.total(r.id, again.ID); got != 9 {
		t.Errorf("a repeated upload changed the row: %d", got)
	}
	before := len(r.filed)
	r.sync()
	if len(r.filed)-before != 1 || r.filed[len(r.filed)-1].Sequence != 1000 {
		t.Errorf("want one Filed of sequence 1000, got %v", r.filed[before:])
	}

	// Deletes: its own rows only.
	otherRow := Receipt{RegisterID: other.id, ID: uuid.New(), TotalCents: 1, ChangedAt: t0}
	if err := other.send(&syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, otherRow)}}); err != nil {
		t.Fatal(err)
	}
	_, mineKey := receiptTuple(t, sh, mine)
	_, otherKey := receiptTuple(t, sh, otherRow)
	if err := r.send(&syncpb.Up{Tables: []*syncpb.TableChanges{{Table: "receipts", Deletes: [][]byte{mineKey, otherKey}}}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := sh.total(r.id, mine.ID); ok {
		t.Error("the replica's delete of its own row was not filed")
	}
	if _, ok := sh.total(other.id, otherRow.ID); !ok {
		t.Error("a replica deleted another's row")
	}

	// Status counts what was filed and what was refused.
	st := statusOf(t, sh, r.id)
	var filed int
	for _, ts := range st.Tables {
		if ts.Table == "receipts" {
			filed = ts.Filed
		}
	}
	if filed < 5 {
		t.Errorf("status says %d receipts filed", filed)
	}
	if len(st.Rejected) < 4 {
		t.Errorf("status rejected %v", st.Rejected)
	}
}

func TestReceiveRefusesForGood(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	other := sh.register(sh.shopA)
	body, err := wire.EncodeToServer(&syncpb.ToServer{Replica: r.id[:], Lane: "main", Sequence: 1, Up: &syncpb.Up{}})
	if err != nil {
		t.Fatal(err)
	}
	unknown := uuid.New()
	unknownBody, _ := wire.EncodeToServer(&syncpb.ToServer{Replica: unknown[:], Lane: "main", Sequence: 1, Up: &syncpb.Up{}})
	for _, c := range []struct {
		name    string
		replica uuid.UUID
		lane    string
		body    []byte
		is      error
	}{
		{"malformed", r.id, "main", []byte{0xff, 0xff}, wire.ErrMalformed},
		{"another replica's", other.id, "main", body, server.ErrPermanent},
		{"another lane", r.id, "telemetry", body, server.ErrPermanent},
		{"unknown replica", unknown, "main", unknownBody, server.ErrUnknownReplica},
	} {
		err := sh.s.Endpoint().Receive(sh.ctx, c.replica, c.lane, c.body)
		if !errors.Is(err, server.ErrPermanent) || !errors.Is(err, c.is) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// A newer protocol: errors.As finds the wire's error.
	raw := append([]byte{0x08, byte(wire.Protocol + 1)}, body[2:]...)
	err = sh.s.Endpoint().Receive(sh.ctx, r.id, "main", raw)
	var np *magicsync.ProtocolError
	if !errors.As(err, &np) || !errors.Is(err, server.ErrPermanent) {
		t.Errorf("newer protocol: %v", err)
	}
}

// An upload whose sequence was filed before the engine kept what uploads
// held cannot be told from a repeat: it is filed, for filing it again loses
// nothing, and taking it for a repeat could lose rows.
func TestUploadOverAFilingWithoutHashIsFiled(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	if _, err := sh.pool.Exec(sh.ctx, `INSERT INTO public.sync_filed (replica, lane, sequence, filed) VALUES ($1, 'main', 1, '\x')`, r.id); err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	rec := Receipt{RegisterID: r.id, ID: id, TotalCents: 100, ChangedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err := r.sendSeq(1, &syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, rec)}}); err != nil {
		t.Fatal(err)
	}
	if got, ok := sh.total(r.id, id); !ok || got != 100 {
		t.Fatalf("filed total %d %v; want the receipt filed", got, ok)
	}
}

// When filing fails for a reason that passes — the caller's context
// cancelled or out of time (here while another transaction holds the
// replica), the server's pool closed — Receive's error does not wrap
// ErrPermanent, so a transport answers "retry later"; nothing is filed,
// and the same upload sent again once the database is reachable is filed.
func TestReceiveFailsTransientlyWhenTheDatabaseIsOutOfReach(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	upload := func(seq uint64) ([]byte, uuid.UUID) {
		rec := Receipt{RegisterID: r.id, ID: uuid.New(), TotalCents: int64(seq), ChangedAt: t0}
		body, err := wire.EncodeToServer(&syncpb.ToServer{Replica: r.id[:], Lane: "main", Sequence: seq,
			Up: &syncpb.Up{Tables: []*syncpb.TableChanges{receiptsUp(t, sh, rec)}}})
		if err != nil {
			t.Fatal(err)
		}
		return body, rec.ID
	}

	// A second server over its own pool, to close.
	closedPool, err := pgxpool.NewWithConfig(sh.ctx, sh.pool.Config())
	if err != nil {
		t.Fatal(err)
	}
	closed, err := server.New(sh.ctx, closedPool, sh.codecs, shopOptions)
	if err != nil {
		t.Fatal(err)
	}
	closedPool.Close()

	for i, c := range []struct {
		name string
		recv func(body []byte) error
		is   error // also wrapped, when not nil
	}{
		{"the context cancelled", func(body []byte) error {
			ctx, cancel := context.WithCancel(sh.ctx)
			cancel()
			return sh.s.Endpoint().Receive(ctx, r.id, "main", body)
		}, context.Canceled},
		{"the deadline passing while the replica is locked", func(body []byte) error {
			tx, err := sh.pool.Begin(sh.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(sh.ctx) //nolint:errcheck
			if _, err := tx.Exec(sh.ctx, `SELECT 1 FROM public.sync_replicas WHERE id = $1 FOR UPDATE`, r.id); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(sh.ctx, 300*time.Millisecond)
			defer cancel()
			return sh.s.Endpoint().Receive(ctx, r.id, "main", body)
		}, context.DeadlineExceeded},
		{"the pool closed", func(body []byte) error {
			return closed.Endpoint().Receive(sh.ctx, r.id, "main", body)
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			body, id := upload(uint64(100 + i))
			err := c.recv(body)
			if err == nil {
				t.Fatal("Receive succeeded")
			}
			if errors.Is(err, server.ErrPermanent) {
				t.Errorf("Receive: %v: wraps ErrPermanent, so the replica would give the upload up", err)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("Receive: %v: want it to wrap %v", err, c.is)
			}
			if _, ok := sh.total(r.id, id); ok {
				t.Error("the failed upload was filed")
			}
			if err := sh.s.Endpoint().Receive(sh.ctx, r.id, "main", body); err != nil {
				t.Fatalf("sent again: %v", err)
			}
			if _, ok := sh.total(r.id, id); !ok {
				t.Error("the upload sent again was not filed")
			}
		})
	}
}
