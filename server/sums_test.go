package server

import (
	"crypto/sha256"
	"testing"

	"github.com/magicsync/magicsync/internal/digest"
)

// The planner's sums, kept from hashes, must be the replicas' digests.
func TestSumMatchesDigest(t *testing.T) {
	var d digest.Sum
	var s sum
	for _, row := range []string{"a", "b", "c", "d"} {
		d.Add([]byte(row))
		h := sha256.Sum256([]byte(row))
		s.add(h[:])
	}
	h := sha256.Sum256([]byte("b"))
	d.Remove([]byte("b"))
	s.remove(h[:])
	if string(s.bytes()) != string(d.Bytes()) {
		t.Fatalf("sum %x, digest %x", s.bytes(), d.Bytes())
	}
	var split sum
	split.merge(s)
	if parseSum(split.bytes()) != s {
		t.Fatal("parse/merge round trip")
	}
}
