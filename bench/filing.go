package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// receipts makes n receipts of one replica.
func receipts(replica uuid.UUID, n, seed int) []Receipt {
	out := make([]Receipt, n)
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for i := range out {
		out[i] = Receipt{ReplicaID: replica, ID: uuid.NewSHA1(replica, fmt.Appendf(nil, "receipt %d %d", seed, i)),
			Total: int64(100 + i%5000), Note: fmt.Sprintf("table %d, paid by card", i%40), RungAt: at.Add(time.Duration(i) * time.Millisecond)}
	}
	return out
}

// receiptsUp encodes rows as the replica would send them up.
func receiptsUp(codecs *magicsync.Codecs, replica uuid.UUID, seq uint64, rows []Receipt) ([]byte, error) {
	ch, err := upserts(codecs, rows)
	if err != nil {
		return nil, err
	}
	return wire.EncodeToServer(&syncpb.ToServer{Replica: replica[:], Lane: "main", Sequence: seq,
		Up: &syncpb.Up{Tables: []*syncpb.TableChanges{ch}}})
}

// benchFileUpload: the server files one upward message of 10,000 receipts
// (decoded, checked, upserted newest-version-wins, confirmed), against COPY
// of the same number of rows into the same table, in the same database.
// Each side runs five times, alternating, into a table that grows; the
// medians are compared.
func benchFileUpload(ctx context.Context, c config) ([]result, error) {
	n := c.scale(10_000, 1_000)
	const rounds = 5
	e, ids, err := newAdoptedEnv(ctx, c, 4, rounds, nil)
	if err != nil {
		return nil, err
	}
	defer e.close()
	var engine, baseline []time.Duration
	for i := range rounds {
		// The engine files replica i's receipts.
		body, err := receiptsUp(e.codecs, ids[i], 1, receipts(ids[i], n, 1))
		if err != nil {
			return nil, err
		}
		start := time.Now()
		if err := e.s.Endpoint().Receive(ctx, ids[i], "main", body); err != nil {
			return nil, err
		}
		engine = append(engine, time.Since(start))
		var got int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM bench.receipts WHERE replica_id = $1`, ids[i]).Scan(&got); err != nil {
			return nil, err
		}
		if got != n {
			return nil, fmt.Errorf("filed %d of %d receipts", got, n)
		}
		// COPY files as many rows of another origin into the same table.
		other := uuid.New()
		rows := receipts(other, n, 2)
		start = time.Now()
		if _, err := e.pool.CopyFrom(ctx, pgx.Identifier{"bench", "receipts"}, []string{"replica_id", "id", "total", "note", "rung_at"},
			pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
				r := &rows[i]
				return []any{r.ReplicaID, r.ID, r.Total, r.Note, r.RungAt}, nil
			})); err != nil {
			return nil, err
		}
		baseline = append(baseline, time.Since(start))
	}
	slices.Sort(engine)
	slices.Sort(baseline)
	me, mb := engine[rounds/2], baseline[rounds/2]
	return []result{rateAgainst("3 server files one upload", "rows/s", n, me, mb, ratioFloor(uploadFloor, uploadFloorShort),
		fmt.Sprintf("%d receipts, 5 columns, one message; baseline COPY; median of %d", n, rounds))}, nil
}
