package server

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// digests.go holds the digests: keeping them per group and table as a pass
// plans, and comparing a replica's with what the server expects of it.

// compareDigests records the replica's digests and, for each catalog whose
// changes are all applied, compares it with what the server expects of the
// replica's groups; a disagreement provisions the replica again, and
// mismatch says so.
func (s *Server) compareDigests(ctx context.Context, tx pgx.Tx, replica uuid.UUID, digests []*syncpb.Digest) (mismatch bool, err error) {
	if len(digests) == 0 {
		return false, nil
	}
	var provisioning, inFlight, behind bool
	var lastDown int64
	err = tx.QueryRow(ctx, s.sql.of(qDigestsState), replica).Scan(&provisioning, &lastDown, &inFlight, &behind)
	if err != nil {
		return false, fmt.Errorf("magicsync/server: comparing digests: %w", err)
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
		t := s.m.byName[d.Table]
		if t != s.m.wishes && t.tc.Mirror == codec.Setting {
			// The replica sends a setting's digest only while none of its
			// rows is on its way up.
			if provisioning {
				continue
			}
			reason, err := s.compareOwn(ctx, tx, replica, t, d)
			if err != nil {
				return false, err
			}
			if reason == "" {
				continue
			}
			return true, s.provisionAgain(ctx, tx, replica, reason)
		}
		if t.catalog && !s.m.engineTable(t) {
			// What the replica holds, for Status, whether or not it can
			// be compared now.
			if _, err := tx.Exec(ctx, s.sql.of(qKeepHeldDigest),
				replica, d.Table, int64(d.Rows), d.Sum, int64(d.AsOf)); err != nil {
				return false, fmt.Errorf("magicsync/server: recording a digest: %w", err)
			}
		}
		if !t.catalog || provisioning || inFlight || behind || int64(d.AsOf) < lastDown {
			continue
		}
		if t == s.m.wishes {
			reason, err := s.compareAnswers(ctx, tx, replica, d)
			if err != nil {
				return false, err
			}
			if reason == "" {
				continue
			}
			return true, s.provisionAgain(ctx, tx, replica, reason)
		}
		var pending bool
		var sums, refused [][]byte
		err := tx.QueryRow(ctx, s.sql.of(qDigestsExpected),
			replica, d.Table).Scan(&pending, &sums, &refused)
		if err != nil {
			return false, fmt.Errorf("magicsync/server: comparing digests: %w", err)
		}
		if pending {
			continue
		}
		// The rows the replica could not take, which a later message has
		// not brought again, it leaves out of its digest: so does the
		// server (if it records them all).
		_, whole, err := s.setAside(ctx, tx, replica, d.Table, SideReplica)
		if err != nil {
			return false, err
		}
		if !whole {
			continue
		}
		var want digest.Sum
		for _, b := range sums {
			want.Merge(parseSum(b))
		}
		for _, h := range refused {
			want.RemoveHash(storedHash(h))
		}
		if string(want.Bytes()) == string(d.Sum) {
			continue
		}
		reason := fmt.Sprintf("digest of %s disagrees: replica holds %d rows, server expects %d", d.Table, d.Rows, want.Rows())
		if want.Rows() == d.Rows {
			reason += " (with different contents)"
		}
		return true, s.provisionAgain(ctx, tx, replica, reason)
	}
	return false, nil
}

// provisionAgain marks a replica whose digest disagrees for provisioning.
func (s *Server) provisionAgain(ctx context.Context, tx pgx.Tx, replica uuid.UUID, reason string) error {
	s.log.Info("magicsync/server: provisioning a replica again", "replica", replica, "reason", reason)
	if _, err := tx.Exec(ctx, s.sql.of(qProvisionAgain), replica, reason); err != nil {
		return fmt.Errorf("magicsync/server: comparing digests: %w", err)
	}
	return nil
}

// compareOwn compares the digest of a replica's rows of one of its own
// tables (a setting) with the rows the server holds of it: the tuples of
// their non-generated columns, in declaration order, but those either
// side set aside — the server refused them for good, or the replica
// could not read them — which the replica leaves out of its digest too.
// It returns why they disagree, or "" (also when the server's record of
// the rows set aside is not whole, and it cannot tell).
func (s *Server) compareOwn(ctx context.Context, tx pgx.Tx, replica uuid.UUID, t *table, d *syncpb.Digest) (string, error) {
	aside, whole, err := s.setAside(ctx, tx, replica, t.name, SideServer, SideReplica)
	if err != nil || !whole {
		return "", err
	}
	rows, err := tx.Query(ctx, t.selectOwnRows(t.up), replica)
	if err != nil {
		return "", fmt.Errorf("magicsync/server: comparing digests of %s: %w", t.qname, err)
	}
	defer rows.Close()
	var want digest.Sum
	vals := make([]codec.Value, len(t.tc.Columns))
	var buf []byte
	for rows.Next() {
		if err := t.scanRow(rows, t.up, vals); err != nil {
			return "", fmt.Errorf("magicsync/server: comparing digests of %s: %w", t.qname, err)
		}
		if aside[string(t.tc.KeyOfRow(vals))] {
			continue
		}
		buf = t.tc.EncodeRow(buf[:0], vals, t.up)
		want.Add(buf)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("magicsync/server: comparing digests of %s: %w", t.qname, err)
	}
	if string(want.Bytes()) == string(d.Sum) {
		return "", nil
	}
	reason := fmt.Sprintf("digest of %s disagrees: replica holds %d rows, server records %d", t.name, d.Rows, want.Rows())
	if want.Rows() == d.Rows {
		reason += " (with different contents)"
	}
	return reason, nil
}

// compareAnswers compares the digest of the answers a replica holds with
// those the server records of it: the tuples (table, key, wish, state) of
// the answers to the wishes the server holds. It returns why they
// disagree, or "".
func (s *Server) compareAnswers(ctx context.Context, tx pgx.Tx, replica uuid.UUID, d *syncpb.Digest) (string, error) {
	rows, err := tx.Query(ctx, s.sql.of(qAnswersForDigest), replica)
	if err != nil {
		return "", fmt.Errorf("magicsync/server: comparing digests of answers: %w", err)
	}
	var want digest.Sum
	var tbl, keyHex string
	var wish int64
	var state int16
	if _, err := pgx.ForEachRow(rows, []any{&tbl, &keyHex, &wish, &state}, func() error {
		key, err := hex.DecodeString(keyHex)
		if err != nil {
			return err
		}
		want.Add(codec.AnswerTuple(tbl, key, uint64(wish), int(state)))
		return nil
	}); err != nil {
		return "", fmt.Errorf("magicsync/server: comparing digests of answers: %w", err)
	}
	if string(want.Bytes()) == string(d.Sum) {
		return "", nil
	}
	return fmt.Sprintf("digest of answers disagrees: replica holds %d answers, server records %d", d.Rows, want.Rows()), nil
}

// setAside reads the keys of the rows of a replica's table that the sides
// named set aside (sync_rejected), and whether that record is whole: it
// is not while one of its rows has no key, or rows beyond what is kept
// were dropped (summaryDropped).
func (s *Server) setAside(ctx context.Context, tx pgx.Tx, replica uuid.UUID, table string, sides ...Side) (map[string]bool, bool, error) {
	names := make([]string, len(sides))
	for i, side := range sides {
		names[i] = string(side)
	}
	var keys [][]byte
	var whole bool
	if err := tx.QueryRow(ctx, s.sql.of(qSetAside), replica, table, names).Scan(&keys, &whole); err != nil {
		return nil, false, fmt.Errorf("magicsync/server: comparing digests of %s: %w", table, err)
	}
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		out[string(k)] = true
	}
	return out, whole, nil
}

// forgetRefusalsFiled forgets the server's refusals of setting rows that
// an upload brought again and the server filed this time (parts, less
// the rows refused, refused): the replica no longer holds them set aside,
// and counts them in its digest again. (The refusals of records stay, for
// the record.)
func (s *Server) forgetRefusalsFiled(ctx context.Context, tx pgx.Tx, replica uuid.UUID, parts []*syncpb.TableChanges, refused []*syncpb.Rejected) error {
	no := map[string]bool{}
	for _, r := range refused {
		no[r.Table+"\x00"+string(r.Key)] = true
	}
	var tbls []string
	var keys [][]byte
	for _, tch := range parts {
		if t := s.m.byName[tch.Table]; t == nil || t == s.m.wishes || t.tc.Mirror != codec.Setting {
			continue
		}
		for _, ks := range [][][]byte{tch.UpsertKeys, tch.Deletes} {
			for _, k := range ks {
				if !no[tch.Table+"\x00"+string(k)] {
					tbls, keys = append(tbls, tch.Table), append(keys, k)
				}
			}
		}
	}
	if len(tbls) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, s.sql.of(qForgetRefusalsFiled), replica, tbls, keys); err != nil {
		return fmt.Errorf("magicsync/server: forgetting refusals: %w", err)
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
