package server

import (
	"encoding/binary"

	"github.com/magicsync/magicsync/internal/digest"
)

// sum is internal/digest's fingerprint kept from row hashes (the SHA-256 of
// each row's canonical tuple) rather than from the tuples, so that the
// planner can add and remove rows knowing only the hash it stored. Its
// arithmetic is the same, modulo 2^64 per lane, so a sum may also hold a
// difference (rows removed) and be merged into another.
type sum struct {
	lanes [4]uint64
	rows  uint64
}

func (s *sum) add(h []byte) {
	for i := range s.lanes {
		s.lanes[i] += binary.BigEndian.Uint64(h[8*i:])
	}
	s.rows++
}

func (s *sum) remove(h []byte) {
	for i := range s.lanes {
		s.lanes[i] -= binary.BigEndian.Uint64(h[8*i:])
	}
	s.rows--
}

func (s *sum) merge(o sum) {
	for i := range s.lanes {
		s.lanes[i] += o.lanes[i]
	}
	s.rows += o.rows
}

// bytes is the sum's digest.Size bytes, the layout internal/digest
// documents.
func (s sum) bytes() []byte {
	b := make([]byte, 0, digest.Size)
	for _, l := range s.lanes {
		b = binary.BigEndian.AppendUint64(b, l)
	}
	return binary.BigEndian.AppendUint64(b, s.rows)
}

func parseSum(b []byte) sum {
	var s sum
	if len(b) != digest.Size {
		return s
	}
	for i := range s.lanes {
		s.lanes[i] = binary.BigEndian.Uint64(b[8*i:])
	}
	s.rows = binary.BigEndian.Uint64(b[32:])
	return s
}
