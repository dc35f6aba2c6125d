package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
)

// workedExample is the tuple PROTOCOL.md takes apart byte by byte.
var workedExample = []Value{
	IntValue(42), TextValue("hé"), NullValue(), BoolValue(true),
	IntValue(-300), FloatValue(1.5), TimeValue(1704067200000000),
}

const workedExampleHex = "07 03 54 05 03 68 c3 a9 00 02 03 d7 04 04 3f f8 00 00 00 00 00 00 07 80 80 89 82 e2 f5 86 06"

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// allKinds is one value of every kind, and their edge cases.
func allKinds() []Value {
	var u [16]byte
	for i := range u {
		u[i] = byte(i * 17)
	}
	return []Value{
		NullValue(),
		BoolValue(false), BoolValue(true),
		IntValue(0), IntValue(1), IntValue(-1), IntValue(63), IntValue(-64), IntValue(64),
		IntValue(math.MaxInt64), IntValue(math.MinInt64),
		FloatValue(0), FloatValue(math.Copysign(0, -1)), FloatValue(-2.5),
		FloatValue(math.MaxFloat64), FloatValue(math.SmallestNonzeroFloat64),
		FloatValue(math.Inf(1)), FloatValue(math.Inf(-1)), FloatValue(math.NaN()),
		FloatValue(math.Float64frombits(0x7ff0000000000001)), // a signalling NaN, payload kept
		TextValue(""), TextValue("a"), TextValue("日本語 ✓"), TextValue(strings.Repeat("x", 300)),
		TextValue("nul\x00inside"),
		BytesValue(nil), BytesValue([]byte{0, 0xff, 0x80}), BytesValue(bytes.Repeat([]byte{0xc3}, 200)),
		TimeValue(0), TimeValue(-1), TimeValue(1704067200000000), TimeValue(math.MinInt64), TimeValue(math.MaxInt64),
		UUIDValue([16]byte{}), UUIDValue(u),
		DecimalValue("0"), DecimalValue("-12.3400"), DecimalValue("NaN"), DecimalValue(""),
	}
}

func TestWorkedExample(t *testing.T) {
	want := unhex(t, workedExampleHex)
	got := AppendTuple(nil, workedExample)
	if !bytes.Equal(got, want) {
		t.Fatalf("worked example encodes as % x\nwant                          % x", got, want)
	}
	doc, err := os.ReadFile("../../proto/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), workedExampleHex) {
		t.Fatalf("PROTOCOL.md does not show the worked example %q", workedExampleHex)
	}
}

func TestValueBytes(t *testing.T) {
	cases := []struct {
		v    Value
		want string
	}{
		{NullValue(), "00"},
		{BoolValue(false), "01"},
		{BoolValue(true), "02"},
		{Value{Kind: False}, "01"},
		{Value{Kind: True}, "02"},
		{IntValue(0), "03 00"},
		{IntValue(-1), "03 01"},
		{IntValue(1), "03 02"},
		{IntValue(-64), "03 7f"},
		{IntValue(64), "03 80 01"},
		{IntValue(math.MaxInt64), "03 fe ff ff ff ff ff ff ff ff 01"},
		{IntValue(math.MinInt64), "03 ff ff ff ff ff ff ff ff ff 01"},
		{FloatValue(1), "04 3f f0 00 00 00 00 00 00"},
		{FloatValue(math.Copysign(0, -1)), "04 80 00 00 00 00 00 00 00"},
		{FloatValue(math.Inf(-1)), "04 ff f0 00 00 00 00 00 00"},
		{TextValue(""), "05 00"},
		{TextValue("é"), "05 02 c3 a9"},
		{BytesValue(nil), "06 00"},
		{BytesValue([]byte{0xff}), "06 01 ff"},
		{TimeValue(-2), "07 03"},
		{UUIDValue([16]byte{15: 1}), "08 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01"},
		{DecimalValue("1.50"), "09 04 31 2e 35 30"},
	}
	for _, c := range cases {
		got := AppendValue(nil, c.v)
		if want := unhex(t, c.want); !bytes.Equal(got, want) {
			t.Errorf("%v %+v: % x, want % x", c.v.Kind, c.v, got, want)
		}
	}
}

func TestTupleRoundTrip(t *testing.T) {
	vals := allKinds()
	check := func(name string, in []Value) {
		t.Helper()
		b := AppendTuple(nil, in)
		out, err := DecodeTuple(b, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(out) != len(in) {
			t.Fatalf("%s: %d values back, want %d", name, len(out), len(in))
		}
		for i := range in {
			if !out[i].Equal(in[i]) {
				t.Errorf("%s: value %d: %+v back, want %+v", name, i, out[i], in[i])
			}
		}
		n, err := ValidateTuple(b)
		if err != nil || n != len(in) {
			t.Errorf("%s: ValidateTuple = %d, %v; want %d, nil", name, n, err, len(in))
		}
		if again := AppendTuple(nil, out); !bytes.Equal(again, b) {
			t.Errorf("%s: re-encoded differently:\n% x\n% x", name, again, b)
		}
	}
	check("all kinds", vals)
	for _, v := range vals {
		check(v.Kind.String(), []Value{v})
	}
	check("empty", nil)
	check("max values", make([]Value, MaxTupleValues))
}

func TestNullIsNotZero(t *testing.T) {
	zeros := []Value{BoolValue(false), IntValue(0), FloatValue(0), TextValue(""), BytesValue(nil),
		TimeValue(0), UUIDValue([16]byte{}), DecimalValue("")}
	null := AppendValue(nil, NullValue())
	for _, z := range zeros {
		if z.Equal(NullValue()) || NullValue().Equal(z) {
			t.Errorf("%v zero equals NULL", z.Kind)
		}
		if bytes.Equal(AppendValue(nil, z), null) {
			t.Errorf("%v zero encodes as NULL", z.Kind)
		}
		out, err := DecodeTuple(AppendTuple(nil, []Value{z}), nil)
		if err != nil || out[0].Kind == Null {
			t.Errorf("%v zero decodes as %+v, %v", z.Kind, out, err)
		}
	}
	// Text and bytes and decimal of the same bytes are different values.
	if TextValue("a").Equal(DecimalValue("a")) || TextValue("").Equal(BytesValue(nil)) {
		t.Error("text equals decimal or bytes")
	}
}

func TestEqual(t *testing.T) {
	nan := FloatValue(math.NaN())
	if !nan.Equal(nan) {
		t.Error("NaN is not equal to the same NaN: a row holding it would never compare equal")
	}
	if FloatValue(0).Equal(FloatValue(math.Copysign(0, -1))) {
		t.Error("0 and -0 equal: they encode differently")
	}
	if !BytesValue(nil).Equal(BytesValue([]byte{})) {
		t.Error("nil and empty bytes differ: they encode alike")
	}
	if IntValue(5).Equal(TimeValue(5)) {
		t.Error("int equals time")
	}
	if BoolValue(true).Equal(BoolValue(false)) || !BoolValue(true).Equal(BoolValue(true)) {
		t.Error("bools compare wrong")
	}
}

func TestDecodeCopies(t *testing.T) {
	b := AppendTuple(nil, []Value{TextValue("abc"), BytesValue([]byte("xyz"))})
	out, err := DecodeTuple(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0
	}
	if out[0].S != "abc" || string(out[1].B) != "xyz" {
		t.Fatalf("values changed with their source: %+v", out)
	}
}

func TestDecodeReusesDst(t *testing.T) {
	dst := make([]Value, 5, 10)
	out, err := DecodeTuple(AppendTuple(nil, []Value{IntValue(7)}), dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || &out[0] != &dst[0] {
		t.Fatalf("dst not reused: len %d", len(out))
	}
}

func TestMalformedTuples(t *testing.T) {
	cases := map[string]string{
		"empty input":               "",
		"count cut short":           "80",
		"count overflows":           "ff ff ff ff ff ff ff ff ff 02",
		"count not shortest":        "81 00 00",
		"zero count not shortest":   "80 00",
		"too many values":           "81 20", // 4097
		"huge count":                "ff ff ff ff ff ff ff ff 7f",
		"count above bytes":         "03 00 00",
		"value missing":             "02 00",
		"unknown kind":              "01 0a",
		"decoded bool kind on wire": "01 80",
		"trailing byte":             "01 00 00",
		"trailing after empty":      "00 00",
		"int cut short":             "01 03 80",
		"int not shortest":          "01 03 80 00",
		"int overflows":             "01 03 ff ff ff ff ff ff ff ff ff 02",
		"time cut short":            "01 07",
		"float cut short":           "01 04 3f f0 00",
		"text length cut short":     "01 05",
		"text length not shortest":  "01 05 81 00 61",
		"text longer than input":    "01 05 05 61 62",
		"huge text length":          "01 05 ff ff ff ff ff ff ff ff 7f",
		"text not UTF-8":            "01 05 01 ff",
		"text cut UTF-8":            "01 05 01 c3",
		"text surrogate":            "01 05 03 ed a0 80",
		"decimal not UTF-8":         "01 09 02 c3 28",
		"bytes longer than input":   "01 06 02 00",
		"huge bytes length":         "01 06 ff ff ff ff ff ff ff ff ff 01",
		"uuid cut short":            "01 08 00 01 02",
	}
	for name, h := range cases {
		b := unhex(t, h)
		_, err := DecodeTuple(b, nil)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: DecodeTuple error %v, want ErrMalformed", name, err)
		}
		if _, verr := ValidateTuple(b); !errors.Is(verr, ErrMalformed) {
			t.Errorf("%s: ValidateTuple error %v, want ErrMalformed", name, verr)
		}
	}
	// Bytes need not be UTF-8.
	if _, err := DecodeTuple(unhex(t, "01 06 01 ff"), nil); err != nil {
		t.Errorf("bytes 0xff: %v", err)
	}
}

func TestErrorsSayWhere(t *testing.T) {
	_, err := DecodeTuple(unhex(t, "02 00 05 01 ff"), nil)
	if err == nil || !strings.Contains(err.Error(), "value 1") || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("error %q does not name value 1 and UTF-8", err)
	}
}

func TestTruncated(t *testing.T) {
	b := AppendTuple(nil, allKinds())
	for i := 0; i < len(b); i++ {
		if _, err := DecodeTuple(b[:i], nil); !errors.Is(err, ErrMalformed) {
			t.Fatalf("prefix of %d of %d bytes: %v, want ErrMalformed", i, len(b), err)
		}
		if _, err := ValidateTuple(b[:i]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("ValidateTuple of prefix of %d of %d bytes: %v, want ErrMalformed", i, len(b), err)
		}
	}
	for _, extra := range [][]byte{{0}, {0xff}, AppendValue(nil, IntValue(1))} {
		if _, err := DecodeTuple(append(append([]byte{}, b...), extra...), nil); !errors.Is(err, ErrMalformed) {
			t.Fatalf("trailing % x: %v, want ErrMalformed", extra, err)
		}
	}
}

func TestHugeLengthsDoNotAllocate(t *testing.T) {
	huge := [][]byte{
		binary.AppendUvarint(nil, 1<<62),
		append(binary.AppendUvarint([]byte{1, byte(Bytes)}, 1<<62), 1, 2, 3),
		append(binary.AppendUvarint([]byte{1, byte(Text)}, math.MaxUint64), 'a'),
		binary.AppendUvarint(nil, MaxTupleValues), // a count with no values
	}
	dst := make([]Value, 0, 4)
	for _, b := range huge {
		// Bytes, not allocations, are what a length must not drive: the
		// error's text is all a decode may allocate, and how many pieces
		// that takes varies with the build (-race adds some).
		perRun := bytesAllocated(20, func() {
			if _, err := DecodeTuple(b, dst); err == nil {
				t.Fatalf("% x decodes", b)
			}
		})
		if perRun > 1024 {
			t.Errorf("% x: %d bytes allocated a decode", b, perRun)
		}
	}
}

// bytesAllocated is how many bytes f allocates a run, averaged over runs.
func bytesAllocated(runs int, f func()) uint64 {
	f() // warm up, as testing.AllocsPerRun does
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

func TestValidateDoesNotAllocate(t *testing.T) {
	b := AppendTuple(nil, allKinds())
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ValidateTuple(b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("ValidateTuple allocates %v times", allocs)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Null: "null", True: "bool", Bool: "bool", Decimal: "decimal", Kind(42): "kind(42)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}

func BenchmarkValidateTuple(b *testing.B) {
	t := AppendTuple(nil, allKinds())
	b.ReportAllocs()
	b.SetBytes(int64(len(t)))
	for b.Loop() {
		if _, err := ValidateTuple(t); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeTuple(b *testing.B) {
	t := AppendTuple(nil, allKinds())
	dst := make([]Value, 0, 64)
	b.ReportAllocs()
	b.SetBytes(int64(len(t)))
	for b.Loop() {
		var err error
		if dst, err = DecodeTuple(t, dst); err != nil {
			b.Fatal(err)
		}
	}
}
