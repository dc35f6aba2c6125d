package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/replica"
)

// Item is the six-column catalog row the replica benchmarks apply.
type Item struct {
	ID        uuid.UUID `db:"id" sync:"key"`
	Name      string    `db:"name"`
	Price     int64     `db:"price"`
	Qty       int64     `db:"qty"`
	Weight    float64   `db:"weight"`
	UpdatedAt time.Time `db:"updated_at" sync:"version"`
}

func (Item) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "bench", Name: "items", Mirror: magicsync.Catalog}
}

const itemsDDL = `CREATE TABLE items (id TEXT PRIMARY KEY, name TEXT NOT NULL, price INTEGER NOT NULL, qty INTEGER NOT NULL, weight REAL NOT NULL, updated_at TIMESTAMP NOT NULL)`

const upsertItem = `INSERT INTO items (id, name, price, qty, weight, updated_at) VALUES (?, ?, ?, ?, ?, ?)
	ON CONFLICT (id) DO UPDATE SET name = excluded.name, price = excluded.price, qty = excluded.qty, weight = excluded.weight, updated_at = excluded.updated_at`

func items(n, seed int) []Item {
	out := make([]Item, n)
	for i := range out {
		out[i] = item(seed, i)
	}
	return out
}

// item is the i-th row of items(n, seed), for any n > i.
func item(seed, i int) Item {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	return Item{ID: uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "item %d %d", seed, i)), Name: fmt.Sprintf("item number %d", i),
		Price: int64(100 + i), Qty: int64(i % 50), Weight: float64(i) / 7, UpdatedAt: at.Add(time.Duration(i) * time.Microsecond)}
}

// upserts encodes rows as one table's upserts of a message, either way:
// every column named, each row with its key.
func upserts[T any](codecs *magicsync.Codecs, rows []T) (*syncpb.TableChanges, error) {
	tc, err := codec.TableOf[T](codecs)
	if err != nil {
		return nil, err
	}
	ch := &syncpb.TableChanges{Table: tc.Name, Columns: tc.ColumnNames(nil)}
	vals := make([]codec.Value, 0, len(tc.Columns))
	for i := range rows {
		if vals, err = tc.Values(&rows[i], vals); err != nil {
			return nil, err
		}
		ch.Upserts = append(ch.Upserts, wire.AppendTuple(nil, vals))
		ch.UpsertKeys = append(ch.UpsertKeys, []byte(tc.KeyOfRow(vals)))
	}
	return ch, nil
}

// itemMessage encodes rows as the server would send them.
func itemMessage(codecs *magicsync.Codecs, id uint64, rows []Item) ([]byte, error) {
	ch, err := upserts(codecs, rows)
	if err != nil {
		return nil, err
	}
	return wire.EncodeToReplica(&syncpb.ToReplica{Id: id, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Tables: []*syncpb.TableChanges{ch}}}})
}

// openSQLite opens a file with the settings the engine requires.
func openSQLite(c config, name string) (*sql.DB, error) {
	d := sqlitetest.Modernc()
	db, err := sql.Open(d.Name, d.DSN(filepath.Join(c.dir, name), sqlitetest.Safe()))
	if err != nil {
		return nil, err
	}
	if _, err := db.Exec(itemsDDL); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// sqliteBaseline is a bare SQLite file of the items table, at the
// replica's durability, with the upsert prepared: the baseline of the
// benchmarks that apply one row at a time.
type sqliteBaseline struct {
	db   *sql.DB
	stmt *sql.Stmt
}

// openSQLiteBaseline opens the baseline's file name and prepares its
// upsert.
func openSQLiteBaseline(ctx context.Context, c config, name string) (*sqliteBaseline, error) {
	db, err := openSQLite(c, name)
	if err != nil {
		return nil, err
	}
	stmt, err := db.PrepareContext(ctx, upsertItem)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &sqliteBaseline{db: db, stmt: stmt}, nil
}

func (b *sqliteBaseline) close() {
	b.stmt.Close()
	b.db.Close()
}

// upsertOne upserts it in a transaction of its own.
func (b *sqliteBaseline) upsertOne(ctx context.Context, it Item) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.StmtContext(ctx, b.stmt).ExecContext(ctx, it.ID, it.Name, it.Price, it.Qty, it.Weight, it.UpdatedAt); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// newItemReplica opens a fresh replica holding the items catalog.
func newItemReplica(ctx context.Context, c config, name string) (*replica.Replica, *sql.DB, *magicsync.Codecs, error) {
	codecs, err := magicsync.NewCodecs(Item{})
	if err != nil {
		return nil, nil, nil, err
	}
	db, err := openSQLite(c, name)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := replica.Install(ctx, db, codecs); err != nil {
		return nil, nil, nil, err
	}
	up := replica.UplinkFunc(func(context.Context, uuid.UUID, string, []byte) error { return nil })
	r, err := replica.New(ctx, db, codecs, replica.Me(uuid.New()), up, replica.Settings{Logger: c.log, DigestsEvery: -1})
	if err != nil {
		return nil, nil, nil, err
	}
	return r, db, codecs, nil
}

// fastestAlternating runs a and b n times each, alternating (a, b, a, b,
// …), and returns the fastest run of each: the cost of each side with the
// least interference from other work on the machine, which a small run
// on a loaded machine is at the mercy of. Alternating keeps a change of
// the machine's load from favouring either side. A run is any outcome
// that tells how long it took (took).
func fastestAlternating[T any](n int, took func(T) time.Duration, a, b func(i int) (T, error)) (T, T, error) {
	var fa, fb, zero T
	for i := range n {
		ra, err := a(i)
		if err != nil {
			return zero, zero, err
		}
		rb, err := b(i)
		if err != nil {
			return zero, zero, err
		}
		if i == 0 || took(ra) < took(fa) {
			fa = ra
		}
		if i == 0 || took(rb) < took(fb) {
			fb = rb
		}
	}
	return fa, fb, nil
}

// itself is a duration's time taken, for fastestAlternating.
func itself(d time.Duration) time.Duration { return d }

// rateAgainst is a result of n things done in engine's time, beside the
// baseline doing them in its own, judged by the ratio's floor.
func rateAgainst(name, unit string, n int, engine, baseline time.Duration, floor bound, note string) result {
	return result{name: name, unit: unit, figure: float64(n) / engine.Seconds(), baseline: float64(n) / baseline.Seconds(),
		bounds: []bound{floor}, note: note}
}

// benchApplyBatch: a replica applies one message of 10,000 catalog rows,
// against the same rows upserted with one prepared statement in one
// transaction, on the same driver. Each side runs 5 times (-short: 9),
// into a new file each time, alternating with the other; the fastest run
// of each is compared.
func benchApplyBatch(ctx context.Context, c config) ([]result, error) {
	n := c.scale(10_000, 5_000)
	rounds := c.scale(5, 9)
	rows := items(n, 1)
	engine, baseline, err := fastestAlternating(rounds, itself, func(i int) (time.Duration, error) {
		r, db, codecs, err := newItemReplica(ctx, c, fmt.Sprintf("apply-%d.db", i))
		if err != nil {
			return 0, err
		}
		defer db.Close()
		msg, err := itemMessage(codecs, 1, rows)
		if err != nil {
			return 0, err
		}
		start := time.Now()
		got, err := r.Endpoint().Receive(ctx, msg)
		elapsed := time.Since(start)
		if err == nil && len(got.Applied["items"]) != n {
			err = fmt.Errorf("applied %d of %d rows", len(got.Applied["items"]), n)
		}
		return elapsed, err
	}, func(i int) (time.Duration, error) {
		db, err := openSQLite(c, fmt.Sprintf("apply-base-%d.db", i))
		if err != nil {
			return 0, err
		}
		defer db.Close()
		start := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		stmt, err := tx.PrepareContext(ctx, upsertItem)
		if err != nil {
			return 0, err
		}
		for _, it := range rows {
			if _, err := stmt.ExecContext(ctx, it.ID, it.Name, it.Price, it.Qty, it.Weight, it.UpdatedAt); err != nil {
				return 0, err
			}
		}
		if err := tx.Commit(); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	})
	if err != nil {
		return nil, err
	}
	return []result{rateAgainst("1 replica applies one message of rows", "rows/s", n, engine, baseline,
		ratioFloor(applyBatchFloor, applyBatchFloorShort),
		fmt.Sprintf("%d rows, 6 columns, modernc.org/sqlite, WAL + synchronous FULL; fastest of %d runs each, alternating", n, rounds))}, nil
}

// benchApplyMessages: a replica applies 1,000 one-row messages, each
// checked to have applied its row (Received.Applied), against 1,000
// one-row transactions at the same durability. The two run in
// alternating rounds of 10 messages, so that a change of the machine's
// load between them weighs on both alike.
func benchApplyMessages(ctx context.Context, c config) ([]result, error) {
	n := c.scale(1_000, 500)
	// Rounds of 10 messages each side, alternating: a short stall of the
	// disk, which other work on the machine causes, weighs on both sides.
	rounds := n / 10
	rows := items(n, 2)
	r, db, codecs, err := newItemReplica(ctx, c, "messages.db")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	tc, err := codec.TableOf[Item](codecs)
	if err != nil {
		return nil, err
	}
	msgs := make([][]byte, n)
	keys := make([]magicsync.Key, n)
	for i := range msgs {
		if msgs[i], err = itemMessage(codecs, uint64(i+1), rows[i:i+1]); err != nil {
			return nil, err
		}
		k, err := tc.KeyOf(&rows[i])
		if err != nil {
			return nil, err
		}
		keys[i] = magicsync.Key(k)
	}
	base, err := openSQLiteBaseline(ctx, c, "messages-base.db")
	if err != nil {
		return nil, err
	}
	defer base.close()
	var engine, baseline time.Duration
	for round := range rounds {
		from, to := round*n/rounds, (round+1)*n/rounds
		start := time.Now()
		for i, m := range msgs[from:to] {
			got, err := r.Endpoint().Receive(ctx, m)
			if err != nil {
				return nil, err
			}
			// A message that applied nothing would be timed as one that
			// applied its row.
			if applied := got.Applied["items"]; got.Redelivered || len(applied) != 1 || applied[0] != keys[from+i] {
				return nil, fmt.Errorf("message %d applied %v (redelivered: %v), want its one row %v", from+i+1, applied, got.Redelivered, keys[from+i])
			}
		}
		engine += time.Since(start)
		start = time.Now()
		for _, it := range rows[from:to] {
			if err := base.upsertOne(ctx, it); err != nil {
				return nil, err
			}
		}
		baseline += time.Since(start)
	}
	return []result{rateAgainst("2 replica applies one-row messages", "msgs/s", n, engine, baseline,
		ratioFloor(applyMessagesFloor, applyMessagesFloorShort),
		fmt.Sprintf("%d messages, each its own transaction; %d rounds alternating with the baseline", n, rounds))}, nil
}

// benchEncodeDecode: encoding and decoding a message of 10,000 rows, as
// rows per second and allocations per row.
func benchEncodeDecode(ctx context.Context, c config) ([]result, error) {
	n := c.scale(10_000, 1_000)
	rows := items(n, 3)
	codecs, err := magicsync.NewCodecs(Item{})
	if err != nil {
		return nil, err
	}
	const rounds = 5
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	mallocs := ms.Mallocs
	start := time.Now()
	var vals []codec.Value
	for range rounds {
		msg, err := itemMessage(codecs, 1, rows)
		if err != nil {
			return nil, err
		}
		m, err := wire.DecodeToReplica(msg)
		if err != nil {
			return nil, err
		}
		for _, row := range m.GetDown().GetTables()[0].GetUpserts() {
			if vals, err = wire.DecodeTuple(row, vals); err != nil {
				return nil, err
			}
		}
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&ms)
	perRow := float64(ms.Mallocs-mallocs) / float64(rounds*n)
	return []result{
		{name: "8 encode + decode a message", unit: "rows/s", figure: float64(rounds*n) / elapsed.Seconds(), note: fmt.Sprintf("%d rows a message", n)},
		{name: "8 allocations per row (encode + decode)", unit: "allocs", figure: perRow},
	}, nil
}
