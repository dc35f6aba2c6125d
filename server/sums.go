package server

import "github.com/magicsync/magicsync/internal/digest"

// parseSum reads a stored digest; a malformed one (never written by this
// engine) counts as the sum of no rows, so that it disagrees and heals.
func parseSum(b []byte) digest.Sum {
	s, err := digest.Parse(b)
	if err != nil {
		return digest.Sum{}
	}
	return s
}

// storedHash reads a row hash kept in sync_rows. Every stored hash is 32
// bytes; anything else reads as zeros rather than stopping a pass.
func storedHash(b []byte) [32]byte {
	var h [32]byte
	copy(h[:], b)
	return h
}
