package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	_ "modernc.org/sqlite" // the register's SQLite driver

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/httpsync"
)

// register is one till: its own SQLite file, the engine's replica, and the
// HTTP client that carries messages both ways. Unplugging it cuts the
// network, not the till: sales go on, and go up once it is plugged back.
type register struct {
	id     uuid.UUID
	name   string
	db     *sql.DB
	engine *replica.Replica
	online atomic.Bool
	wg     sync.WaitGroup
}

// dsn opens a register's file with what the engine requires of every
// connection: WAL, synchronous FULL, recursive triggers, foreign keys.
func dsn(path string) string {
	return "file:" + (&url.URL{Path: path}).EscapedPath() +
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=recursive_triggers(1)&_pragma=foreign_keys(1)&_pragma=busy_timeout(5000)"
}

// startRegister opens (or reopens) a register's database and starts its
// loops; they stop when ctx ends.
func startRegister(ctx context.Context, dir string, i int, headOffice, token string, codecs *magicsync.Codecs, log *slog.Logger) (_ *register, err error) {
	r := &register{id: registerID(i), name: registerNames[i]}
	r.online.Store(true)
	db, err := sql.Open("sqlite", dsn(filepath.Join(dir, fmt.Sprintf("register-%d.db", i+1))))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	r.db = db
	if _, err := db.ExecContext(ctx, registerSchema); err != nil {
		return nil, fmt.Errorf("%s: creating its tables: %w", r.name, err)
	}
	if err := replica.Install(ctx, db, codecs); err != nil {
		return nil, fmt.Errorf("%s: %w", r.name, err)
	}
	client := httpsync.NewClient(headOffice, r.id, token, httpsync.ClientOptions{
		PollWait: 10 * time.Second, Online: r.online.Load, Logger: log.With("register", r.name),
		BackoffMin: 200 * time.Millisecond, BackoffMax: 2 * time.Second,
	})
	settings := replica.Settings{
		Lanes:      []replica.Lane{{Name: "telemetry", Tables: []string{"readings"}}},
		Idle:       300 * time.Millisecond,
		BackoffMin: 200 * time.Millisecond, BackoffMax: 2 * time.Second,
		DigestsEvery: time.Minute,
		Logger:       log.With("register", r.name),
	}
	r.engine, err = replica.New(ctx, db, codecs, replica.Me(r.id), client, settings)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.name, err)
	}
	if err := r.writeFooter(ctx); err != nil {
		return nil, err
	}
	r.wg.Go(func() { _ = r.engine.Run(ctx) })
	r.wg.Go(func() { _ = client.ReceiveLoop(ctx, r.engine) })
	return r, nil
}

// writeFooter sets the footer the register prints, once.
func (r *register) writeFooter(ctx context.Context) error {
	_, err := r.db.ExecContext(ctx, "INSERT INTO footers (register_id, text, changed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
		r.id, "Thank you — see you soon!", time.Now().UTC())
	return err
}

// sell rings up a sale of one to three products the register holds, as one
// local transaction, and returns its total and the number of lines.
func (r *register) sell(ctx context.Context, rnd *rand.Rand) (total int64, lines int, err error) {
	rows, err := r.db.QueryContext(ctx, "SELECT id, price_cents FROM products ORDER BY name")
	if err != nil {
		return 0, 0, err
	}
	type item struct {
		id    string
		price int64
	}
	var range_ []item
	for rows.Next() {
		var it item
		if err := rows.Scan(&it.id, &it.price); err != nil {
			rows.Close()
			return 0, 0, err
		}
		range_ = append(range_, it)
	}
	rows.Close()
	if len(range_) == 0 {
		return 0, 0, nil // nothing to sell yet
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback()
	now := time.Now().UTC()
	receipt := uuid.New()
	lines = 1 + rnd.IntN(3)
	if _, err := tx.ExecContext(ctx, "INSERT INTO receipts (register_id, id, total_cents, rung_at) VALUES (?, ?, 0, ?)", r.id, receipt, now); err != nil {
		return 0, 0, err
	}
	for range lines {
		it := range_[rnd.IntN(len(range_))]
		qty := int64(1 + rnd.IntN(2))
		total += qty * it.price
		if _, err := tx.ExecContext(ctx, "INSERT INTO receipt_lines (register_id, id, receipt_id, product_id, quantity, price_cents, rung_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
			r.id, uuid.New(), receipt, it.id, qty, it.price, now); err != nil {
			return 0, 0, err
		}
	}
	if _, err := tx.ExecContext(ctx, "UPDATE receipts SET total_cents = ? WHERE register_id = ? AND id = ?", total, r.id, receipt); err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, err
	}
	r.engine.Nudge()
	return total, lines, nil
}

// read records the till's temperature; it goes up in the telemetry lane.
func (r *register) read(ctx context.Context, rnd *rand.Rand) error {
	_, err := r.db.ExecContext(ctx, "INSERT INTO readings (register_id, id, celsius, at) VALUES (?, ?, ?, ?)",
		r.id, time.Now().UnixNano(), 20+rnd.Float64()*5, time.Now().UTC())
	return err
}

// wait stops the register once its context ended.
func (r *register) wait() {
	r.wg.Wait()
	r.engine.Close()
	r.db.Close()
}
