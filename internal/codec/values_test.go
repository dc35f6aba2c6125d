// This file holds the tests of canonical values: rows to values and
// back, keys, tuples, and what drivers hand back.

package codec_test

import (
	"database/sql"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
)

func ptr[T any](v T) *T { return &v }

var (
	uid1 = uuid.MustParse("0190f4a5-7d3c-7b1e-9c4d-2e1f0a9b8c7d")
	uid2 = uuid.MustParse("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
	// at is a time in UTC with whole microseconds: what a round trip keeps.
	at = time.Date(2024, 2, 29, 23, 59, 58, 123456000, time.UTC)
)

// fullRow sets every field of allTypes to a value other than its zero.
func fullRow() allTypes {
	return allTypes{
		ID: 1, S: "héllo\x00wörld", B: true, I: -42, I8: math.MinInt8, I16: math.MaxInt16, I32: math.MinInt32,
		I64: math.MinInt64, U: 7, U8: math.MaxUint8, U16: math.MaxUint16, U32: math.MaxUint32, U64: math.MaxInt64,
		F32: 1.5e-7, F64: -math.MaxFloat64, Bs: []byte{0, 1, 0xff}, T: at, UID: uid1, Dec: mustDecimal("-12345.678900"),
		MI: -3, MS: "mine", MB: myBytes("raw"),
		PS: ptr("p"), PB: ptr(true), PI64: ptr(int64(math.MaxInt64)), PU8: ptr(uint8(9)), PF64: ptr(math.Inf(-1)),
		PT: ptr(at.Add(-time.Hour)), PUID: ptr(uid2), PDec: ptr(mustDecimal("0.01")),
		NS:    sql.NullString{String: "ns", Valid: true},
		NI64:  sql.NullInt64{Int64: -64, Valid: true},
		NI32:  sql.NullInt32{Int32: 32, Valid: true},
		NI16:  sql.NullInt16{Int16: -16, Valid: true},
		NByte: sql.NullByte{Byte: 200, Valid: true},
		NF64:  sql.NullFloat64{Float64: 6.25, Valid: true},
		NBool: sql.NullBool{Bool: true, Valid: true},
		NT:    sql.NullTime{Time: time.Date(1969, 7, 20, 20, 17, 40, 999999000, time.UTC), Valid: true},
		NUID:  uuid.NullUUID{UUID: uid1, Valid: true},
		GS:    sql.Null[string]{V: "g", Valid: true},
		GI:    sql.Null[int]{V: -1, Valid: true},
		GT:    sql.Null[time.Time]{V: time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC), Valid: true},
		GUID:  sql.Null[uuid.UUID]{V: uid2, Valid: true},
		GBs:   sql.Null[[]byte]{V: []byte("gbs"), Valid: true},
		GDec:  sql.Null[Decimal]{V: mustDecimal("1e3"), Valid: true},
	}
}

// zeroRow holds the zero of every type, and in every nullable field a
// zero that is not NULL: pointers to zeros, valid Null* of zeros, empty
// (not nil) byte slices.
func zeroRow() allTypes {
	return allTypes{
		Bs: []byte{}, MB: myBytes{}, Dec: mustDecimal("0"),
		PS: ptr(""), PB: ptr(false), PI64: ptr(int64(0)), PU8: ptr(uint8(0)), PF64: ptr(0.0),
		PT: ptr(time.Time{}), PUID: ptr(uuid.Nil), PDec: ptr(mustDecimal("0")),
		NS: sql.NullString{Valid: true}, NI64: sql.NullInt64{Valid: true}, NI32: sql.NullInt32{Valid: true},
		NI16: sql.NullInt16{Valid: true}, NByte: sql.NullByte{Valid: true}, NF64: sql.NullFloat64{Valid: true},
		NBool: sql.NullBool{Valid: true}, NT: sql.NullTime{Valid: true}, NUID: uuid.NullUUID{Valid: true},
		GS: sql.Null[string]{Valid: true}, GI: sql.Null[int]{Valid: true}, GT: sql.Null[time.Time]{Valid: true},
		GUID: sql.Null[uuid.UUID]{Valid: true}, GBs: sql.Null[[]byte]{V: []byte{}, Valid: true},
		GDec: sql.Null[Decimal]{V: mustDecimal("0"), Valid: true},
	}
}

// nullRow is NULL in every nullable field: nil pointers and slices,
// invalid Null*, the zero Decimal.
func nullRow() allTypes { return allTypes{ID: 3} }

// roundTrip sends row through Values, the wire tuple, DecodeTuple and Fill.
func roundTrip(t *testing.T, tc *codec.TableCodec, row allTypes) (allTypes, []codec.Value) {
	t.Helper()
	vals, err := tc.Values(row, nil)
	if err != nil {
		t.Fatalf("Values: %v", err)
	}
	tuple := wire.AppendTuple(nil, vals)
	if enc := tc.EncodeRow(nil, vals, nil); string(enc) != string(tuple) {
		t.Errorf("EncodeRow differs from wire.AppendTuple")
	}
	decoded, err := codec.DecodeTuple(tuple, nil)
	if err != nil {
		t.Fatalf("DecodeTuple: %v", err)
	}
	var out allTypes
	if err := tc.Fill(&out, decoded); err != nil {
		t.Fatalf("Fill: %v", err)
	}
	return out, vals
}

func TestEveryFieldTypeRoundTripsThroughTheWire(t *testing.T) {
	tc := mustTable[allTypes](t, mustCodecs(t, allTypes{}))
	for name, row := range map[string]allTypes{"full": fullRow(), "zeros": zeroRow(), "nulls": nullRow()} {
		t.Run(name, func(t *testing.T) {
			out, _ := roundTrip(t, tc, row)
			if !reflect.DeepEqual(out, row) {
				diffFields(t, out, row)
			}
			// A pointer to the row reads the same.
			byValue, err := tc.Values(row, nil)
			if err != nil {
				t.Fatal(err)
			}
			byPointer, err := tc.Values(&row, nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(wire.AppendTuple(nil, byValue)) != string(wire.AppendTuple(nil, byPointer)) {
				t.Errorf("Values of a pointer differ from Values of the struct")
			}
		})
	}
}

// diffFields reports the fields of got and want that differ.
func diffFields(t *testing.T, got, want allTypes) {
	t.Helper()
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range g.NumField() {
		if !reflect.DeepEqual(g.Field(i).Interface(), w.Field(i).Interface()) {
			t.Errorf("%s: got %#v, want %#v", g.Type().Field(i).Name, g.Field(i).Interface(), w.Field(i).Interface())
		}
	}
}

func TestNullIsKeptApartFromZero(t *testing.T) {
	tc := mustTable[allTypes](t, mustCodecs(t, allTypes{}))
	zeros, err := tc.Values(zeroRow(), nil)
	if err != nil {
		t.Fatal(err)
	}
	nulls, err := tc.Values(nullRow(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, col := range tc.Columns {
		if !col.Nullable {
			if nulls[i].Kind == wire.Null {
				t.Errorf("column %q is not nullable but its zero is NULL", col.Name)
			}
			continue
		}
		if nulls[i].Kind != wire.Null {
			t.Errorf("column %q: the NULL row gives %v, want NULL", col.Name, nulls[i].Kind)
		}
		if zeros[i].Kind == wire.Null {
			t.Errorf("column %q: the zero (non-NULL) row gives NULL", col.Name)
		}
	}

	// Spelled out for the cases people trip on.
	out, _ := roundTrip(t, tc, nullRow())
	if out.PS != nil || out.PT != nil || out.NS.Valid || out.Bs != nil || out.MB != nil || out.GBs.Valid || out.PDec != nil {
		t.Errorf("NULLs came back as values: %+v", out)
	}
	out, _ = roundTrip(t, tc, zeroRow())
	if out.PS == nil || *out.PS != "" || !out.NS.Valid || out.NS.String != "" || out.Bs == nil || len(out.Bs) != 0 || out.MB == nil {
		t.Errorf("zeros came back as NULLs: PS %v NS %+v Bs %#v MB %#v", out.PS, out.NS, out.Bs, out.MB)
	}
}

func TestNullWrapperValidAroundANullValueIsNull(t *testing.T) {
	// database/sql binds sql.Null[[]byte]{V: nil, Valid: true} as NULL, and so
	// does the engine; it reads back as not Valid.
	tc := mustTable[allTypes](t, mustCodecs(t, allTypes{}))
	row := nullRow()
	row.GBs = sql.Null[[]byte]{Valid: true}
	out, vals := roundTrip(t, tc, row)
	if i := columnIndex(t, tc, "gbs"); vals[i].Kind != wire.Null {
		t.Errorf("Valid nil []byte gives %v, want NULL", vals[i].Kind)
	}
	if out.GBs.Valid {
		t.Errorf("Valid nil []byte came back Valid: %#v", out.GBs)
	}
}

func columnIndex(t testing.TB, tc *codec.TableCodec, name string) int {
	t.Helper()
	for i, c := range tc.Columns {
		if c.Name == name {
			return i
		}
	}
	t.Fatalf("no column %q", name)
	return -1
}

func TestTimesKeepMicrosecondsAndComeBackUTC(t *testing.T) {
	tc := mustTable[allTypes](t, mustCodecs(t, allTypes{}))
	zone := time.FixedZone("UTC-7", -7*3600)
	for _, in := range []time.Time{
		time.Date(2024, 3, 10, 1, 2, 3, 123456789, zone),
		time.Date(1969, 12, 31, 23, 59, 59, 999999999, zone), // before the epoch: rounds down, not toward zero
		time.Date(2000, 1, 1, 0, 0, 0, 999, time.UTC),
		time.Now(), // with a monotonic reading and the local zone
	} {
		row := nullRow()
		row.T, row.PT, row.NT = in, &in, sql.NullTime{Time: in, Valid: true}
		out, vals := roundTrip(t, tc, row)
		want := in.Truncate(time.Microsecond)
		if got := vals[columnIndex(t, tc, "t")].I; got != want.UnixMicro() {
			t.Errorf("%v: canonical %d µs, want %d", in, got, want.UnixMicro())
		}
		for name, got := range map[string]time.Time{"T": out.T, "PT": *out.PT, "NT": out.NT.Time} {
			if !got.Equal(want) {
				t.Errorf("%v: %s came back %v, want the instant %v", in, name, got, want)
			}
			if got.Location() != time.UTC {
				t.Errorf("%v: %s came back in %v, want UTC", in, name, got.Location())
			}
			if got.Nanosecond()%1000 != 0 {
				t.Errorf("%v: %s kept nanoseconds: %v", in, name, got)
			}
			if !reflect.DeepEqual(got, want.UTC()) {
				t.Errorf("%v: %s = %#v, want %#v", in, name, got, want.UTC())
			}
		}
	}
}

// TestTimesOfFiveDigitAndNegativeYearsReadBack checks times Go writes
// with a year time.Parse does not read: 9999-12-31 23:00 at -01:00 is in
// year 10000 once in UTC, and written so by the engine.
func TestTimesOfFiveDigitAndNegativeYearsReadBack(t *testing.T) {
	col := &codec.Column{Name: "t", Kind: wire.Time}
	for _, tm := range []time.Time{
		time.Date(9999, 12, 31, 23, 0, 0, 0, time.FixedZone("", -3600)),
		time.Date(10000, 2, 29, 12, 0, 0, 123456000, time.UTC),
		time.Date(0, 1, 1, 0, 30, 0, 0, time.FixedZone("", 3600)),
		time.Date(-4713, 11, 24, 0, 0, 0, 0, time.UTC),
		time.Date(294247, 1, 10, 4, 0, 0, 0, time.UTC),
		time.UnixMicro(math.MinInt64).UTC(),
		time.UnixMicro(math.MaxInt64).UTC(),
	} {
		want := wire.TimeValue(tm.UnixMicro())
		for _, text := range []string{tm.String(), tm.UTC().String(), tm.Format("2006-01-02 15:04:05.999999999-07:00"), tm.Format(time.RFC3339Nano)} {
			got, err := col.Canonical(text)
			if err != nil || !got.Equal(want) {
				t.Errorf("Canonical(%q) = %+v, %v; want %+v", text, got, err, want)
			}
		}
	}
}

// TestTimesBeyondMicrosecondsAreRefusedAsBadValue checks that a time whose
// microseconds would not fit 64 bits is refused, not wrapped around.
func TestTimesBeyondMicrosecondsAreRefusedAsBadValue(t *testing.T) {
	col := &codec.Column{Name: "t", Kind: wire.Time}
	for _, src := range []any{
		time.UnixMicro(math.MaxInt64).Add(time.Microsecond),
		time.UnixMicro(math.MinInt64).Add(-time.Microsecond),
		time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC),
		"300000-01-01 00:00:00+00:00",
		"-300000-01-01 00:00:00+00:00",
		"294247-01-10 04:00:54.775808+00:00",
		"999999999-01-01",
		"1000000000-01-01",
	} {
		if v, err := col.Canonical(src); !errors.Is(err, codec.ErrBadValue) {
			t.Errorf("Canonical(%v) = %+v, %v; want ErrBadValue", src, v, err)
		}
	}
}

func TestUint64OverMaxInt64IsRefusedAsBadValue(t *testing.T) {
	tc := mustTable[allTypes](t, mustCodecs(t, allTypes{}))
	row := fullRow()
	row.U64 = math.MaxInt64 + 1
	if _, err := tc.Values(row, nil); !errors.Is(err, codec.ErrBadValue) {
		t.Errorf("Values of uint64 %d: error %v, want ErrBadValue", row.U64, err)
	} else if !strings.Contains(err.Error(), "U64") {
		t.Errorf("error %q does not name the field U64", err)
	}
	if _, err := tc.Args(row, nil); !errors.Is(err, codec.ErrBadValue) {
		t.Errorf("Args: error %v, want ErrBadValue", err)
	}
	row = fullRow()
	row.U = math.MaxUint
	if _, err := tc.Values(row, nil); !errors.Is(err, codec.ErrBadValue) {
		t.Errorf("Values of uint %d: error %v, want ErrBadValue", row.U, err)
	}
	row.U = math.MaxInt64
	if _, err := tc.Values(row, nil); err != nil {
		t.Errorf("Values of uint MaxInt64: %v", err)
	}
}

func TestTextThatIsNotUTF8IsRefusedAsBadValueBeforeItTravels(t *testing.T) {
	// The wire refuses text that is not UTF-8; Values and Canonical refuse
	// it first, naming the column, so that no undecodable tuple is sent.
	tc := mustTable[allTypes](t, mustCodecs(t, allTypes{}))
	for name, mutate := range map[string]func(*allTypes){
		"string":         func(r *allTypes) { r.S = "caf\xe9" },
		"named string":   func(r *allTypes) { r.MS = "\xff" },
		"*string":        func(r *allTypes) { r.PS = ptr("\xc3") },
		"sql.NullString": func(r *allTypes) { r.NS = sql.NullString{String: "\x80", Valid: true} },
		"decimal Valuer": func(r *allTypes) { r.Dec = mustDecimal("1\xff") },
	} {
		row := fullRow()
		mutate(&row)
		if _, err := tc.Values(row, nil); !errors.Is(err, codec.ErrBadValue) || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("%s: Values error %v, want ErrBadValue saying UTF-8", name, err)
		}
	}
	for _, column := range []string{"s", "dec"} {
		for _, src := range []any{"\xff", []byte("\xff")} {
			if _, err := tc.Columns[columnIndex(t, tc, column)].Canonical(src); !errors.Is(err, codec.ErrBadValue) {
				t.Errorf("Canonical(%q, %q): error %v, want ErrBadValue", column, src, err)
			}
		}
	}
	// Bytes hold anything.
	row := fullRow()
	row.Bs = []byte("\xff\xfe")
	if _, err := tc.Values(row, nil); err != nil {
		t.Errorf("Values of non-UTF-8 bytes: %v", err)
	}
}

func TestFillRefusesValuesTheFieldCannotHold(t *testing.T) {
	tc := mustTable[allTypes](t, mustCodecs(t, allTypes{}))
	good, err := tc.Values(fullRow(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		column string
		v      codec.Value
		says   string
	}{
		{"s", wire.NullValue(), `column "s": NULL, but S cannot hold it`},
		{"b", wire.NullValue(), "NULL, but B cannot hold it"},
		{"i64", wire.NullValue(), "NULL, but I64 cannot hold it"},
		{"f64", wire.NullValue(), "NULL, but F64 cannot hold it"},
		{"t", wire.NullValue(), "NULL, but T cannot hold it"},
		{"uid", wire.NullValue(), "NULL, but UID cannot hold it"},
		{"i64", wire.TextValue("12"), "a text where int is required"},
		{"s", wire.IntValue(1), "a int where text is required"},
		{"b", wire.IntValue(1), "where bool is required"},
		{"t", wire.IntValue(1), "where time is required"},
		{"uid", wire.TextValue(uid1.String()), "where uuid is required"},
		{"bs", wire.TextValue("x"), "where bytes is required"},
		{"dec", wire.IntValue(1), "where decimal is required"},
		{"i8", wire.IntValue(128), "128 overflows int8"},
		{"u8", wire.IntValue(-1), "-1 overflows uint8"},
		{"u32", wire.IntValue(math.MaxUint32 + 1), "overflows uint32"},
		{"pi64", wire.FloatValue(1), "where int is required"},
		{"ns", wire.BoolValue(true), "where text is required"},
	} {
		vals := append([]codec.Value(nil), good...)
		vals[columnIndex(t, tc, tt.column)] = tt.v
		var out allTypes
		err := tc.Fill(&out, vals)
		if !errors.Is(err, codec.ErrBadValue) {
			t.Errorf("Fill %v into %q: error %v, want ErrBadValue", tt.v.Kind, tt.column, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.says) {
			t.Errorf("Fill %v into %q: error %q does not say %q", tt.v.Kind, tt.column, err, tt.says)
		}
	}

	var out allTypes
	if err := tc.Fill(&out, good[:3]); !errors.Is(err, codec.ErrBadValue) {
		t.Errorf("Fill of too few values: error %v, want ErrBadValue", err)
	}
	if err := tc.Fill(out, good); err == nil {
		t.Errorf("Fill into a struct, not a pointer, succeeded")
	}
	if err := tc.Fill(&product{}, good); err == nil {
		t.Errorf("Fill into another row type succeeded")
	}
	if err := tc.Fill(nil, good); err == nil {
		t.Errorf("Fill into nil succeeded")
	}
	if _, err := tc.Values(product{}, nil); err == nil {
		t.Errorf("Values of another row type succeeded")
	}
	if _, err := tc.Values((*allTypes)(nil), nil); err == nil {
		t.Errorf("Values of a nil pointer succeeded")
	}
}

func TestIntsAndFloatsWidenOnFill(t *testing.T) {
	// A float column takes an integer value: SQLite hands back 3 for 3.0.
	tc := mustTable[allTypes](t, mustCodecs(t, allTypes{}))
	vals, err := tc.Values(nullRow(), nil)
	if err != nil {
		t.Fatal(err)
	}
	vals[columnIndex(t, tc, "f64")] = wire.IntValue(3)
	vals[columnIndex(t, tc, "ms")] = wire.DecimalValue("1.50") // text columns take decimals
	var out allTypes
	if err := tc.Fill(&out, vals); err != nil {
		t.Fatal(err)
	}
	if out.F64 != 3 || out.MS != "1.50" {
		t.Errorf("F64, MS = %v, %q; want 3, 1.50", out.F64, out.MS)
	}
}

func TestArgsAreTheGoTypesAHostBinds(t *testing.T) {
	tc := mustTable[allTypes](t, mustCodecs(t, allTypes{}))
	in := time.Date(2024, 1, 2, 3, 4, 5, 678901234, time.FixedZone("X", 3600))
	row := fullRow()
	row.T = in
	args, err := tc.Args(row, nil)
	if err != nil {
		t.Fatal(err)
	}
	for col, want := range map[string]any{
		"s": row.S, "b": true, "i8": int64(math.MinInt8), "u32": int64(math.MaxUint32), "f32": float64(row.F32),
		"bs": row.Bs, "t": in.Truncate(time.Microsecond).UTC(), "uid": uid1, "dec": "-12345.678900",
		"ps": "p", "pb": true, "puid": uid2, "pdec": "0.01", "ns": "ns", "nbool": true, "nbyte": int64(200),
		"gbs": []byte("gbs"), "gdec": "1e3",
	} {
		got := args[columnIndex(t, tc, col)]
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Args[%q] = %#v (%T), want %#v (%T)", col, got, got, want, want)
		}
	}
	args, err = tc.Args(nullRow(), []int{columnIndex(t, tc, "ps"), columnIndex(t, tc, "id")})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(args, []any{nil, int64(3)}) {
		t.Errorf("Args(nullRow, [ps, id]) = %#v, want [nil 3]", args)
	}
}

func TestKeysCompareEqualExactlyWhenKeyValuesDo(t *testing.T) {
	c := mustCodecs(t, registerSetting{}, product{})
	rs := mustTable[registerSetting](t, c)
	a := registerSetting{RegisterID: uid1, ID: uid2, Name: "volume", Value: "3", ChangedAt: at}
	b := a
	b.Value, b.Name, b.ChangedAt = "11", "loudness", at.Add(time.Hour) // not key columns

	ka, err := rs.KeyOf(a)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := rs.KeyOf(&b)
	if err != nil {
		t.Fatal(err)
	}
	if ka != kb {
		t.Errorf("keys of rows differing only outside the key differ: %v != %v", ka, kb)
	}
	seen := map[codec.Key]string{ka: "a"}
	if seen[kb] != "a" {
		t.Errorf("a Key does not find its equal in a map")
	}

	swapped := a
	swapped.RegisterID, swapped.ID = a.ID, a.RegisterID
	ks, err := rs.KeyOf(swapped)
	if err != nil {
		t.Fatal(err)
	}
	if ks == ka {
		t.Errorf("keys with their values swapped are equal")
	}

	// The same key however it is made.
	vals, err := rs.Values(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if k := rs.KeyOfRow(vals); k != ka {
		t.Errorf("KeyOfRow = %v, want %v", k, ka)
	}
	if k := codec.KeyOfValues(wire.UUIDValue(uid1), wire.UUIDValue(uid2)); k != ka {
		t.Errorf("KeyOfValues = %v, want %v", k, ka)
	}
	if k := codec.Key(rs.EncodeRow(nil, vals, rs.KeyIndex)); k != ka {
		t.Errorf("EncodeRow of the key columns = %v, want %v", k, ka)
	}
	kv, err := ka.Values()
	if err != nil || len(kv) != 2 || !kv[0].Equal(wire.UUIDValue(uid1)) || !kv[1].Equal(wire.UUIDValue(uid2)) {
		t.Errorf("Key.Values = %v, %v", kv, err)
	}

	// Kinds are part of a key: 1, 1.0, "1" and true are four keys.
	keys := map[codec.Key]bool{}
	for _, v := range []codec.Value{wire.IntValue(1), wire.FloatValue(1), wire.TextValue("1"),
		wire.DecimalValue("1"), wire.BoolValue(true), wire.TimeValue(1), wire.BytesValue([]byte("1")), wire.NullValue()} {
		keys[codec.KeyOfValues(v)] = true
	}
	if len(keys) != 8 {
		t.Errorf("8 values of different kinds made %d distinct keys", len(keys))
	}
}

func TestKeyStringWritesTheKeyValues(t *testing.T) {
	for _, tt := range []struct {
		key  codec.Key
		want string
	}{
		{codec.KeyOfValues(wire.UUIDValue(uid1), wire.IntValue(-7)), "(0190f4a5-7d3c-7b1e-9c4d-2e1f0a9b8c7d, -7)"},
		{codec.KeyOfValues(wire.TextValue(`a "b"`)), `("a \"b\"")`},
		{codec.KeyOfValues(wire.DecimalValue("1.50")), `("1.50")`},
		{codec.KeyOfValues(wire.TimeValue(at.UnixMicro())), "(2024-02-29T23:59:58.123456Z)"},
		{codec.KeyOfValues(wire.TimeValue(0)), "(1970-01-01T00:00:00Z)"},
		{codec.KeyOfValues(wire.BoolValue(false), wire.NullValue()), "(false, NULL)"},
		{codec.KeyOfValues(wire.FloatValue(2.5)), "(2.5)"},
		{codec.KeyOfValues(), "()"},
		{codec.Key("\x01\xff"), "key(01ff)"},
	} {
		if got := tt.key.String(); got != tt.want {
			t.Errorf("Key.String() = %s, want %s", got, tt.want)
		}
	}
}

func TestDecodeTupleRefusesMalformedBytesAsBadValue(t *testing.T) {
	for _, b := range [][]byte{nil, {0x01}, {0x01, 0x63}, {0x01, 0x05, 0x01, 0xff}, {0x00, 0x00}} {
		if _, err := codec.DecodeTuple(b, nil); !errors.Is(err, codec.ErrBadValue) || !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("DecodeTuple(%x): error %v, want ErrBadValue and ErrMalformed", b, err)
		}
	}
}

func TestCanonicalReadsWhatDriversHandBack(t *testing.T) {
	tc := mustTable[allTypes](t, mustCodecs(t, allTypes{}))
	col := func(name string) *codec.Column { return &tc.Columns[columnIndex(t, tc, name)] }
	micros := func(s string) codec.Value {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return wire.TimeValue(tm.UnixMicro())
	}
	for _, tt := range []struct {
		column string
		src    any
		want   codec.Value
	}{
		{"s", nil, wire.NullValue()},
		{"s", "x", wire.TextValue("x")},
		{"s", []byte("x"), wire.TextValue("x")},
		{"i64", int64(5), wire.IntValue(5)},
		{"i64", int32(5), wire.IntValue(5)},
		{"i64", float64(5), wire.IntValue(5)},
		{"i64", "5", wire.IntValue(5)},
		{"f64", int64(3), wire.FloatValue(3)},
		{"f64", float32(0.5), wire.FloatValue(0.5)},
		{"f64", []byte("0.25"), wire.FloatValue(0.25)},
		{"b", int64(1), wire.BoolValue(true)},
		{"b", int64(0), wire.BoolValue(false)},
		{"b", true, wire.BoolValue(true)},
		{"b", "t", wire.BoolValue(true)},
		{"bs", "ab", wire.BytesValue([]byte("ab"))},
		{"uid", [16]byte(uid1), wire.UUIDValue(uid1)},
		{"uid", uid1, wire.UUIDValue(uid1)},
		{"uid", uid1.String(), wire.UUIDValue(uid1)},
		{"uid", []byte(uid1.String()), wire.UUIDValue(uid1)},
		{"uid", uid1[:], wire.UUIDValue(uid1)},
		{"dec", "12.30", wire.DecimalValue("12.30")},
		{"dec", int64(12), wire.DecimalValue("12")},
		{"dec", mustDecimal("7.5"), wire.DecimalValue("7.5")},
		{"dec", Decimal{}, wire.NullValue()},
		{"t", time.Date(2024, 1, 2, 3, 4, 5, 6789, time.FixedZone("", 7200)), micros("2024-01-02T01:04:05.000006Z")},
		{"t", "2024-01-02 03:04:05.123456789+02:00", micros("2024-01-02T01:04:05.123456Z")},
		{"t", "2024-01-02T03:04:05.5Z", micros("2024-01-02T03:04:05.5Z")},
		{"t", "2024-01-02 03:04:05", micros("2024-01-02T03:04:05Z")},
		{"t", "2024-01-02", micros("2024-01-02T00:00:00Z")},
		{"t", []byte("2024-01-02 03:04:05.25+00:00"), micros("2024-01-02T03:04:05.25Z")},
		{"t", "2024-01-02 03:04:05.1234567 +0200 CEST m=+0.000012345", micros("2024-01-02T01:04:05.123456Z")},
		// modernc.org/sqlite writes time.Time.String(), zone names and all.
		{"t", "2024-03-10 01:02:03.123456789 -0700 X", micros("2024-03-10T08:02:03.123456Z")},
		{"t", "2024-03-10 01:02:03.123456789 -0700 UTC-7", micros("2024-03-10T08:02:03.123456Z")},
		{"t", "2024-03-10 01:02:03 -0800 Pacific Time", micros("2024-03-10T09:02:03Z")},
		{"t", "2024-03-10 01:02:03.5 +0200 +0200", micros("2024-03-09T23:02:03.5Z")},
		{"t", "2024-03-10 08:02:03.123456 +0000 UTC", micros("2024-03-10T08:02:03.123456Z")},
	} {
		got, err := col(tt.column).Canonical(tt.src)
		if err != nil {
			t.Errorf("Canonical(%q, %#v): %v", tt.column, tt.src, err)
			continue
		}
		if !got.Equal(tt.want) {
			t.Errorf("Canonical(%q, %#v) = %+v, want %+v", tt.column, tt.src, got, tt.want)
		}
	}
	for _, tt := range []struct {
		column string
		src    any
	}{
		{"i64", "five"}, {"i64", 1.5}, {"b", "maybe"}, {"uid", "not-a-uuid"}, {"uid", []byte{1, 2}},
		{"t", "yesterday"}, {"t", int64(5)}, {"t", "2024-03-10 01:02:03 X Y"}, {"s", 5}, {"f64", true},
	} {
		if v, err := col(tt.column).Canonical(tt.src); !errors.Is(err, codec.ErrBadValue) {
			t.Errorf("Canonical(%q, %#v) = %+v, %v; want ErrBadValue", tt.column, tt.src, v, err)
		}
	}
}

func TestCheckValueSaysWhatAColumnHolds(t *testing.T) {
	tc := mustTable[allTypes](t, mustCodecs(t, allTypes{}))
	col := func(name string) *codec.Column { return &tc.Columns[columnIndex(t, tc, name)] }
	for _, tt := range []struct {
		column string
		v      codec.Value
		ok     bool
	}{
		{"s", wire.TextValue(""), true}, {"s", wire.NullValue(), false}, {"ps", wire.NullValue(), true},
		{"f64", wire.IntValue(1), true}, {"i64", wire.FloatValue(1), false}, {"dec", wire.TextValue("1"), true},
		{"uid", wire.UUIDValue(uid1), true}, {"uid", wire.TextValue(uid1.String()), false},
	} {
		err := col(tt.column).CheckValue(tt.v)
		if (err == nil) != tt.ok {
			t.Errorf("CheckValue(%q, %v) = %v, want ok %v", tt.column, tt.v.Kind, err, tt.ok)
		}
		if err != nil && !errors.Is(err, codec.ErrBadValue) {
			t.Errorf("CheckValue error %v is no ErrBadValue", err)
		}
	}
}

func FuzzDecodeTupleFill(f *testing.F) {
	c, err := magicsync.NewCodecs(allTypes{}, registerSetting{})
	if err != nil {
		f.Fatal(err)
	}
	all, _ := c.Table("all_types")
	settings, _ := c.Table("settings")
	for _, row := range []allTypes{fullRow(), zeroRow(), nullRow()} {
		vals, err := all.Values(row, nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(wire.AppendTuple(nil, vals))
	}
	vals, err := settings.Values(registerSetting{RegisterID: uid1, ID: uid2, Name: "n", Value: "v", ChangedAt: at}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(wire.AppendTuple(nil, vals))
	f.Add([]byte{})
	decimalName := append([]codec.Value(nil), vals...)
	decimalName[2] = wire.DecimalValue("1.50")
	f.Add(wire.AppendTuple(nil, decimalName))
	f.Add([]byte{0x05, 0x00, 0x01, 0x02, 0x03, 0x02, 0x07, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		vals, err := codec.DecodeTuple(b, nil)
		if err != nil {
			if !errors.Is(err, codec.ErrBadValue) {
				t.Fatalf("DecodeTuple error %v is no ErrBadValue", err)
			}
			return
		}
		// A tuple that decodes re-encodes to the same bytes.
		if again := wire.AppendTuple(nil, vals); string(again) != string(b) {
			t.Fatalf("re-encoded %x, decoded from %x", again, b)
		}
		_ = codec.Key(b).String()
		var row allTypes
		if err := all.Fill(&row, vals); err == nil {
			// What Fill took, Values gives back, as the same tuple up to
			// the conversions Fill allows (ints into floats, decimals
			// into text, Valid NULLs).
			if _, err := all.Values(row, nil); err != nil {
				t.Fatalf("Values of a filled row: %v", err)
			}
		} else if !errors.Is(err, codec.ErrBadValue) {
			t.Fatalf("Fill error %v is no ErrBadValue", err)
		}
		var s registerSetting
		if err := settings.Fill(&s, vals); err == nil {
			back, err := settings.Values(s, nil)
			if err != nil {
				t.Fatalf("Values of a filled setting: %v", err)
			}
			// Every value comes back, but a decimal filled into a text
			// field, which comes back as text.
			for i, v := range vals {
				if v.Kind == wire.Decimal && settings.Columns[i].Kind == wire.Text {
					v = wire.TextValue(v.S)
				}
				if !back[i].Equal(v) {
					t.Fatalf("setting column %q: filled with %+v, reads back as %+v", settings.Columns[i].Name, v, back[i])
				}
			}
		} else if !errors.Is(err, codec.ErrBadValue) {
			t.Fatalf("Fill error %v is no ErrBadValue", err)
		}
	})
}
