// This file holds what a host does with rows: their keys, and Scan.

package magicsync

import (
	"reflect"

	"github.com/magicsync/magicsync/internal/codec"
)

// Key is a row's key in canonical form: comparable, usable as a map key,
// and the same on both sides whichever driver stored the row. The engines
// report rows by their keys (RejectedRow.Key, replica.Received).
type Key string

// String writes the key's values, for messages and logs.
func (k Key) String() string { return codec.Key(k).String() }

// KeyOf returns a declared row's key, as the engines name the row: for
// server.WishesOf and server.Withdraw, say, or to find a row the engines
// report.
func KeyOf(c *Codecs, row Declarer) (Key, error) {
	tc, err := c.Of(row)
	if err != nil {
		return "", err
	}
	k, err := tc.KeyOf(row)
	return Key(k), err
}

// Scanner is what *sql.Rows, *sql.Row and pgx.Rows have in common.
type Scanner interface {
	Scan(dest ...any) error
}

// Scan reads one database row, whose select list is every column of T's
// table in order, into a T. T may be the row's struct type or a pointer to
// it (Scan[*Product] returns a new *Product).
func Scan[T Declarer](c *Codecs, s Scanner) (T, error) {
	var row T
	tc, err := c.Of(row)
	if err != nil {
		return row, err
	}
	vals, err := tc.ScanValues(s, nil, nil)
	if err != nil {
		return row, err
	}
	target := any(&row)
	if rv := reflect.ValueOf(&row).Elem(); rv.Kind() == reflect.Pointer {
		rv.Set(reflect.New(tc.Type))
		target = row
	}
	err = tc.Fill(target, vals)
	return row, err
}
