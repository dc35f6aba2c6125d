// This file holds keys and what the engines do with rows: reading a row
// into canonical values and back, binding, scanning and encoding it.

package codec

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/magicsync/magicsync/internal/wire"
)

// Key is a row's key in canonical form: comparable, usable as a map key,
// and the same on both sides whichever driver stored the row. The root
// package's Key has the same bytes; the engines convert at their APIs.
type Key string

// String writes the key's values, for messages and logs.
func (k Key) String() string {
	vals, err := wire.DecodeTuple([]byte(k), nil)
	if err != nil {
		return fmt.Sprintf("key(%x)", string(k))
	}
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = formatValue(v)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// KeyOfValues makes a Key of key values, in key order.
func KeyOfValues(vals ...Value) Key { return Key(wire.AppendTuple(nil, vals)) }

// Values decodes the key into its values.
func (k Key) Values() ([]Value, error) { return wire.DecodeTuple([]byte(k), nil) }

// formatValue writes one value of a key, for Key.String.
func formatValue(v Value) string {
	a := Arg(v)
	switch v.Kind {
	case wire.Null:
		return "NULL"
	case wire.Text, wire.Decimal:
		return fmt.Sprintf("%q", v.S)
	case wire.Time:
		return a.(interface{ Format(string) string }).Format("2006-01-02T15:04:05.999999Z")
	}
	return fmt.Sprint(a)
}

// Scanner is what *sql.Rows, *sql.Row and pgx.Rows have in common.
type Scanner interface {
	Scan(dest ...any) error
}

// ColumnNames lists the names of the columns at positions idx, or of every
// column when idx is nil.
func (tc *TableCodec) ColumnNames(idx []int) []string {
	if idx == nil {
		names := make([]string, len(tc.Columns))
		for i := range tc.Columns {
			names[i] = tc.Columns[i].Name
		}
		return names
	}
	names := make([]string, len(idx))
	for i, j := range idx {
		names[i] = tc.Columns[j].Name
	}
	return names
}

// QualifiedName is the table's quoted schema-qualified name, for PostgreSQL.
func (tc *TableCodec) QualifiedName() string {
	return QuoteIdent(tc.Schema) + "." + QuoteIdent(tc.Name)
}

// Values reads a row (a struct of the table's type, or a pointer to one)
// into canonical values, one per column, appended to dst[:0].
func (tc *TableCodec) Values(row any, dst []Value) ([]Value, error) {
	rv, err := tc.structValue(row)
	if err != nil {
		return dst, err
	}
	dst = dst[:0]
	for i := range tc.Columns {
		c := &tc.Columns[i]
		v, err := c.codec.get(rv.FieldByIndex(c.index))
		if err != nil {
			return dst, fmt.Errorf("%w: %s.%s: %w", ErrBadValue, tc.Type, c.Field, err)
		}
		dst = append(dst, v)
	}
	return dst, nil
}

// Fill sets the fields of the struct row points at from canonical values,
// one per column.
func (tc *TableCodec) Fill(row any, vals []Value) error {
	rv := reflect.ValueOf(row)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Type() != tc.Type {
		return fmt.Errorf("magicsync: Fill needs a *%v, not %T", tc.Type, row)
	}
	if len(vals) != len(tc.Columns) {
		return fmt.Errorf("%w: %d values for the %d columns of %q", ErrBadValue, len(vals), len(tc.Columns), tc.Name)
	}
	rv = rv.Elem()
	for i := range tc.Columns {
		c := &tc.Columns[i]
		if err := c.Set(fieldByIndexAlloc(rv, c.index), vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// Set stores v into field, a settable reflect.Value of the column's field.
func (c *Column) Set(field reflect.Value, v Value) error {
	if v.Kind == wire.Null && !c.Nullable {
		return fmt.Errorf("%w: column %q: NULL, but %s cannot hold it", ErrBadValue, c.Name, c.Field)
	}
	if err := c.codec.set(field, v); err != nil {
		return fmt.Errorf("%w: column %q: %w", ErrBadValue, c.Name, err)
	}
	return nil
}

// fieldByIndexAlloc is v.FieldByIndex(index), allocating the embedded
// structs behind nil pointers on the way.
func fieldByIndexAlloc(v reflect.Value, index []int) reflect.Value {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v
}

// structValue is the struct a row is or points at, checked to be of the
// table's type.
func (tc *TableCodec) structValue(row any) (reflect.Value, error) {
	rv := reflect.ValueOf(row)
	if rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv = rv.Elem()
	}
	if !rv.IsValid() || rv.Type() != tc.Type {
		return reflect.Value{}, fmt.Errorf("magicsync: a %T is not a row of %q (%v)", row, tc.Name, tc.Type)
	}
	return rv, nil
}

// KeyOf is the key of a row (a struct of the table's type, or a pointer).
func (tc *TableCodec) KeyOf(row any) (Key, error) {
	vals, err := tc.Values(row, nil)
	if err != nil {
		return "", err
	}
	return tc.KeyOfRow(vals), nil
}

// KeyOfRow is the key of a row given as canonical values, one per column.
func (tc *TableCodec) KeyOfRow(vals []Value) Key {
	var buf [64]byte
	b := appendUvarintCount(buf[:0], len(tc.KeyIndex))
	for _, i := range tc.KeyIndex {
		b = wire.AppendValue(b, vals[i])
	}
	return Key(b)
}

// appendUvarintCount appends a tuple's count of values, as a uvarint.
func appendUvarintCount(b []byte, n int) []byte {
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(b, byte(n))
}

// Args is the row as values to bind to a statement, one per column (or per
// column of idx, when it is not nil), in the Go types the host would bind.
func (tc *TableCodec) Args(row any, idx []int) ([]any, error) {
	vals, err := tc.Values(row, nil)
	if err != nil {
		return nil, err
	}
	if idx == nil {
		idx = make([]int, len(vals))
		for i := range idx {
			idx[i] = i
		}
	}
	args := make([]any, len(idx))
	for i, j := range idx {
		args[i] = Arg(vals[j])
	}
	return args, nil
}

// ScanValues scans one database row whose select list is the columns at
// positions idx (every column when idx is nil), in that order, and returns
// their canonical values appended to dst[:0].
func (tc *TableCodec) ScanValues(s Scanner, idx []int, dst []Value) ([]Value, error) {
	n := len(tc.Columns)
	if idx != nil {
		n = len(idx)
	}
	raw := make([]any, n)
	ptrs := make([]any, n)
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	if err := s.Scan(ptrs...); err != nil {
		return dst, err
	}
	dst = dst[:0]
	for i, src := range raw {
		j := i
		if idx != nil {
			j = idx[i]
		}
		v, err := tc.Columns[j].Canonical(src)
		if err != nil {
			return dst, fmt.Errorf("table %q: %w", tc.Name, err)
		}
		dst = append(dst, v)
	}
	return dst, nil
}

// EncodeRow appends the canonical tuple of a row's columns (all of them, or
// those at idx) to dst.
func (tc *TableCodec) EncodeRow(dst []byte, vals []Value, idx []int) []byte {
	if idx == nil {
		return wire.AppendTuple(dst, vals)
	}
	dst = appendUvarintCount(dst, len(idx))
	for _, i := range idx {
		dst = wire.AppendValue(dst, vals[i])
	}
	return dst
}

// DecodeTuple decodes a canonical tuple into values, appended to dst[:0].
func DecodeTuple(tuple []byte, dst []Value) ([]Value, error) {
	vals, err := wire.DecodeTuple(tuple, dst)
	if err != nil {
		return vals, fmt.Errorf("%w: %w", ErrBadValue, err)
	}
	return vals, nil
}

// CheckValue reports whether v can be held by the column: the right kind,
// or NULL where the column is nullable.
func (c *Column) CheckValue(v Value) error {
	if v.Kind == wire.Null {
		if !c.Nullable {
			return fmt.Errorf("%w: column %q: NULL, but %s cannot hold it", ErrBadValue, c.Name, c.Field)
		}
		return nil
	}
	if v.Kind == c.Kind || (c.Kind == wire.Decimal && v.Kind == wire.Text) || (c.Kind == wire.Float && v.Kind == wire.Int) {
		return nil
	}
	return fmt.Errorf("%w: column %q: a %v where %v is required", ErrBadValue, c.Name, v.Kind, c.Kind)
}
