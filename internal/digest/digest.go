// Package digest computes the fingerprint of what one table holds, the same
// way on the server and on every replica, so that the two can tell whether
// they agree without sending the rows.
//
// The fingerprint of a set of rows is built from each row's canonical tuple
// (package wire), the bytes an upsert of that row carries:
//
//  1. Hash the tuple with SHA-256, giving 32 bytes.
//  2. Read those bytes as four unsigned 64-bit integers, big-endian: bytes
//     0–7, 8–15, 16–23 and 24–31.
//  3. Add each of the four to the matching lane of the sum, modulo 2^64.
//  4. Add one to the row count, modulo 2^64.
//
// An empty table's sum is all zeros. Removing a row subtracts its four
// integers and one from the count, so the sum is kept up to date row by
// row, and the order in which rows were added makes no difference. The sum
// travels as 40 bytes: the four lanes, then the count, each as an unsigned
// 64-bit integer, big-endian.
//
// The sum counts a row as many times as it was added: a table holds each
// key once, so adding a row again without removing its old version is a
// bug in the caller. It is a check against mistakes, not against an
// adversary: rows can be crafted to collide.
package digest

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Size is the length of a sum's bytes.
const Size = 40

// ErrMalformed is wrapped by the error Parse returns for bytes that are not
// a sum.
var ErrMalformed = errors.New("malformed digest")

// Sum is the fingerprint of a set of rows. Its zero value is the sum of no
// rows, ready to use. A Sum is a value: copy it freely.
type Sum struct {
	lanes [4]uint64
	rows  uint64
}

// Add adds the row whose canonical tuple is tuple. It does not allocate.
func (s *Sum) Add(tuple []byte) { s.AddHash(sha256.Sum256(tuple)) }

// Remove takes away the row whose canonical tuple is tuple, undoing an Add
// of the same bytes. It does not allocate.
func (s *Sum) Remove(tuple []byte) { s.RemoveHash(sha256.Sum256(tuple)) }

// Hash returns what one row adds to a sum: the SHA-256 of its canonical
// tuple. A side that keeps each row's hash can add and remove rows later
// without their tuples (AddHash, RemoveHash).
func Hash(tuple []byte) [sha256.Size]byte { return sha256.Sum256(tuple) }

// AddHash adds the row whose Hash is h.
func (s *Sum) AddHash(h [sha256.Size]byte) {
	for i := range s.lanes {
		s.lanes[i] += binary.BigEndian.Uint64(h[8*i:])
	}
	s.rows++
}

// RemoveHash takes away the row whose Hash is h.
func (s *Sum) RemoveHash(h [sha256.Size]byte) {
	for i := range s.lanes {
		s.lanes[i] -= binary.BigEndian.Uint64(h[8*i:])
	}
	s.rows--
}

// Merge adds every row of o, as if each had been added to s: the sum of a
// table is the Merge of the sums of any split of its rows.
func (s *Sum) Merge(o Sum) {
	for i := range s.lanes {
		s.lanes[i] += o.lanes[i]
	}
	s.rows += o.rows
}

// Rows returns how many rows the sum holds: the adds less the removes.
func (s Sum) Rows() uint64 { return s.rows }

// IsZero reports whether s is the sum of no rows.
func (s Sum) IsZero() bool { return s == Sum{} }

// Equal reports whether s and o fingerprint the same rows.
func (s Sum) Equal(o Sum) bool { return s == o }

// Bytes returns the sum's Size bytes, as it travels.
func (s Sum) Bytes() []byte { return s.AppendBytes(make([]byte, 0, Size)) }

// AppendBytes appends the sum's Size bytes to dst.
func (s Sum) AppendBytes(dst []byte) []byte {
	for _, l := range s.lanes {
		dst = binary.BigEndian.AppendUint64(dst, l)
	}
	return binary.BigEndian.AppendUint64(dst, s.rows)
}

// String returns the sum's bytes in hex, for logs and the dashboard.
func (s Sum) String() string { return fmt.Sprintf("%x", s.Bytes()) }

// Parse reads a sum from the bytes Bytes returned. Any Size bytes are a
// sum; any other length is malformed.
func Parse(b []byte) (Sum, error) {
	if len(b) != Size {
		return Sum{}, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(b), Size)
	}
	var s Sum
	for i := range s.lanes {
		s.lanes[i] = binary.BigEndian.Uint64(b[8*i:])
	}
	s.rows = binary.BigEndian.Uint64(b[32:])
	return s, nil
}
