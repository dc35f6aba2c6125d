package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
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

// registerFile is register i's SQLite file in dir.
func registerFile(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("register-%d.db", i+1))
}

// startRegister opens (or reopens) a register's database and starts its
// loops; they stop when ctx ends. Its long-polls wait at most poll.
func startRegister(ctx context.Context, dir string, i int, headOffice, token string, codecs *magicsync.Codecs, poll time.Duration, log *slog.Logger) (_ *register, err error) {
	r := &register{id: registerID(i), name: registerNames[i]}
	r.online.Store(true)
	db, err := sql.Open("sqlite", dsn(registerFile(dir, i)))
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
		PollWait: poll, Online: r.online.Load, Logger: log.With("register", r.name),
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
	defer func() {
		if err != nil {
			r.engine.Close()
		}
	}()
	if err := r.writeFooter(ctx); err != nil {
		return nil, fmt.Errorf("%s: writing its footer: %w", r.name, err)
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

// sale is one sale rung up: its receipt, total and number of lines.
type sale struct {
	receipt uuid.UUID
	total   int64
	lines   int
}

// String says what was sold: "2 line(s), €3.50 (receipt 1a2b3c4d)".
func (s sale) String() string {
	return fmt.Sprintf("%d line(s), €%d.%02d (receipt %s)", s.lines, s.total/100, s.total%100, s.receipt.String()[:8])
}

// sell rings up a sale of one to three products the register holds, as one
// local transaction; none (zero lines) while it holds no products yet.
func (r *register) sell(ctx context.Context, rnd *rand.Rand) (sale, error) {
	rows, err := r.db.QueryContext(ctx, "SELECT id, price_cents FROM products ORDER BY name")
	if err != nil {
		return sale{}, err
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
			return sale{}, err
		}
		range_ = append(range_, it)
	}
	rows.Close()
	if len(range_) == 0 {
		return sale{}, nil // nothing to sell yet
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return sale{}, err
	}
	defer tx.Rollback()
	now := time.Now().UTC()
	s := sale{receipt: uuid.New(), lines: 1 + rnd.IntN(3)}
	if _, err := tx.ExecContext(ctx, "INSERT INTO receipts (register_id, id, total_cents, rung_at) VALUES (?, ?, 0, ?)", r.id, s.receipt, now); err != nil {
		return sale{}, err
	}
	for range s.lines {
		it := range_[rnd.IntN(len(range_))]
		qty := int64(1 + rnd.IntN(2))
		s.total += qty * it.price
		if _, err := tx.ExecContext(ctx, "INSERT INTO receipt_lines (register_id, id, receipt_id, product_id, quantity, price_cents, rung_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
			r.id, uuid.New(), s.receipt, it.id, qty, it.price, now); err != nil {
			return sale{}, err
		}
	}
	if _, err := tx.ExecContext(ctx, "UPDATE receipts SET total_cents = ? WHERE register_id = ? AND id = ?", s.total, r.id, s.receipt); err != nil {
		return sale{}, err
	}
	if err := tx.Commit(); err != nil {
		return sale{}, err
	}
	r.engine.Nudge()
	return s, nil
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

// registerConfig is the register program's.
type registerConfig struct {
	n         int
	server    string
	tokenFile string
	data      string
	every     time.Duration
	poll      time.Duration
	runFor    time.Duration
	verbose   bool
	out       io.Writer
}

func registerFlags(fs *flag.FlagSet, args []string) (registerConfig, error) {
	c := registerConfig{out: os.Stdout}
	fs.IntVar(&c.n, "n", 0, fmt.Sprintf("which register this is: 1 to %d", len(registerNames)))
	fs.StringVar(&c.server, "server", "http://127.0.0.1:8080", "the head office's address")
	fs.StringVar(&c.tokenFile, "token-file", "", "the file holding the register's token, as the head office wrote it (default: <data>/tokens/register-<n>.token)")
	fs.StringVar(&c.data, "data", filepath.Join("data", "shop"), "folder for the register's SQLite file")
	fs.DurationVar(&c.every, "every", 2*time.Second, "time between two sales on the till")
	fs.DurationVar(&c.poll, "poll", defaultPoll, "how long a long-poll waits for a message")
	fs.DurationVar(&c.runFor, "for", 0, "stop after this long (0: run until Ctrl-C)")
	fs.BoolVar(&c.verbose, "v", false, "log the engine's warnings and errors to stderr")
	_ = fs.Parse(args) // ExitOnError
	if c.n < 1 || c.n > len(registerNames) {
		return c, fmt.Errorf("-n must be 1 to %d, not %d", len(registerNames), c.n)
	}
	if c.every <= 0 || c.poll <= 0 {
		return c, fmt.Errorf("-every and -poll must be positive")
	}
	return c, nil
}

// runRegister is the register program: register c.n over its own SQLite
// file, syncing with the head office at c.server — the receive loop and the
// uplink — while its till rings up sales, until ctx ends.
func runRegister(ctx context.Context, c registerConfig) error {
	ctx, cancel := limit(ctx, c.runFor)
	defer cancel()
	say := sayer(c.out)
	i := c.n - 1
	if c.tokenFile == "" {
		c.tokenFile = tokenPath(c.data, i)
	}
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return fmt.Errorf("reading %s's token: %w (the head office writes it when it starts)", registerNames[i], err)
	}
	token := strings.TrimSpace(string(b))
	if claimed, ok := httpsync.TokenReplica(token); !ok || claimed != registerID(i) {
		return fmt.Errorf("%s holds no token of %s", c.tokenFile, registerNames[i])
	}
	codecs, err := codecs()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.data, 0o755); err != nil {
		return err
	}
	data, err := filepath.Abs(c.data)
	if err != nil {
		return err
	}
	r, err := startRegister(ctx, data, i, strings.TrimRight(c.server, "/"), token, codecs, c.poll, logger(c.verbose))
	if err != nil {
		return err
	}
	defer func() {
		cancel()
		r.wait()
	}()
	say("%s up over %s, syncing with %s", r.name, registerFile(data, i), c.server)
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(c.n)))
	tick := time.NewTicker(c.every)
	defer tick.Stop()
	for event := 0; ; event++ {
		select {
		case <-ctx.Done():
			say("stopping: %s finishes what it was sending", r.name)
			return nil
		case <-tick.C:
		}
		s, err := r.sell(ctx, rnd)
		if err == nil && event%3 == 0 {
			err = r.read(ctx, rnd)
		}
		switch {
		case stopped(ctx, err):
		case err != nil:
			return fmt.Errorf("%s: a sale: %w", r.name, err)
		case s.lines == 0:
			say("%s holds no products yet: nothing to sell", r.name)
		default:
			say("%s rang up %s", r.name, s)
		}
	}
}
