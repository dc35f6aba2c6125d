package server

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// digests.go holds the digests: keeping them per group and table as a pass
// plans, and comparing a replica's with what the server expects of it.

// compareDigests records the replica's digests and, for each catalog whose
// changes are all applied, compares it with what the server expects of the
// replica's groups; a disagreement provisions the replica again.
func (s *Server) compareDigests(ctx context.Context, tx pgx.Tx, replica uuid.UUID, digests []*syncpb.Digest) error {
	if len(digests) == 0 {
		return nil
	}
	var provisioning, inFlight, behind bool
	var lastDown int64
	err := tx.QueryRow(ctx, s.sql.of(qDigestsState), replica).Scan(&provisioning, &lastDown, &inFlight, &behind)
	if err != nil {
		return fmt.Errorf("magicsync/server: comparing digests: %w", err)
	}
	// One digest per table, the last: nothing is kept of tables the server
	// does not declare, and a table named twice costs no more.
	last := map[string]*syncpb.Digest{}
	var order []string
	for _, d := range digests {
		if s.m.byName[d.Table] == nil {
			continue
		}
		if last[d.Table] == nil {
			order = append(order, d.Table)
		}
		last[d.Table] = d
	}
	for _, name := range order {
		d := last[name]
		if _, err := tx.Exec(ctx, s.sql.of(qKeepHeldDigest),
			replica, d.Table, int64(d.Rows), d.Sum, int64(d.AsOf)); err != nil {
			return fmt.Errorf("magicsync/server: recording a digest: %w", err)
		}
		t := s.m.byName[d.Table]
		if !t.catalog || provisioning || inFlight || behind || int64(d.AsOf) < lastDown {
			continue
		}
		var pending bool
		var sums [][]byte
		err := tx.QueryRow(ctx, s.sql.of(qDigestsExpected),
			replica, d.Table).Scan(&pending, &sums)
		if err != nil {
			return fmt.Errorf("magicsync/server: comparing digests: %w", err)
		}
		if pending {
			continue
		}
		var want digest.Sum
		for _, b := range sums {
			want.Merge(parseSum(b))
		}
		if string(want.Bytes()) == string(d.Sum) {
			continue
		}
		reason := fmt.Sprintf("digest of %s disagrees: replica holds %d rows, server expects %d", d.Table, d.Rows, want.Rows())
		if want.Rows() == d.Rows {
			reason += " (with different contents)"
		}
		s.log.Info("magicsync/server: provisioning a replica again", "replica", replica, "reason", reason)
		if _, err := tx.Exec(ctx, s.sql.of(qProvisionAgain), replica, reason); err != nil {
			return err
		}
		return nil
	}
	return nil
}

// digestKey names the digest of one table in one group.
type digestKey struct {
	grp int64
	tbl string
}

// digest returns what the pass changes of the digest of a table in a
// group; writePass merges the stored digest into it.
func (p *passState) digest(grp int64, tbl string) *digest.Sum {
	k := digestKey{grp, tbl}
	d := p.digests[k]
	if d == nil {
		d = &digest.Sum{}
		p.digests[k] = d
	}
	return d
}

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

// rowHash is the hash of a down tuple, as sync_rows keeps it and digests
// add it.
func rowHash(tuple []byte) [32]byte { return digest.Hash(tuple) }
