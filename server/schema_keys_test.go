package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
)

// Barcode is a catalog row pointing at its product, for the Schema's
// foreign keys.
type Barcode struct {
	Code      string    `db:"code" sync:"key"`
	ProductID uuid.UUID `db:"product_id"`
}

// SyncTable declares shop.barcodes.
func (Barcode) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "barcodes", Mirror: magicsync.Catalog, Sync: magicsync.Broadcast()}
}

// ReceiptLine is a record pointing at its receipt (two columns) and at the
// product sold; its server-side column audited_by, which it leaves out,
// points at a product too.
type ReceiptLine struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	ReceiptID  uuid.UUID `db:"receipt_id"`
	ProductID  uuid.UUID `db:"product_id"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

// SyncTable declares shop.receipt_lines.
func (ReceiptLine) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "receipt_lines", Mirror: magicsync.Record, Origin: "register_id",
		Unmirrored: []string{"audited_by"}}
}

// keysDDL adds the tables above to the shop, with their foreign keys: to
// declared tables (listed), to the registers (not declared) and on a
// column the declaration leaves out (neither listed).
const keysDDL = `
CREATE TABLE shop.barcodes (code text PRIMARY KEY, product_id uuid NOT NULL REFERENCES shop.products (id));
CREATE TABLE shop.receipt_lines (register_id uuid NOT NULL REFERENCES shop.registers (id), id uuid NOT NULL,
	receipt_id uuid NOT NULL, product_id uuid NOT NULL, changed_at timestamptz NOT NULL,
	audited_by uuid REFERENCES shop.products (id),
	PRIMARY KEY (register_id, id),
	CONSTRAINT a_line_of_a_receipt FOREIGN KEY (register_id, receipt_id) REFERENCES shop.receipts (register_id, id),
	CONSTRAINT b_line_of_a_product FOREIGN KEY (product_id) REFERENCES shop.products (id));
`

// A replica that creates its tables from the Schema learns their foreign
// keys from it: those among the declared tables, columns in the key's
// order, and no key to a table or on a column it does not hold.
func TestTheSchemaCarriesTheShopsForeignKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, shopserver.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, keysDDL); err != nil {
		t.Fatal(err)
	}
	codecs := shoptest.Codecs(t, shoptest.Product{}, Barcode{}, shoptest.Receipt{}, ReceiptLine{}, shoptest.Setting{})
	opts := server.Options{Replicas: shoptest.Replicas}
	shopserver.InstallTriggers(t, pool, codecs, opts)
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	var sc syncpb.Schema
	if err := proto.Unmarshal(s.Endpoint().Schema(), &sc); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, ts := range sc.GetTables() {
		for _, fk := range ts.GetForeignKeys() {
			got[ts.GetName()] = append(got[ts.GetName()], fmt.Sprintf("%v -> %s%v", fk.GetColumns(), fk.GetTable(), fk.GetReferences()))
		}
	}
	want := map[string][]string{
		"barcodes":      {"[product_id] -> products[id]"},
		"receipt_lines": {"[register_id receipt_id] -> receipts[register_id id]", "[product_id] -> products[id]"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the Schema's foreign keys:\n got %v\nwant %v", got, want)
	}
}
