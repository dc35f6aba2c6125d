// Package wire is the only place that knows how magicsync's messages and
// row values are laid out in bytes.
//
// A row travels as a tuple: a count, then each value as one kind byte and
// its payload. The same tuple is what digests hash, so a row compares equal
// whichever database or driver stored it.
//
// Byte by byte, a tuple is the number of values as an unsigned varint
// (LEB128, shortest form), then each value:
//
//	0x00                      NULL
//	0x01 / 0x02               false / true
//	0x03 zigzag-varint        an int64: (i << 1) ^ (i >> 63), as a varint
//	0x04 8 bytes              a float64's IEEE 754 bits, big-endian
//	0x05 varint-length UTF-8  text
//	0x06 varint-length bytes  bytes
//	0x07 zigzag-varint        a time, UTC microseconds since the Unix epoch
//	0x08 16 bytes             a UUID
//	0x09 varint-length UTF-8  a decimal, spelled as the database prints it
//
// Only this encoding decodes: a longer-than-needed varint, text that is not
// UTF-8, an unknown kind or a byte after the last value is malformed, so a
// value has exactly one encoding.
//
// Messages are protocol buffers (proto/sync.proto, generated into syncpb).
// EncodeToReplica, DecodeToReplica, EncodeToServer and DecodeToServer are
// the only way in and out: they check the protocol number, the size bound,
// what a message decodes into (at most 8 times its size, and 64 KiB
// besides) and the structure, so that an engine works on messages it can
// trust, except for the tuples of upserted rows, which it decodes row by
// row.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// Kind is the canonical type of a value.
type Kind uint8

// The kinds of value, as they are written on the wire. Their numbers are
// part of the protocol and never change.
const (
	Null    Kind = 0
	False   Kind = 1 // a bool false; decoded values use Bool
	True    Kind = 2 // a bool true; decoded values use Bool
	Int     Kind = 3
	Float   Kind = 4
	Text    Kind = 5
	Bytes   Kind = 6
	Time    Kind = 7
	UUID    Kind = 8
	Decimal Kind = 9

	// Bool is the kind of a decoded bool; on the wire it is False or True.
	Bool Kind = 0x80
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case Null:
		return "null"
	case Bool, False, True:
		return "bool"
	case Int:
		return "int"
	case Float:
		return "float"
	case Text:
		return "text"
	case Bytes:
		return "bytes"
	case Time:
		return "time"
	case UUID:
		return "uuid"
	case Decimal:
		return "decimal"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Value is one column value in canonical form.
//
// Which field holds it depends on Kind: I for Int, Bool (0 or 1) and Time
// (UTC microseconds since the Unix epoch); F for Float; S for Text and
// Decimal; B for Bytes; U for UUID. Null holds nothing.
type Value struct {
	Kind Kind
	I    int64
	F    float64
	S    string
	B    []byte
	U    [16]byte
}

// NullValue returns the SQL NULL, distinct from every zero value.
func NullValue() Value { return Value{Kind: Null} }

// BoolValue returns a bool value.
func BoolValue(b bool) Value {
	v := Value{Kind: Bool}
	if b {
		v.I = 1
	}
	return v
}

// IntValue returns a 64-bit integer value.
func IntValue(i int64) Value { return Value{Kind: Int, I: i} }

// FloatValue returns a float value; its bits travel unchanged, NaN payload
// and the sign of zero included.
func FloatValue(f float64) Value { return Value{Kind: Float, F: f} }

// TextValue returns a text value; s must be valid UTF-8 to decode again.
func TextValue(s string) Value { return Value{Kind: Text, S: s} }

// BytesValue returns a bytes value holding b, not a copy of it.
func BytesValue(b []byte) Value { return Value{Kind: Bytes, B: b} }

// TimeValue returns a time value of micros, UTC microseconds since the Unix
// epoch.
func TimeValue(micros int64) Value { return Value{Kind: Time, I: micros} }

// UUIDValue returns a UUID value.
func UUIDValue(u [16]byte) Value { return Value{Kind: UUID, U: u} }

// DecimalValue returns a decimal value spelled s, as the database prints it.
func DecimalValue(s string) Value { return Value{Kind: Decimal, S: s} }

// Equal reports whether two values are the same canonical value.
func (v Value) Equal(w Value) bool {
	if v.Kind != w.Kind {
		return false
	}
	switch v.Kind {
	case Null:
		return true
	case Bool, Int, Time:
		return v.I == w.I
	case Float:
		return math.Float64bits(v.F) == math.Float64bits(w.F)
	case Text, Decimal:
		return v.S == w.S
	case Bytes:
		return string(v.B) == string(w.B)
	case UUID:
		return v.U == w.U
	}
	return false
}

// MaxTupleValues bounds how many values one tuple may hold.
const MaxTupleValues = 4096

// ErrMalformed is wrapped by every error about bytes that do not decode.
var ErrMalformed = errors.New("malformed")

// AppendValue appends v's canonical encoding to dst. It panics when v.Kind
// is none of the kinds above, which is a bug in the caller, never input.
func AppendValue(dst []byte, v Value) []byte {
	switch v.Kind {
	case Null:
		return append(dst, byte(Null))
	case Bool, False, True:
		if v.I != 0 || v.Kind == True {
			return append(dst, byte(True))
		}
		return append(dst, byte(False))
	case Int:
		return binary.AppendVarint(append(dst, byte(Int)), v.I)
	case Float:
		return binary.BigEndian.AppendUint64(append(dst, byte(Float)), math.Float64bits(v.F))
	case Text, Decimal:
		dst = binary.AppendUvarint(append(dst, byte(v.Kind)), uint64(len(v.S)))
		return append(dst, v.S...)
	case Bytes:
		dst = binary.AppendUvarint(append(dst, byte(Bytes)), uint64(len(v.B)))
		return append(dst, v.B...)
	case Time:
		return binary.AppendVarint(append(dst, byte(Time)), v.I)
	case UUID:
		return append(append(dst, byte(UUID)), v.U[:]...)
	}
	panic(fmt.Sprintf("wire: AppendValue of %v", v.Kind)) // a bug in the caller, never input
}

// AppendTuple appends the canonical tuple of vals to dst.
func AppendTuple(dst []byte, vals []Value) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(vals)))
	for _, v := range vals {
		dst = AppendValue(dst, v)
	}
	return dst
}

// DecodeTuple decodes a canonical tuple, appending its values to dst[:0].
// Text, decimal and bytes values are copied, so src may be reused.
//
// Only the canonical encoding decodes: every varint in its shortest form,
// text and decimals valid UTF-8, and no byte after the last value. So a
// tuple that decodes is re-encoded by AppendTuple into the very same bytes.
// On error, dst holds the values decoded before the bad one.
func DecodeTuple(src []byte, dst []Value) ([]Value, error) {
	n, src, err := tupleCount(src)
	dst = dst[:0]
	if err != nil {
		return dst, err
	}
	for i := 0; i < n; i++ {
		r, rest, err := scanValue(src)
		if err != nil {
			return dst, fmt.Errorf("tuple value %d: %w", i, err)
		}
		v := Value{Kind: r.kind, I: r.i}
		switch r.kind {
		case Float:
			v.F = math.Float64frombits(r.bits)
		case Text, Decimal:
			v.S = string(r.body)
		case Bytes:
			v.B = append([]byte{}, r.body...)
		case UUID:
			copy(v.U[:], r.body)
		}
		dst = append(dst, v)
		src = rest
	}
	if len(src) != 0 {
		return dst, fmt.Errorf("%w tuple: %d bytes after the last value", ErrMalformed, len(src))
	}
	return dst, nil
}

// ValidateTuple checks that b is one canonical tuple, exactly as DecodeTuple
// would, without decoding or allocating anything, and returns how many
// values it holds.
func ValidateTuple(b []byte) (n int, err error) {
	n, src, err := tupleCount(b)
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		_, rest, err := scanValue(src)
		if err != nil {
			return 0, fmt.Errorf("tuple value %d: %w", i, err)
		}
		src = rest
	}
	if len(src) != 0 {
		return 0, fmt.Errorf("%w tuple: %d bytes after the last value", ErrMalformed, len(src))
	}
	return n, nil
}

// tupleCount reads a tuple's count of values, and returns the bytes after
// it.
func tupleCount(src []byte) (int, []byte, error) {
	if len(src) == 0 {
		return 0, nil, fmt.Errorf("%w tuple: empty, not even a count", ErrMalformed)
	}
	n, w, err := uvarint(src)
	if err != nil {
		return 0, nil, fmt.Errorf("tuple count: %w", err)
	}
	if n > MaxTupleValues {
		return 0, nil, fmt.Errorf("%w tuple: %d values, more than %d", ErrMalformed, n, MaxTupleValues)
	}
	// Every value takes at least its kind byte.
	if n > uint64(len(src)-w) {
		return 0, nil, fmt.Errorf("%w tuple: %d values in %d bytes", ErrMalformed, n, len(src)-w)
	}
	return int(n), src[w:], nil
}

// rawValue is a value as it lies in the bytes: kind, and its integer, float
// bits or body, which aliases the source.
type rawValue struct {
	kind Kind
	i    int64
	bits uint64
	body []byte
}

// scanValue reads one value from src without copying anything, and returns
// the bytes after it. A bool comes back as Bool with i 0 or 1.
func scanValue(src []byte) (rawValue, []byte, error) {
	if len(src) == 0 {
		return rawValue{}, nil, fmt.Errorf("%w: value missing, input ends", ErrMalformed)
	}
	k, src := Kind(src[0]), src[1:]
	switch k {
	case Null:
		return rawValue{kind: Null}, src, nil
	case False:
		return rawValue{kind: Bool}, src, nil
	case True:
		return rawValue{kind: Bool, i: 1}, src, nil
	case Int, Time:
		u, w, err := uvarint(src)
		if err != nil {
			return rawValue{}, nil, fmt.Errorf("%v: %w", k, err)
		}
		// Zig-zag, as binary.Varint: the low bit is the sign.
		i := int64(u >> 1)
		if u&1 != 0 {
			i = ^i
		}
		return rawValue{kind: k, i: i}, src[w:], nil
	case Float:
		if len(src) < 8 {
			return rawValue{}, nil, fmt.Errorf("float: %w: %d of its 8 bytes", ErrMalformed, len(src))
		}
		return rawValue{kind: Float, bits: binary.BigEndian.Uint64(src)}, src[8:], nil
	case Text, Decimal, Bytes:
		n, w, err := uvarint(src)
		if err != nil {
			return rawValue{}, nil, fmt.Errorf("%v length: %w", k, err)
		}
		if n > uint64(len(src)-w) {
			return rawValue{}, nil, fmt.Errorf("%v: %w: length %d, only %d bytes left", k, ErrMalformed, n, len(src)-w)
		}
		body := src[w : w+int(n)]
		if k != Bytes && !utf8.Valid(body) {
			return rawValue{}, nil, fmt.Errorf("%v: %w: not UTF-8", k, ErrMalformed)
		}
		return rawValue{kind: k, body: body}, src[w+int(n):], nil
	case UUID:
		if len(src) < 16 {
			return rawValue{}, nil, fmt.Errorf("uuid: %w: %d of its 16 bytes", ErrMalformed, len(src))
		}
		return rawValue{kind: UUID, body: src[:16]}, src[16:], nil
	}
	return rawValue{}, nil, fmt.Errorf("%w: unknown value kind %d", ErrMalformed, uint8(k))
}

// uvarint reads an unsigned varint in its shortest form and returns it with
// its width.
func uvarint(src []byte) (uint64, int, error) {
	u, w := binary.Uvarint(src)
	switch {
	case w == 0:
		return 0, 0, fmt.Errorf("%w: varint cut short", ErrMalformed)
	case w < 0:
		return 0, 0, fmt.Errorf("%w: varint overflows 64 bits", ErrMalformed)
	case w > 1 && src[w-1] == 0:
		return 0, 0, fmt.Errorf("%w: varint not in its shortest form", ErrMalformed)
	}
	return u, w, nil
}
