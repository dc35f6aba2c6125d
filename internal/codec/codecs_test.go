// This file holds the tests of compiled tables (columns, their kinds,
// routes' members) and the row types the package's tests share.

package codec_test

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/wire"
)

func mustCodecs(t testing.TB, rows ...magicsync.Declarer) *magicsync.Codecs {
	t.Helper()
	c, err := magicsync.NewCodecs(rows...)
	if err != nil {
		t.Fatalf("NewCodecs: %v", err)
	}
	return c
}

func mustTable[T magicsync.Declarer](t testing.TB, c *magicsync.Codecs) *codec.TableCodec {
	t.Helper()
	tc, err := codec.TableOf[T](c)
	if err != nil {
		t.Fatalf("TableOf: %v", err)
	}
	return tc
}

// Accepted shapes.

type audit struct {
	CreatedAt time.Time `db:"created_at" sync:"created"`
	UpdatedAt time.Time `db:"updated_at" sync:"version"`
}

type Owner struct {
	OwnerName string `db:"owner_name"`
	Secret    string `db:"-"`
}

type flattened struct {
	ID int64 `db:"id"`
	audit
	Owner
	Note     string
	Cache    []string `db:"-"`
	internal int
}

func (flattened) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "flattened", Mirror: magicsync.Catalog}
}

func TestNewCodecsFlattensEmbeddedStructsSkipsDashAndLowercasesUntagged(t *testing.T) {
	c := mustCodecs(t, flattened{})
	tc := mustTable[flattened](t, c)
	var names, fields []string
	for _, col := range tc.Columns {
		names = append(names, col.Name)
		fields = append(fields, col.Field)
	}
	if want := []string{"id", "created_at", "updated_at", "owner_name", "note"}; !slices.Equal(names, want) {
		t.Errorf("column names = %q, want %q", names, want)
	}
	if want := []string{"ID", "audit.CreatedAt", "audit.UpdatedAt", "Owner.OwnerName", "Note"}; !slices.Equal(fields, want) {
		t.Errorf("column fields = %q, want %q", fields, want)
	}
	if got := tc.ColumnNames(nil); !slices.Equal(got, names) {
		t.Errorf("ColumnNames(nil) = %q, want %q", got, names)
	}
	if tc.VersionIndex != 2 || tc.CreatedIndex != 1 {
		t.Errorf("VersionIndex, CreatedIndex = %d, %d; want 2, 1 (the embedded fields)", tc.VersionIndex, tc.CreatedIndex)
	}
	if !slices.Equal(tc.Key, []string{"id"}) {
		t.Errorf("Key = %q, want [id]", tc.Key)
	}

	// Values and Fill reach through the embedded structs.
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	in := flattened{ID: 7, audit: audit{CreatedAt: at, UpdatedAt: at.Add(time.Hour)},
		Owner: Owner{OwnerName: "ann", Secret: "not mirrored"}, Note: "n", Cache: []string{"x"}, internal: 3}
	vals, err := tc.Values(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out flattened
	if err := tc.Fill(&out, vals); err != nil {
		t.Fatal(err)
	}
	want := in
	want.Secret, want.Cache, want.internal = "", nil, 0
	if !reflect.DeepEqual(out, want) {
		t.Errorf("Fill(Values(row)) = %+v, want %+v", out, want)
	}
}

func TestGroupedRouteParsesItsMembers(t *testing.T) {
	c := mustCodecs(t, product{})
	tc := mustTable[product](t, c)
	r := tc.Sync
	if r.Kind() != codec.RouteGrouped || r.Column() != "shop_id" || r.Members() != "shop.registers(id, shop_id)" {
		t.Fatalf("route = %v %q %q", r.Kind(), r.Column(), r.Members())
	}
	if got, want := r.String(), `grouped("shop.registers(id, shop_id)", "shop_id")`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	m, err := codec.ParseMembers(r.Members())
	if err != nil {
		t.Fatal(err)
	}
	if want := (codec.Members{Schema: "shop", Table: "registers", Replica: "id", Group: "shop_id"}); m != want {
		t.Errorf("ParseMembers = %+v, want %+v", m, want)
	}

	for _, tt := range []struct {
		in   string
		want codec.Members
	}{
		{"registers(id,shop_id)", codec.Members{Schema: "public", Table: "registers", Replica: "id", Group: "shop_id"}},
		{" shop . registers ( register_id , group_id )", codec.Members{Schema: "shop", Table: "registers", Replica: "register_id", Group: "group_id"}},
	} {
		got, err := codec.ParseMembers(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseMembers(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "shop.registers", "shop.registers(id)", "shop.registers(id, shop_id, x)",
		"a.b.c(id, g)", "shop.registers(id, )", "(id, g)", "shop.registers(id, g"} {
		if m, err := codec.ParseMembers(bad); err == nil {
			t.Errorf("ParseMembers(%q) = %+v, want an error", bad, m)
		}
	}
}

// The DESIGN.md declarations, shared with the value tests. The product is
// internal/shoptest's, which is the same: shoptest imports codec, but these
// tests are package codec_test, so importing it makes no cycle.

type product = shoptest.Product

type registerSetting struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	ID         uuid.UUID `db:"id" sync:"key"`
	Name       string    `db:"name"`
	Value      string    `db:"value" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

func (registerSetting) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "settings", Mirror: magicsync.Setting,
		Origin: "register_id", Apply: magicsync.IfUnchanged}
}

// Decimal is a decimal number in the manner of shopspring/decimal: a
// struct that binds as text through driver.Valuer and reads back through
// sql.Scanner. Its zero value is NULL.
type Decimal struct {
	digits string
}

func mustDecimal(s string) Decimal { return Decimal{digits: s} }

// Value binds the decimal as text, or NULL for the zero Decimal.
func (d Decimal) Value() (driver.Value, error) {
	if d.digits == "" {
		return nil, nil
	}
	return d.digits, nil
}

// Scan reads text, bytes, an integer or a float.
func (d *Decimal) Scan(src any) error {
	switch s := src.(type) {
	case nil:
		d.digits = ""
	case string:
		d.digits = s
	case []byte:
		d.digits = string(s)
	case int64:
		d.digits = fmt.Sprint(s)
	case float64:
		d.digits = fmt.Sprint(s)
	default:
		return fmt.Errorf("decimal: cannot scan %T", src)
	}
	return nil
}

// String spells the decimal.
func (d Decimal) String() string { return d.digits }

type (
	myInt    int32
	myString string
	myBytes  []byte
)

// allTypes has a field of every supported type.
type allTypes struct {
	ID  int64  `db:"id"`
	S   string `db:"s"`
	B   bool   `db:"b"`
	I   int    `db:"i"`
	I8  int8   `db:"i8"`
	I16 int16  `db:"i16"`
	I32 int32  `db:"i32"`
	I64 int64  `db:"i64"`
	U   uint   `db:"u"`
	U8  uint8  `db:"u8"`
	U16 uint16 `db:"u16"`
	U32 uint32 `db:"u32"`
	U64 uint64 `db:"u64"`
	F32 float32
	F64 float64   `db:"f64"`
	Bs  []byte    `db:"bs"`
	T   time.Time `db:"t"`
	UID uuid.UUID `db:"uid"`
	Dec Decimal   `db:"dec"`
	MI  myInt     `db:"mi"`
	MS  myString  `db:"ms"`
	MB  myBytes   `db:"mb"`

	PS   *string    `db:"ps"`
	PB   *bool      `db:"pb"`
	PI64 *int64     `db:"pi64"`
	PU8  *uint8     `db:"pu8"`
	PF64 *float64   `db:"pf64"`
	PT   *time.Time `db:"pt"`
	PUID *uuid.UUID `db:"puid"`
	PDec *Decimal   `db:"pdec"`

	NS    sql.NullString  `db:"ns"`
	NI64  sql.NullInt64   `db:"ni64"`
	NI32  sql.NullInt32   `db:"ni32"`
	NI16  sql.NullInt16   `db:"ni16"`
	NByte sql.NullByte    `db:"nbyte"`
	NF64  sql.NullFloat64 `db:"nf64"`
	NBool sql.NullBool    `db:"nbool"`
	NT    sql.NullTime    `db:"nt"`
	NUID  uuid.NullUUID   `db:"nuid"`

	GS   sql.Null[string]    `db:"gs"`
	GI   sql.Null[int]       `db:"gi"`
	GT   sql.Null[time.Time] `db:"gt"`
	GUID sql.Null[uuid.UUID] `db:"guid"`
	GBs  sql.Null[[]byte]    `db:"gbs"`
	GDec sql.Null[Decimal]   `db:"gdec"`
}

func (allTypes) SyncTable() magicsync.Table {
	return magicsync.Table{Name: "all_types", Mirror: magicsync.Catalog}
}

func TestNewCodecsAcceptsEverySupportedFieldType(t *testing.T) {
	c := mustCodecs(t, allTypes{})
	tc := mustTable[allTypes](t, c)
	type want struct {
		kind     codec.ValueKind
		nullable bool
	}
	var (
		text    = want{wire.Text, false}
		boolean = want{wire.Bool, false}
		integer = want{wire.Int, false}
		float   = want{wire.Float, false}
		bytes   = want{wire.Bytes, true}
		tm      = want{wire.Time, false}
		id      = want{wire.UUID, false}
		decimal = want{wire.Decimal, true}
	)
	null := func(w want) want { w.nullable = true; return w }
	wants := map[string]want{
		"id": integer, "s": text, "b": boolean, "i": integer, "i8": integer, "i16": integer, "i32": integer,
		"i64": integer, "u": integer, "u8": integer, "u16": integer, "u32": integer, "u64": integer,
		"f32": float, "f64": float, "bs": bytes, "t": tm, "uid": id, "dec": decimal,
		"mi": integer, "ms": text, "mb": bytes,
		"ps": null(text), "pb": null(boolean), "pi64": null(integer), "pu8": null(integer), "pf64": null(float),
		"pt": null(tm), "puid": null(id), "pdec": decimal,
		"ns": null(text), "ni64": null(integer), "ni32": null(integer), "ni16": null(integer),
		"nbyte": null(integer), "nf64": null(float), "nbool": null(boolean), "nt": null(tm), "nuid": null(id),
		"gs": null(text), "gi": null(integer), "gt": null(tm), "guid": null(id), "gbs": bytes, "gdec": decimal,
	}
	if len(tc.Columns) != len(wants) {
		t.Errorf("%d columns, want %d", len(tc.Columns), len(wants))
	}
	for _, col := range tc.Columns {
		w, ok := wants[col.Name]
		if !ok {
			t.Errorf("unexpected column %q", col.Name)
			continue
		}
		if col.Kind != w.kind || col.Nullable != w.nullable {
			t.Errorf("column %q (%s): kind %v nullable %v; want %v %v", col.Name, col.Field, col.Kind, col.Nullable, w.kind, w.nullable)
		}
	}
}
