// This file holds the fuzz targets of Column.Canonical, ParseQualified
// and ParseMembers.

package codec_test

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
)

// Run each for a while before a release, e.g.
//
//	go test -run='^$' -fuzz=FuzzColumnCanonical -fuzztime=30s .
//
// Whatever they find goes into testdata/fuzz, and runs with every go test.

// fuzzKinds are the kinds a column may have, indexed by the fuzzer's byte.
var fuzzKinds = []codec.ValueKind{wire.Text, wire.Decimal, wire.Int, wire.Float, wire.Bool, wire.Bytes, wire.Time, wire.UUID}

func fuzzKind(k uint8) codec.ValueKind { return fuzzKinds[int(k)%len(fuzzKinds)] }

func kindIndex(k codec.ValueKind) uint8 {
	for i, kk := range fuzzKinds {
		if kk == k {
			return uint8(i)
		}
	}
	panic(k)
}

// textsOf are the ways a database driver may hand v back as text: what
// mattn/go-sqlite3 and modernc.org/sqlite write, and plain spellings.
func textsOf(v codec.Value) []string {
	switch v.Kind {
	case wire.Int:
		return []string{strconv.FormatInt(v.I, 10), " " + strconv.FormatInt(v.I, 10) + "\n"}
	case wire.Float:
		return []string{strconv.FormatFloat(v.F, 'g', -1, 64), strconv.FormatFloat(v.F, 'e', -1, 64)}
	case wire.Bool:
		return []string{strconv.FormatBool(v.I != 0), strconv.Itoa(int(v.I))}
	case wire.UUID:
		u := uuid.UUID(v.U)
		return []string{u.String(), strings.ToUpper(u.String()), u.URN(), "{" + u.String() + "}"}
	case wire.Time:
		t := time.UnixMicro(v.I).UTC()
		east := t.In(time.FixedZone("IST", 5*3600+1800))
		west := t.In(time.FixedZone("", -7*3600))
		return []string{
			t.Format("2006-01-02 15:04:05.999999999-07:00"), // mattn/go-sqlite3
			t.String(), east.String(), west.String(), // modernc.org/sqlite
			t.Format(time.RFC3339Nano), east.Format(time.RFC3339Nano),
		}
	case wire.Text, wire.Decimal:
		return []string{v.S}
	case wire.Bytes:
		return []string{string(v.B)}
	}
	return nil
}

// FuzzColumnCanonical reads text a driver may hand back as each kind of
// column: it never panics, refuses with ErrBadValue, and what it reads
// keeps its kind, reads back the same bound as a host binds it, written as
// any driver writes it, and across the wire.
func FuzzColumnCanonical(f *testing.F) {
	for _, v := range []codec.Value{
		wire.IntValue(0), wire.IntValue(-1 << 63), wire.IntValue(1<<63 - 1), wire.FloatValue(0.25), wire.FloatValue(-1e300),
		wire.BoolValue(true), wire.BoolValue(false), wire.UUIDValue(uid1), wire.UUIDValue(uid2),
		wire.TimeValue(at.UnixMicro()), wire.TimeValue(0), wire.TimeValue(-62135596800000000), wire.TimeValue(253402300799999999),
		wire.TimeValue(math.MinInt64), wire.TimeValue(math.MaxInt64),
		wire.TextValue("héllo"), wire.DecimalValue("12.30"), wire.BytesValue([]byte{0, 0xff}),
	} {
		for _, s := range textsOf(v) {
			f.Add(kindIndex(v.Kind), s, false)
			f.Add(kindIndex(v.Kind), s, true)
		}
	}
	for _, s := range []string{
		"2024-01-02 03:04:05.123456789+02:00", "2024-01-02T03:04:05.5Z", "2024-01-02 03:04:05", "2024-01-02",
		"2024-01-02 03:04", "2024-01-02 03:04:05.1234567 +0200 CEST m=+0.000012345", "2024-03-10 01:02:03 -0800 Pacific Time",
		"2024-03-10 01:02:03.5 +0200 +0200", "0000-01-01 00:00:00+01:00", "9999-12-31 23:59:59-01:00", "yesterday",
	} {
		f.Add(kindIndex(wire.Time), s, false)
	}
	for _, s := range []string{"NaN", "-Inf", "+inf", "0x1p-2", "1e400", "1_000", " 5 ", "t", "FALSE", "maybe", "\xff", ""} {
		for _, k := range []codec.ValueKind{wire.Int, wire.Float, wire.Bool, wire.Text} {
			f.Add(kindIndex(k), s, false)
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, s string, asBytes bool) {
		kind := fuzzKind(k)
		col := &codec.Column{Name: "c", Kind: kind}
		var src any = s
		if asBytes {
			src = []byte(s)
		}
		v, err := col.Canonical(src)
		if err != nil {
			if !errors.Is(err, codec.ErrBadValue) {
				t.Fatalf("Canonical(%v, %q): %v does not wrap ErrBadValue", kind, s, err)
			}
			return
		}
		if v.Kind != kind {
			t.Fatalf("Canonical(%v, %q) = %+v, of another kind", kind, s, v)
		}
		again, err := col.Canonical(codec.Arg(v))
		if err != nil || !again.Equal(v) {
			t.Fatalf("Canonical(%v, %q) = %+v; bound as %#v, it reads back %+v, %v", kind, s, v, codec.Arg(v), again, err)
		}
		for _, text := range textsOf(v) {
			again, err := col.Canonical(text)
			if err != nil || !again.Equal(v) {
				t.Fatalf("Canonical(%v, %q) = %+v; written as %q, it reads back %+v, %v", kind, s, v, text, again, err)
			}
		}
		vals, err := wire.DecodeTuple(wire.AppendTuple(nil, []codec.Value{v}), nil)
		if err != nil || len(vals) != 1 || !vals[0].Equal(v) {
			t.Fatalf("Canonical(%v, %q) = %+v; across the wire %+v, %v", kind, s, v, vals, err)
		}
	})
}

// checkName fails unless name is usable as an identifier: present, at
// most 63 bytes, valid UTF-8, without a quote or a control character, and
// with no space around it.
func checkName(t *testing.T, what, name string) {
	t.Helper()
	ok := name != "" && len(name) <= 63 && utf8.ValidString(name) && strings.TrimSpace(name) == name &&
		!strings.ContainsFunc(name, func(r rune) bool { return r == '"' || unicode.IsControl(r) })
	if !ok {
		t.Fatalf("%s %q is no usable name", what, name)
	}
}

// FuzzParseQualified splits names: never a panic, parts that are usable
// names without a dot, and the parts joined again parse to themselves.
func FuzzParseQualified(f *testing.F) {
	for _, s := range []string{"shop.registers", "registers", " shop . registers ", "a.b.c", ".x", "x.", "", `sh"op.x`,
		"shop.reg\tisters", "\u0098", "\xff.x", strings.Repeat("s", 63) + "." + strings.Repeat("t", 64), "é.ü", "a..b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		schema, table, err := codec.ParseQualified(s)
		if err != nil {
			if schema != "" || table != "" {
				t.Fatalf("ParseQualified(%q) = %q, %q along with %v", s, schema, table, err)
			}
			return
		}
		checkName(t, "schema", schema)
		checkName(t, "table", table)
		if strings.Contains(schema, ".") || strings.Contains(table, ".") {
			t.Fatalf("ParseQualified(%q) = %q, %q: a part holds a dot", s, schema, table)
		}
		if !strings.Contains(s, ".") && schema != "public" {
			t.Fatalf("ParseQualified(%q): schema %q, want public", s, schema)
		}
		s2, t2, err := codec.ParseQualified(schema + "." + table)
		if err != nil || s2 != schema || t2 != table {
			t.Fatalf("ParseQualified(%q) = %q, %q; joined again: %q, %q, %v", s, schema, table, s2, t2, err)
		}
	})
}

// FuzzParseMembers reads membership tables: never a panic, usable names,
// and the members written again parse to themselves.
func FuzzParseMembers(f *testing.F) {
	for _, s := range []string{"shop.registers(id, shop_id)", "registers(id,shop_id)", " shop.registers ( id , shop_id )",
		"shop.registers(id)", "shop.registers(id, a, b)", "shop.registers id, shop_id", "shop.registers(id, shop_id",
		"(a,b)", "a.b.c(d,e)", "a(b(c,d))", "a(,)", `a("b",c)`, "a(b,\xff)", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := codec.ParseMembers(s)
		if err != nil {
			if m != (codec.Members{}) {
				t.Fatalf("ParseMembers(%q) = %+v along with %v", s, m, err)
			}
			return
		}
		checkName(t, "schema", m.Schema)
		checkName(t, "table", m.Table)
		checkName(t, "replica column", m.Replica)
		checkName(t, "group column", m.Group)
		again := fmt.Sprintf("%s.%s(%s, %s)", m.Schema, m.Table, m.Replica, m.Group)
		m2, err := codec.ParseMembers(again)
		if err != nil || m2 != m {
			t.Fatalf("ParseMembers(%q) = %+v; written again as %q: %+v, %v", s, m, again, m2, err)
		}
	})
}
