// The digests the main lane sends now and then (DigestsEvery): of each
// catalog's rows as of the last message applied, of the settings, and of the
// answers to wishes, for the server to compare with its own.

package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// digestsDue says whether the digests are due, last sent at digestsAt.
// They are due too when they were sent after now: the clock stepped back
// since, and waiting for it to catch up would switch the safety net off
// for as long as the step.
func (r *Replica) digestsDue(now time.Time, digestsAt int64) bool {
	since := now.Sub(time.UnixMicro(digestsAt))
	return r.settings.DigestsEvery > 0 && (since < 0 || since >= r.settings.DigestsEvery)
}

// downColumns are the columns of a catalog the server sends, and that
// digests cover: all but generated and replica_owned.
func downColumns(tc *codec.TableCodec) []int {
	var idx []int
	for i, c := range tc.Columns {
		if !c.Generated && !c.ReplicaOwned {
			idx = append(idx, i)
		}
	}
	return idx
}

// digests fingerprints what the replica holds, as of message asOf: every
// catalog, less the rows it could not take (catalogDigest); every setting
// none of whose rows is on its way up, less the rows set aside
// (settingDigest); and the answers to wishes the server confirmed, while
// none is on its way up. It runs in gather's transaction, so that what it
// finds on its way up is what the digest leaves out.
func (r *Replica) digests(ctx context.Context, conn *sql.Conn, asOf uint64) ([]*syncpb.Digest, error) {
	var out []*syncpb.Digest
	without, wait, err := r.refusedCatalogRows(ctx, conn)
	if err != nil {
		return nil, err
	}
	for _, tc := range r.catalogs {
		if wait[tc.Name] {
			continue
		}
		d, err := tableDigest(ctx, conn, tc, downColumns(tc), asOf, without[tc.Name])
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	for _, tc := range r.own {
		if tc.Mirror != codec.Setting {
			continue
		}
		d, err := r.settingDigest(ctx, conn, tc, asOf)
		if err != nil {
			return nil, err
		}
		if d != nil {
			out = append(out, d)
		}
	}
	d, err := answersDigest(ctx, conn, asOf)
	if err != nil {
		return nil, err
	}
	if d != nil {
		out = append(out, d)
	}
	return out, nil
}

// tableDigest fingerprints the rows of a table: the tuples of its columns
// at cols, each as the engine sends it (down for a catalog, up for an own
// table), but those whose canonical key is in without. An own table's
// rows set aside (settingDigest) are left out by the query itself, for
// some may not read.
func tableDigest(ctx context.Context, conn *sql.Conn, tc *codec.TableCodec, cols []int, asOf uint64, without map[string]bool) (*syncpb.Digest, error) {
	q := selectColumns(tc, cols)
	var args []any
	switch {
	case tc.Mirror == codec.Catalog && tc.Retired != "":
		// The server counts no retired row: it sends none, and a row the
		// replica keeps retired (sync_retained) is not one the server
		// holds it to have.
		q += fmt.Sprintf(" WHERE coalesce(%s, 0) = 0", codec.QuoteIdent(tc.Retired))
	case tc.Mirror != codec.Catalog:
		q += fmt.Sprintf(" WHERE %s NOT IN (%s)", notedKey(tc, codec.QuoteIdent(tc.Name)), selectSetAsideKeys)
		args = append(args, tc.Name)
	}
	// Where the key's columns are among those read, for without.
	var keyAt []int
	if len(without) > 0 {
		for _, k := range tc.KeyIndex {
			keyAt = append(keyAt, slices.Index(cols, k))
		}
	}
	rows, err := conn.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var sum digest.Sum
	var vals, key []codec.Value
	var buf []byte
	for rows.Next() {
		vals, err = tc.ScanValues(rows, cols, vals)
		if err != nil {
			return nil, err
		}
		if keyAt != nil {
			key = key[:0]
			for _, at := range keyAt {
				key = append(key, vals[at])
			}
			if without[string(codec.KeyOfValues(key...))] {
				continue
			}
		}
		buf = tc.EncodeRow(buf[:0], vals, nil)
		sum.Add(buf)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return &syncpb.Digest{Table: tc.Name, Sum: sum.Bytes(), Rows: sum.Rows(), AsOf: asOf}, nil
}

// settingDigest fingerprints the rows of a setting as they go up (every
// column but generated ones), or returns nil while one of its rows is on
// its way up, or a report of one it set aside is not yet confirmed: the
// server's copy differs then, as it should. Rows set aside — refused for
// good by the server, or that do not read — are left out, as the server
// leaves out the rows it records as refused or not read, so that one bad
// row does not switch its table's digest off. A row that does not read
// and is not set aside yet leaves the table without a digest.
func (r *Replica) settingDigest(ctx context.Context, conn *sql.Conn, tc *codec.TableCodec, asOf uint64) (*syncpb.Digest, error) {
	var noted bool
	if err := conn.QueryRowContext(ctx, anyInFlight, tc.Name).Scan(&noted); err != nil {
		return nil, err
	}
	if noted {
		return nil, nil
	}
	d, err := tableDigest(ctx, conn, tc, upColumns(tc), asOf, nil)
	if errors.Is(err, codec.ErrBadValue) {
		r.log.Warn("magicsync/replica: a setting's row does not read; its table goes without a digest", "table", tc.Name, "err", err)
		return nil, nil
	}
	return d, err
}

// answersDigest fingerprints the answers to wishes the server confirmed,
// or returns nil while an answer is on its way up (or set aside): the
// server's record of the answers differs then, as it should.
func answersDigest(ctx context.Context, conn *sql.Conn, asOf uint64) (*syncpb.Digest, error) {
	var unfiled bool
	if err := conn.QueryRowContext(ctx, anyAnswerUnfiled).Scan(&unfiled); err != nil {
		return nil, err
	}
	if unfiled {
		return nil, nil
	}
	rows, err := conn.QueryContext(ctx, selectFiledAnswers)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var sum digest.Sum
	for rows.Next() {
		var tbl string
		var key []byte
		var wish int64
		var state int
		if err := rows.Scan(&tbl, &key, &wish, &state); err != nil {
			return nil, err
		}
		sum.Add(codec.AnswerTuple(tbl, key, uint64(wish), state))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return &syncpb.Digest{Table: codec.AnswersTable, Sum: sum.Bytes(), Rows: sum.Rows(), AsOf: asOf}, nil
}
