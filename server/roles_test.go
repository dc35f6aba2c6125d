package server_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// An item: a broadcast catalog with a column the database computes, one
// set once, and a server column the struct leaves out.
type Item struct {
	ID         uuid.UUID `db:"id" sync:"key"`
	PriceCents int64     `db:"price_cents"`
	Qty        int64     `db:"qty"`
	TotalCents int64     `db:"total_cents" sync:"generated"`
	CreatedAt  time.Time `db:"created_at" sync:"created"`
	UpdatedAt  time.Time `db:"updated_at" sync:"version"`
}

func (Item) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "items", Mirror: magicsync.Catalog, Sync: magicsync.Broadcast(),
		Unmirrored: []string{"cost_cents"}}
}

// A ticket: a record filed from registers, with the same three kinds of
// column.
type Ticket struct {
	RegisterID   uuid.UUID `db:"register_id" sync:"key"`
	ID           uuid.UUID `db:"id" sync:"key"`
	AmountCents  int64     `db:"amount_cents"`
	DoubledCents int64     `db:"doubled_cents" sync:"generated"`
	OpenedAt     time.Time `db:"opened_at" sync:"created"`
	ChangedAt    time.Time `db:"changed_at" sync:"version"`
}

func (Ticket) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "tickets", Mirror: magicsync.Record, Origin: "register_id",
		Unmirrored: []string{"checked"}}
}

const rolesSchema = `
CREATE TABLE shop.items (id uuid PRIMARY KEY, price_cents bigint NOT NULL, qty bigint NOT NULL,
	total_cents bigint GENERATED ALWAYS AS (price_cents * qty) STORED,
	cost_cents bigint NOT NULL DEFAULT 0,
	created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE shop.tickets (register_id uuid NOT NULL, id uuid NOT NULL, amount_cents bigint NOT NULL,
	doubled_cents bigint GENERATED ALWAYS AS (amount_cents * 2) STORED,
	checked bool NOT NULL DEFAULT false,
	opened_at timestamptz NOT NULL, changed_at timestamptz NOT NULL, PRIMARY KEY (register_id, id));
`

// newRolesShop is the shop with items and tickets declared beside the rest.
func newRolesShop(t *testing.T) *shop {
	t.Helper()
	ctx := context.Background()
	pool := newCapturePool(t)
	if _, err := pool.Exec(ctx, rolesSchema); err != nil {
		t.Fatal(err)
	}
	codecs, err := magicsync.NewCodecs(Product{}, Currency{}, Task{}, Receipt{}, Item{}, Ticket{})
	if err != nil {
		t.Fatal(err)
	}
	return openShop(t, pool, codecs)
}

// tableParts are the parts about one table of the messages from the i-th on.
func tableParts(f *fake, from int, table string) []*syncpb.TableChanges {
	var out []*syncpb.TableChanges
	for _, m := range f.msgs[from:] {
		for _, tc := range m.GetDown().GetTables() {
			if tc.Table == table {
				out = append(out, tc)
			}
		}
	}
	return out
}

// A catalog's messages carry its mirrored columns, the created one with
// it, but not the generated column (the replica's database computes its
// own) nor an unmirrored one; a change to an unmirrored column alone sends
// nothing; and the server's digests cover what the replica holds.
func TestCatalogMessagesLeaveOutGeneratedAndUnmirroredColumns(t *testing.T) {
	t.Parallel()
	sh := newRolesShop(t)
	r := sh.register(sh.shopA)
	created := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	updated := created.Add(time.Hour)
	id := uuid.New()
	sh.exec(`INSERT INTO shop.items (id, price_cents, qty, cost_cents, created_at, updated_at) VALUES ($1, 300, 2, 111, $2, $3)`, id, created, updated)
	sh.pass()
	want := []string{"id", "price_cents", "qty", "created_at", "updated_at"}
	check := func(stage string, from int, qty int64) {
		t.Helper()
		parts := tableParts(r, from, "items")
		if len(parts) != 1 || len(parts[0].Upserts) != 1 {
			t.Fatalf("%s: items parts %v, want one upsert", stage, parts)
		}
		p := parts[0]
		if !slices.Equal(p.Columns, want) {
			t.Errorf("%s: columns %v, want %v", stage, p.Columns, want)
		}
		vals, err := wire.DecodeTuple(p.Upserts[0], nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(vals) != len(want) {
			t.Fatalf("%s: a tuple of %d values for %d columns", stage, len(vals), len(want))
		}
		if vals[1].I != 300 || vals[2].I != qty || vals[3].Kind != wire.Time || vals[3].I != created.UnixMicro() {
			t.Errorf("%s: values %v, want price 300, qty %d, created %v", stage, vals, qty, created)
		}
	}
	r.sync() // the provisioning, paged from what the planner logged
	check("provisioning", 0, 2)

	before := len(r.msgs)
	sh.exec(`UPDATE shop.items SET qty = 5, updated_at = $2 WHERE id = $1`, id, updated.Add(time.Hour))
	sh.pass()
	r.sync() // the change, built from the log
	check("change", before, 5)

	before = len(r.msgs)
	sh.exec(`UPDATE shop.items SET cost_cents = 222 WHERE id = $1`, id)
	sh.pass()
	if n := r.sync(); n != 0 {
		t.Errorf("a change of the unmirrored column alone sent %d messages: %v", n, tableParts(r, before, "items"))
	}

	if err := r.send(&syncpb.Up{LastApplied: r.applied, Digests: []*syncpb.Digest{r.digest("items")}}); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, sh, r.id); st.Provisioning {
		t.Errorf("the replica's digest of items disagrees with the server's: %s", st.ProvisionReason)
	}
}

// ticketUp encodes tickets as a replica sends them: every column but the
// generated one, or, with generated, that too (as a replica of an older
// declaration might).
func ticketUp(t *testing.T, sh *shop, generated bool, ts ...Ticket) *syncpb.TableChanges {
	t.Helper()
	tc, err := codec.TableOf[Ticket](sh.codecs)
	if err != nil {
		t.Fatal(err)
	}
	var idx []int
	for i, c := range tc.Columns {
		if generated || !c.Generated {
			idx = append(idx, i)
		}
	}
	part := &syncpb.TableChanges{Table: "tickets", Columns: tc.ColumnNames(idx)}
	for _, tk := range ts {
		vals, err := tc.Values(tk, nil)
		if err != nil {
			t.Fatal(err)
		}
		part.Upserts = append(part.Upserts, tc.EncodeRow(nil, vals, idx))
		part.UpsertKeys = append(part.UpsertKeys, []byte(tc.KeyOfRow(vals)))
	}
	return part
}

type ticketRow struct {
	amount, doubled int64
	opened          time.Time
	checked         bool
}

func (r ticketRow) String() string {
	return fmt.Sprintf("{amount %d, doubled %d, opened %s, checked %v}", r.amount, r.doubled, r.opened.UTC().Format(time.RFC3339Nano), r.checked)
}

func (sh *shop) ticket(id uuid.UUID) ticketRow {
	sh.t.Helper()
	var r ticketRow
	if err := sh.pool.QueryRow(sh.ctx, `SELECT amount_cents, doubled_cents, opened_at, checked FROM shop.tickets WHERE id = $1`, id).
		Scan(&r.amount, &r.doubled, &r.opened, &r.checked); err != nil {
		sh.t.Fatal(err)
	}
	return r
}

// Filing a record sets its created column on insert only: a newer version
// (or one resent after a provisioning) saying otherwise changes the rest of
// the row but not that; the generated column is left to the database, even
// when a replica sends a value for it; an unmirrored column keeps what the
// head office put there.
func TestFilingSetsCreatedOnceAndLeavesGeneratedAndUnmirroredToTheDatabase(t *testing.T) {
	t.Parallel()
	sh := newRolesShop(t)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	t0 := time.Date(2025, 3, 4, 5, 6, 7, 890123000, time.UTC)
	id := uuid.New()
	send := func(stage string, up *syncpb.Up) {
		t.Helper()
		if err := r.send(up); err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
		if f := lastFiled(t, r); len(f.Refused) != 0 {
			t.Fatalf("%s: refused %v", stage, f.Refused)
		}
	}
	expect := func(stage string, want ticketRow) {
		t.Helper()
		got := sh.ticket(id)
		if got.amount != want.amount || got.doubled != want.doubled || !got.opened.Equal(want.opened) || got.checked != want.checked {
			t.Errorf("%s: ticket %v, want %v", stage, got, want)
		}
	}

	send("insert", &syncpb.Up{Tables: []*syncpb.TableChanges{ticketUp(t, sh, false,
		Ticket{RegisterID: r.id, ID: id, AmountCents: 100, OpenedAt: t0, ChangedAt: t0})}})
	expect("insert", ticketRow{amount: 100, doubled: 200, opened: t0})

	sh.exec(`UPDATE shop.tickets SET checked = true WHERE id = $1`, id)
	send("newer version", &syncpb.Up{Tables: []*syncpb.TableChanges{ticketUp(t, sh, false,
		Ticket{RegisterID: r.id, ID: id, AmountCents: 150, OpenedAt: t0.Add(time.Hour), ChangedAt: t0.Add(time.Second)})}})
	expect("newer version", ticketRow{amount: 150, doubled: 300, opened: t0, checked: true})

	send("with the generated column", &syncpb.Up{Tables: []*syncpb.TableChanges{ticketUp(t, sh, true,
		Ticket{RegisterID: r.id, ID: id, AmountCents: 160, DoubledCents: 1, OpenedAt: t0.Add(2 * time.Hour), ChangedAt: t0.Add(2 * time.Second)})}})
	expect("with the generated column", ticketRow{amount: 160, doubled: 320, opened: t0, checked: true})

	send("resent", &syncpb.Up{Resent: true, Tables: []*syncpb.TableChanges{ticketUp(t, sh, false,
		Ticket{RegisterID: r.id, ID: id, AmountCents: 170, OpenedAt: t0.Add(3 * time.Hour), ChangedAt: t0})}})
	expect("resent", ticketRow{amount: 170, doubled: 340, opened: t0, checked: true})

	// A new row sent with the generated column is inserted, computed.
	other := uuid.New()
	send("insert with the generated column", &syncpb.Up{Tables: []*syncpb.TableChanges{ticketUp(t, sh, true,
		Ticket{RegisterID: r.id, ID: other, AmountCents: 5, DoubledCents: 99, OpenedAt: t0, ChangedAt: t0})}})
	if got := sh.ticket(other); got.doubled != 10 || !got.opened.Equal(t0) {
		t.Errorf("insert with the generated column: %v, want doubled 10, opened %v", got, t0)
	}
}
