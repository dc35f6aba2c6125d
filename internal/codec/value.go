// This file holds the canonical values: reading them from what drivers hand
// back, binding them, and the codecs between them and struct fields.

package codec

import (
	"database/sql/driver"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/wire"
)

// Value is one column value in its canonical form: the form it has on the
// wire and in digests, whichever database or driver stored it. Times are UTC
// microseconds, UUIDs 16 bytes, decimals text, and NULL is distinct from
// every value.
type Value = wire.Value

// ValueKind is the canonical type of a Value.
type ValueKind = wire.Kind

// timeLayouts are the text forms of a time SQLite drivers and hosts write.
var timeLayouts = []string{
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02T15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999 -0700 MST",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04",
	"2006-01-02T15:04",
	"2006-01-02",
}

// The times a canonical time can hold: int64 microseconds either side of
// the Unix epoch, years -290308 to 294247.
var (
	minTime = time.UnixMicro(math.MinInt64)
	maxTime = time.UnixMicro(math.MaxInt64)
)

// timeValue is t as its canonical value, UTC microseconds rounded down. A
// time beyond what they can hold is refused: its microseconds would wrap.
func timeValue(t time.Time) (Value, error) {
	if t.Before(minTime) || t.After(maxTime) {
		return Value{}, fmt.Errorf("%v is beyond the times that travel (years %d to %d)", t, minTime.Year(), maxTime.Year())
	}
	return wire.TimeValue(t.UnixMicro()), nil
}

// Canonical converts a value read from a database (through database/sql or
// pgx, scanned into an any) into the canonical form of this column.
func (c *Column) Canonical(src any) (Value, error) {
	v, err := canonical(c.Kind, src)
	if err != nil {
		return Value{}, fmt.Errorf("%w: column %q: %w", ErrBadValue, c.Name, err)
	}
	return v, nil
}

func canonical(kind ValueKind, src any) (Value, error) {
	if src == nil {
		return wire.NullValue(), nil
	}
	if valuer, ok := src.(driver.Valuer); ok {
		if _, isUUID := src.(uuid.UUID); !isUUID {
			if _, isTime := src.(time.Time); !isTime {
				inner, err := valuer.Value()
				if err != nil {
					return Value{}, err
				}
				return canonical(kind, inner)
			}
		}
	}
	var v Value
	var ok bool
	var err error
	switch kind {
	case wire.Text:
		v, ok, err = canonicalText(src)
	case wire.Decimal:
		v, ok, err = canonicalDecimal(src)
	case wire.Int:
		v, ok, err = canonicalInt(src)
	case wire.Float:
		v, ok, err = canonicalFloat(src)
	case wire.Bool:
		v, ok, err = canonicalBool(src)
	case wire.Bytes:
		v, ok, err = canonicalBytes(src)
	case wire.Time:
		v, ok, err = canonicalTime(src)
	case wire.UUID:
		v, ok, err = canonicalUUID(src)
	}
	if ok {
		return v, err
	}
	return Value{}, fmt.Errorf("cannot read %T as %v", src, kind)
}

// The canonicalKind functions read a driver's value as that kind's
// canonical value; ok is false for a Go type the kind does not read.

func canonicalText(src any) (Value, bool, error) {
	switch s := src.(type) {
	case string:
		v, err := textValue(wire.Text, s)
		return v, true, err
	case []byte:
		v, err := textValue(wire.Text, string(s))
		return v, true, err
	}
	return Value{}, false, nil
}

func canonicalDecimal(src any) (Value, bool, error) {
	var text string
	switch s := src.(type) {
	case string:
		text = s
	case []byte:
		text = string(s)
	case int64:
		return wire.DecimalValue(strconv.FormatInt(s, 10)), true, nil
	case float64:
		return wire.DecimalValue(strconv.FormatFloat(s, 'f', -1, 64)), true, nil
	case fmt.Stringer:
		text = s.String()
	default:
		return Value{}, false, nil
	}
	v, err := textValue(wire.Decimal, text)
	return v, true, err
}

func canonicalInt(src any) (Value, bool, error) {
	switch i := src.(type) {
	case int64:
		return wire.IntValue(i), true, nil
	case int32:
		return wire.IntValue(int64(i)), true, nil
	case int16:
		return wire.IntValue(int64(i)), true, nil
	case int8:
		return wire.IntValue(int64(i)), true, nil
	case int:
		return wire.IntValue(int64(i)), true, nil
	case float64:
		if i == math.Trunc(i) && math.Abs(i) < 1<<63 {
			return wire.IntValue(int64(i)), true, nil
		}
	case bool:
		if i {
			return wire.IntValue(1), true, nil
		}
		return wire.IntValue(0), true, nil
	case string:
		v, err := parseInt(i)
		return v, true, err
	case []byte:
		v, err := parseInt(string(i))
		return v, true, err
	}
	return Value{}, false, nil
}

func canonicalFloat(src any) (Value, bool, error) {
	switch f := src.(type) {
	case float64:
		return wire.FloatValue(f), true, nil
	case float32:
		return wire.FloatValue(float64(f)), true, nil
	case int64:
		return wire.FloatValue(float64(f)), true, nil
	case string:
		v, err := parseFloat(f)
		return v, true, err
	case []byte:
		v, err := parseFloat(string(f))
		return v, true, err
	}
	return Value{}, false, nil
}

func canonicalBool(src any) (Value, bool, error) {
	switch b := src.(type) {
	case bool:
		return wire.BoolValue(b), true, nil
	case int64:
		return wire.BoolValue(b != 0), true, nil
	case string:
		v, err := parseBool(b)
		return v, true, err
	case []byte:
		v, err := parseBool(string(b))
		return v, true, err
	}
	return Value{}, false, nil
}

func canonicalBytes(src any) (Value, bool, error) {
	switch b := src.(type) {
	case []byte:
		return wire.BytesValue(append([]byte{}, b...)), true, nil
	case string:
		return wire.BytesValue([]byte(b)), true, nil
	}
	return Value{}, false, nil
}

func canonicalTime(src any) (Value, bool, error) {
	var v Value
	var err error
	switch t := src.(type) {
	case time.Time:
		v, err = timeValue(t)
	case string:
		v, err = parseTime(t)
	case []byte:
		v, err = parseTime(string(t))
	default:
		return Value{}, false, nil
	}
	return v, true, err
}

func canonicalUUID(src any) (Value, bool, error) {
	switch u := src.(type) {
	case uuid.UUID:
		return wire.UUIDValue(u), true, nil
	case [16]byte:
		return wire.UUIDValue(u), true, nil
	case []byte:
		if len(u) == 16 {
			var a [16]byte
			copy(a[:], u)
			return wire.UUIDValue(a), true, nil
		}
		v, err := parseUUID(string(u))
		return v, true, err
	case string:
		v, err := parseUUID(u)
		return v, true, err
	}
	return Value{}, false, nil
}

// textValue is s as text or a decimal. Only valid UTF-8 travels: the wire
// refuses anything else as malformed, so a row holding it is refused here,
// where it can be named, and not by the receiver of a whole message.
func textValue(kind ValueKind, s string) (Value, error) {
	if !utf8.ValidString(s) {
		return Value{}, fmt.Errorf("%q is not valid UTF-8; keep bytes in a []byte field", s)
	}
	return Value{Kind: kind, S: s}, nil
}

func parseInt(s string) (Value, error) {
	i, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return Value{}, fmt.Errorf("%q is no integer", s)
	}
	return wire.IntValue(i), nil
}

func parseFloat(s string) (Value, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return Value{}, fmt.Errorf("%q is no number", s)
	}
	return wire.FloatValue(f), nil
}

func parseBool(s string) (Value, error) {
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return Value{}, fmt.Errorf("%q is no bool", s)
	}
	return wire.BoolValue(b), nil
}

func parseUUID(s string) (Value, error) {
	u, err := uuid.Parse(s)
	if err != nil {
		return Value{}, fmt.Errorf("%q is no UUID", s)
	}
	return wire.UUIDValue(u), nil
}

func parseTime(s string) (Value, error) {
	s = strings.TrimSpace(s)
	// Go's time.Time.String adds a monotonic clock reading; it is no part of the time.
	if i := strings.Index(s, " m="); i >= 0 {
		s = s[:i]
	}
	refuse := fmt.Errorf("%q is no time this engine reads (write times through the driver as time.Time)", s)
	text, cycles, ok := standInYear(s)
	if !ok {
		return Value{}, refuse
	}
	t, ok := parseTimeText(text)
	if !ok {
		return Value{}, refuse
	}
	v, err := timeValue(t)
	if err != nil {
		return Value{}, err
	}
	if cycles == 0 {
		return v, nil
	}
	// Move the stand-in year back to the year written, whole 400-year
	// cycles of the Gregorian calendar away, each the same number of days:
	// in two halves, as the whole shift alone may not fit 64 bits when the
	// time does.
	const perCycle int64 = 146097 * 24 * 3600 * 1_000_000
	micros := v.I
	for _, c := range []int64{cycles / 2, cycles - cycles/2} {
		if c > math.MaxInt64/perCycle || c < math.MinInt64/perCycle {
			return Value{}, fmt.Errorf("%q is beyond the times that travel (years %d to %d)", s, minTime.Year(), maxTime.Year())
		}
		shift := c * perCycle
		if (shift > 0 && micros > math.MaxInt64-shift) || (shift < 0 && micros < math.MinInt64-shift) {
			return Value{}, fmt.Errorf("%q is beyond the times that travel (years %d to %d)", s, minTime.Year(), maxTime.Year())
		}
		micros += shift
	}
	return wire.TimeValue(micros), nil
}

// standInYear reads a year time.Parse does not: one of five digits or more
// or below zero, as Go writes a time.Time of year 10000 or 1 BC
// ("10000-01-01 00:00:00 +0000 UTC", "-0001-12-31 …"). It returns s with a
// four-digit year standing in, at the same place in the Gregorian
// calendar's 400-year cycle, and how many cycles the year written is from
// it. ok is false for a year too far off to be a time that travels.
func standInYear(s string) (text string, cycles int64, ok bool) {
	neg := strings.HasPrefix(s, "-")
	start := 0
	if neg {
		start = 1
	}
	end := start
	for end < len(s) && '0' <= s[end] && s[end] <= '9' {
		end++
	}
	digits := end - start
	if end == len(s) || s[end] != '-' || (neg && digits < 4) || (!neg && (digits <= 4 || s[0] == '0')) {
		return s, 0, true // four digits, or no year at all: the layouts decide
	}
	if digits > 9 {
		return s, 0, false
	}
	year, err := strconv.ParseInt(s[:end], 10, 64)
	if err != nil {
		return s, 0, false
	}
	stand := 2000 + (year%400+400)%400
	return strconv.FormatInt(stand, 10) + s[end:], (year - stand) / 400, true
}

// parseTimeText reads a time of a four-digit year in one of the forms
// drivers and hosts write.
func parseTimeText(s string) (time.Time, bool) {
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	// modernc.org/sqlite writes a time.Time as its String(): date, clock,
	// numeric offset, then the zone's name, which time.Parse reads only when
	// it is an abbreviation of three to five capitals (not "UTC-7", "X" or
	// "Pacific Time"). The offset is what places the instant; drop the name.
	if parts := strings.SplitN(s, " ", 4); len(parts) == 4 {
		if t, err := time.Parse("2006-01-02 15:04:05.999999999 -0700", strings.Join(parts[:3], " ")); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// Arg is v as a Go value to bind to a statement parameter, in the form the
// host itself would bind: time.Time in UTC, uuid.UUID, string, int64,
// float64, bool, []byte, or nil for NULL.
func Arg(v Value) any {
	switch v.Kind {
	case wire.Null:
		return nil
	case wire.Bool, wire.True, wire.False:
		return v.I != 0 || v.Kind == wire.True
	case wire.Int:
		return v.I
	case wire.Float:
		return v.F
	case wire.Text, wire.Decimal:
		return v.S
	case wire.Bytes:
		return v.B
	case wire.Time:
		return time.UnixMicro(v.I).UTC()
	case wire.UUID:
		return uuid.UUID(v.U)
	}
	return nil
}

// fieldCodec converts between one struct field and its canonical value.
type fieldCodec struct {
	kind     ValueKind
	nullable bool
	get      func(reflect.Value) (Value, error)
	set      func(reflect.Value, Value) error
}

var (
	timeType    = reflect.TypeFor[time.Time]()
	uuidType    = reflect.TypeFor[uuid.UUID]()
	bytesType   = reflect.TypeFor[[]byte]()
	valuerType  = reflect.TypeFor[driver.Valuer]()
	scannerType = reflect.TypeFor[interface{ Scan(any) error }]()
)

// codecFor finds how a field of type t travels; ok is false for types the
// engine does not support.
func codecFor(t reflect.Type) (fieldCodec, bool) {
	if fc, ok := scalarCodec(t); ok {
		return fc, true
	}
	if t.Kind() == reflect.Pointer {
		// A nil pointer is NULL; a pointer to a type that is nullable itself
		// (a decimal Valuer, []byte, sql.NullString) holds what that type
		// holds, NULL included, and NULL fills in as a nil pointer.
		inner, ok := codecFor(t.Elem())
		if !ok {
			return fieldCodec{}, false
		}
		return pointerCodec(t, inner), true
	}
	if fc, ok := nullWrapperCodec(t); ok {
		return fc, true
	}
	if t.Implements(valuerType) && reflect.PointerTo(t).Implements(scannerType) {
		return valuerCodec(), true
	}
	return fieldCodec{}, false
}

func scalarCodec(t reflect.Type) (fieldCodec, bool) {
	switch t {
	case timeType:
		return timeCodec(), true
	case uuidType:
		return uuidCodec(), true
	}
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 && t.ConvertibleTo(bytesType) {
		return bytesCodec(), true
	}
	switch t.Kind() {
	case reflect.String:
		return stringCodec(), true
	case reflect.Bool:
		return boolCodec(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return intCodec(), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return uintCodec(), true
	case reflect.Float32, reflect.Float64:
		return floatCodec(), true
	}
	return fieldCodec{}, false
}

// timeCodec reads and writes a time.Time, in UTC microseconds.
func timeCodec() fieldCodec {
	return fieldCodec{kind: wire.Time,
		get: func(f reflect.Value) (Value, error) {
			return timeValue(f.Interface().(time.Time))
		},
		set: func(f reflect.Value, v Value) error {
			if v.Kind != wire.Time {
				return kindMismatch(v, wire.Time)
			}
			f.Set(reflect.ValueOf(time.UnixMicro(v.I).UTC()))
			return nil
		}}
}

// uuidCodec reads and writes a uuid.UUID.
func uuidCodec() fieldCodec {
	return fieldCodec{kind: wire.UUID,
		get: func(f reflect.Value) (Value, error) {
			return wire.UUIDValue(f.Interface().(uuid.UUID)), nil
		},
		set: func(f reflect.Value, v Value) error {
			if v.Kind != wire.UUID {
				return kindMismatch(v, wire.UUID)
			}
			f.Set(reflect.ValueOf(uuid.UUID(v.U)))
			return nil
		}}
}

// bytesCodec reads and writes a byte slice; nil is NULL.
func bytesCodec() fieldCodec {
	return fieldCodec{kind: wire.Bytes, nullable: true,
		get: func(f reflect.Value) (Value, error) {
			if f.IsNil() {
				return wire.NullValue(), nil
			}
			return wire.BytesValue(f.Bytes()), nil
		},
		set: func(f reflect.Value, v Value) error {
			switch v.Kind {
			case wire.Null:
				f.SetZero()
			case wire.Bytes:
				f.SetBytes(append([]byte{}, v.B...))
			default:
				return kindMismatch(v, wire.Bytes)
			}
			return nil
		}}
}

// stringCodec reads and writes a string (a decimal as its text too).
func stringCodec() fieldCodec {
	return fieldCodec{kind: wire.Text,
		get: func(f reflect.Value) (Value, error) { return textValue(wire.Text, f.String()) },
		set: func(f reflect.Value, v Value) error {
			if v.Kind != wire.Text && v.Kind != wire.Decimal {
				return kindMismatch(v, wire.Text)
			}
			f.SetString(v.S)
			return nil
		}}
}

// boolCodec reads and writes a bool.
func boolCodec() fieldCodec {
	return fieldCodec{kind: wire.Bool,
		get: func(f reflect.Value) (Value, error) { return wire.BoolValue(f.Bool()), nil },
		set: func(f reflect.Value, v Value) error {
			if v.Kind != wire.Bool {
				return kindMismatch(v, wire.Bool)
			}
			f.SetBool(v.I != 0)
			return nil
		}}
}

// intCodec reads and writes a signed integer of any size, refusing a
// value its field overflows.
func intCodec() fieldCodec {
	return fieldCodec{kind: wire.Int,
		get: func(f reflect.Value) (Value, error) { return wire.IntValue(f.Int()), nil },
		set: func(f reflect.Value, v Value) error {
			if v.Kind != wire.Int {
				return kindMismatch(v, wire.Int)
			}
			if f.OverflowInt(v.I) {
				return fmt.Errorf("%d overflows %v", v.I, f.Type())
			}
			f.SetInt(v.I)
			return nil
		}}
}

// uintCodec reads and writes an unsigned integer of any size, refusing a
// value over the largest integer a database holds, or its field overflows.
func uintCodec() fieldCodec {
	return fieldCodec{kind: wire.Int,
		get: func(f reflect.Value) (Value, error) {
			u := f.Uint()
			if u > math.MaxInt64 {
				return Value{}, fmt.Errorf("%d is over the largest integer a database holds (%d)", u, int64(math.MaxInt64))
			}
			return wire.IntValue(int64(u)), nil
		},
		set: func(f reflect.Value, v Value) error {
			if v.Kind != wire.Int {
				return kindMismatch(v, wire.Int)
			}
			if v.I < 0 || f.OverflowUint(uint64(v.I)) {
				return fmt.Errorf("%d overflows %v", v.I, f.Type())
			}
			f.SetUint(uint64(v.I))
			return nil
		}}
}

// floatCodec reads and writes a float (an integer read as one too).
func floatCodec() fieldCodec {
	return fieldCodec{kind: wire.Float,
		get: func(f reflect.Value) (Value, error) { return wire.FloatValue(f.Float()), nil },
		set: func(f reflect.Value, v Value) error {
			switch v.Kind {
			case wire.Float:
				f.SetFloat(v.F)
			case wire.Int:
				f.SetFloat(float64(v.I))
			default:
				return kindMismatch(v, wire.Float)
			}
			return nil
		}}
}

func pointerCodec(t reflect.Type, inner fieldCodec) fieldCodec {
	return fieldCodec{kind: inner.kind, nullable: true,
		get: func(f reflect.Value) (Value, error) {
			if f.IsNil() {
				return wire.NullValue(), nil
			}
			return inner.get(f.Elem())
		},
		set: func(f reflect.Value, v Value) error {
			if v.Kind == wire.Null {
				f.SetZero()
				return nil
			}
			p := reflect.New(t.Elem())
			if err := inner.set(p.Elem(), v); err != nil {
				return err
			}
			f.Set(p)
			return nil
		}}
}

// nullWrapperCodec handles sql.NullString and its kin, sql.Null[T] and
// uuid.NullUUID: structs of a value and a Valid flag.
func nullWrapperCodec(t reflect.Type) (fieldCodec, bool) {
	pkg := t.PkgPath()
	if t.Kind() != reflect.Struct || t.NumField() != 2 || (pkg != "database/sql" && pkg != "github.com/google/uuid") {
		return fieldCodec{}, false
	}
	if valid := t.Field(1); valid.Name != "Valid" || valid.Type.Kind() != reflect.Bool {
		return fieldCodec{}, false
	}
	// The wrapped type may be any supported one: sql.Null[[]byte] and
	// sql.Null[Decimal] included. Unwrapped, it is read as the host's driver
	// would bind it, so Valid with a NULL inside (a nil []byte) is NULL.
	inner, ok := codecFor(t.Field(0).Type)
	if !ok {
		return fieldCodec{}, false
	}
	return fieldCodec{kind: inner.kind, nullable: true,
		get: func(f reflect.Value) (Value, error) {
			if !f.Field(1).Bool() {
				return wire.NullValue(), nil
			}
			return inner.get(f.Field(0))
		},
		set: func(f reflect.Value, v Value) error {
			if v.Kind == wire.Null {
				f.SetZero()
				return nil
			}
			if err := inner.set(f.Field(0), v); err != nil {
				return err
			}
			f.Field(1).SetBool(true)
			return nil
		}}, true
}

// valuerCodec handles types that are driver.Valuer and sql.Scanner, such as
// decimals: they travel as text, the way they print.
func valuerCodec() fieldCodec {
	return fieldCodec{kind: wire.Decimal, nullable: true,
		get: func(f reflect.Value) (Value, error) {
			inner, err := f.Interface().(driver.Valuer).Value()
			if err != nil {
				return Value{}, err
			}
			return canonical(wire.Decimal, inner)
		},
		set: func(f reflect.Value, v Value) error {
			var src any
			switch v.Kind {
			case wire.Null:
			case wire.Decimal, wire.Text:
				src = v.S
			default:
				return kindMismatch(v, wire.Decimal)
			}
			p := reflect.New(f.Type())
			if err := p.Interface().(interface{ Scan(any) error }).Scan(src); err != nil {
				return err
			}
			f.Set(p.Elem())
			return nil
		}}
}

func kindMismatch(v Value, want ValueKind) error {
	if v.Kind == wire.Null {
		return fmt.Errorf("NULL where %v is required", want)
	}
	return fmt.Errorf("a %v where %v is required", v.Kind, want)
}
