package replica

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Gadget is a catalog row of every kind CreateTables types, nullable and
// replica-owned columns among them.
type Gadget struct {
	ID     uuid.UUID  `db:"id" sync:"key"`
	Name   string     `db:"name"`
	Count  int64      `db:"count"`
	Weight float64    `db:"weight"`
	OnSale bool       `db:"on_sale"`
	Blob   []byte     `db:"blob"`
	Seen   *time.Time `db:"seen"`
	Shelf  string     `db:"shelf" sync:"replica_owned"`
}

func (Gadget) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "gadgets", Mirror: magicsync.Catalog}
}

// Made is a catalog with a generated column, whose expression no
// declaration holds.
type Made struct {
	ID    int64  `db:"id" sync:"key"`
	Upper string `db:"upper" sync:"generated"`
}

func (Made) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "made", Mirror: magicsync.Catalog}
}

// headOfficeSchema is the Schema message of a head office whose images
// point at products, with foreign keys this build cannot make: on a column
// it does not declare, and to a table it does not declare.
func headOfficeSchema(t *testing.T) []byte {
	t.Helper()
	b, err := proto.Marshal(&syncpb.Schema{Tables: []*syncpb.TableSchema{
		{Name: "images", ForeignKeys: []*syncpb.ForeignKey{
			{Columns: []string{"product_id"}, Table: "products", References: []string{"id"}},
			{Columns: []string{"maker_id"}, Table: "products", References: []string{"id"}},
			{Columns: []string{"product_id"}, Table: "warehouses", References: []string{"id"}},
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// CreateTables makes every declared table the database lacks, on either
// driver, so that Install and New take them and a message of every kind
// applies and reads back; it keeps the head office's foreign keys it can,
// leaves a table that exists as it is, and asks for the schema only when
// a table is missing.
func TestCreateTablesMakesTheTablesTheEngineTakes(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		ctx := context.Background()
		db := sqlitetest.Open(t, d)
		// The host made products itself, with a CHECK of its own.
		mustExec(t, db, productsSchema)
		codecs, err := magicsync.NewCodecs(Product{}, Image{}, Receipt{}, Gadget{})
		if err != nil {
			t.Fatal(err)
		}
		asked := 0
		schema := func(context.Context) ([]byte, error) { asked++; return headOfficeSchema(t), nil }
		created, err := CreateTables(ctx, db, codecs, schema)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"images", "receipts", "gadgets"}; !slices.Equal(created, want) || asked != 1 {
			t.Fatalf("CreateTables created %v, asking for the schema %d times; want %v, once", created, asked, want)
		}
		var check string
		if err := db.QueryRowContext(ctx, `SELECT sql FROM sqlite_schema WHERE name = 'products'`).Scan(&check); err != nil || !strings.Contains(check, "CHECK") {
			t.Fatalf("products after CreateTables: %q (%v); want the host's own, untouched", check, err)
		}
		var fks []string
		rows, err := db.QueryContext(ctx, `SELECT "table" || '.' || "to" || ' from ' || "from" FROM pragma_foreign_key_list('images')`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var fk string
			if err := rows.Scan(&fk); err != nil {
				t.Fatal(err)
			}
			fks = append(fks, fk)
		}
		rows.Close()
		if want := []string{"products.id from product_id"}; !slices.Equal(fks, want) {
			t.Errorf("the foreign keys of images: %v; want %v, the others naming what this build does not declare", fks, want)
		}
		notNull := map[string]bool{}
		rows, err = db.QueryContext(ctx, `SELECT name, "notnull" FROM pragma_table_info('gadgets')`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name string
			var nn bool
			if err := rows.Scan(&name, &nn); err != nil {
				t.Fatal(err)
			}
			notNull[name] = nn
		}
		rows.Close()
		if !notNull["name"] || !notNull["on_sale"] || notNull["seen"] || notNull["shelf"] {
			t.Errorf("gadgets' NOT NULL columns: %v; want name and on_sale, not seen (nullable) nor shelf (replica-owned)", notNull)
		}

		if err := Install(ctx, db, codecs); err != nil {
			t.Fatalf("Install over the tables made: %v", err)
		}
		r, err := New(ctx, db, codecs, Me(register), newRecorder(), Settings{DigestsEvery: -1, Logger: discard()})
		if err != nil {
			t.Fatalf("New over the tables made: %v", err)
		}
		defer r.Close()
		b := builder{t: t, codecs: codecs}
		seen := time.Date(2026, 12, 5, 9, 30, 0, 123000000, time.UTC)
		p := Product{ID: uuid.New(), Name: "Coffee", PriceCents: 250, UpdatedAt: seen}
		img := Image{ID: uuid.New(), ProductID: p.ID, URL: "coffee.png"}
		g := Gadget{ID: uuid.New(), Name: "Till roll", Count: 3, Weight: 0.25, OnSale: true, Blob: []byte{0, 1, 2}, Seen: &seen}
		if _, err := r.Endpoint().Receive(ctx, b.down(1, b.upserts(p), b.upserts(img), b.upserts(g))); err != nil {
			t.Fatalf("a message of every kind: %v", err)
		}
		var back Gadget
		var at time.Time
		if err := db.QueryRowContext(ctx, `SELECT name, count, weight, on_sale, blob, seen FROM gadgets WHERE id = ?`, g.ID.String()).Scan(
			&back.Name, &back.Count, &back.Weight, &back.OnSale, &back.Blob, &at); err != nil {
			t.Fatal(err)
		}
		if back.Name != g.Name || back.Count != g.Count || back.Weight != g.Weight || !back.OnSale || string(back.Blob) != string(g.Blob) || !at.Equal(seen) {
			t.Errorf("the gadget read back: %+v, seen %v; want %+v", back, at, g)
		}

		created, err = CreateTables(ctx, db, codecs, schema)
		if err != nil || created != nil || asked != 1 {
			t.Fatalf("CreateTables again = %v, %v, asking %d times in all; want nothing made, the schema not asked again", created, err, asked)
		}
	})
}

// Without a schema, the tables come without foreign keys; a missing table
// with a generated column is refused, naming it, and nothing is made; a
// schema that cannot be had is an error, and nothing is made either.
func TestCreateTablesRefusesWhatItCannotMake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqlitetest.Open(t, sqlitetest.Modernc())
	codecs, err := magicsync.NewCodecs(Product{}, Image{})
	if err != nil {
		t.Fatal(err)
	}
	offline := errors.New("the head office is out of reach")
	if _, err := CreateTables(ctx, db, codecs, func(context.Context) ([]byte, error) { return nil, offline }); !errors.Is(err, offline) {
		t.Fatalf("CreateTables with the schema out of reach = %v; want its error", err)
	}
	if n := count(t, db, `SELECT count(*) FROM sqlite_schema WHERE type = 'table'`); n != 0 {
		t.Fatalf("%d tables made though the schema could not be had; want none", n)
	}
	if created, err := CreateTables(ctx, db, codecs, nil); err != nil || len(created) != 2 {
		t.Fatalf("CreateTables without a schema = %v, %v; want both tables", created, err)
	}
	if n := count(t, db, `SELECT count(*) FROM pragma_foreign_key_list('images')`); n != 0 {
		t.Errorf("images has %d foreign keys without a schema; want none", n)
	}
	made, err := magicsync.NewCodecs(Made{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CreateTables(ctx, db, made, nil); err == nil || !strings.Contains(err.Error(), `"upper" is generated`) {
		t.Fatalf("CreateTables of a table with a generated column = %v; want a refusal naming it", err)
	}
}
