// Command shop is magicsync's demo: a head office over PostgreSQL and three
// registers, each over its own SQLite file, syncing over HTTP while a day
// of trade goes by — sales, a price change, a new product, and one register
// unplugged and plugged back.
//
//	go run ./examples/shop
//
// It uses $DATABASE_URL when set, else the PostgreSQL server on
// 127.0.0.1:5432 when one answers, else starts a private one from the local
// PostgreSQL binaries, under the data folder. It prints the dashboard's
// address and a line for every event; Ctrl-C stops everything, and running
// it again resumes from the same data.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/transport/httpsync"
)

type config struct {
	data        string
	addr        string
	every       time.Duration
	runFor      time.Duration
	verbose     bool
	out         io.Writer
	databaseURL string
}

func main() {
	var c config
	flag.StringVar(&c.data, "data", filepath.Join("data", "shop"), "folder for the registers' files (and a private PostgreSQL, if one is started)")
	flag.StringVar(&c.addr, "addr", "127.0.0.1:8080", "where the head office listens (sync endpoints and dashboard)")
	flag.DurationVar(&c.every, "every", 1500*time.Millisecond, "time between two events of the simulated day")
	flag.DurationVar(&c.runFor, "for", 0, "stop after this long (0: run until Ctrl-C)")
	flag.BoolVar(&c.verbose, "v", false, "log the engine's warnings and errors to stderr")
	flag.Parse()
	c.out = os.Stdout
	c.databaseURL = os.Getenv("DATABASE_URL")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.runFor)
		defer cancel()
	}
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if c.verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if err := os.MkdirAll(c.data, 0o755); err != nil {
		return err
	}
	data, err := filepath.Abs(c.data)
	if err != nil {
		return err
	}
	say := func(format string, args ...any) {
		fmt.Fprintf(c.out, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	dbURL := c.databaseURL
	stopPG := func() error { return nil }
	if dbURL == "" {
		dbURL, stopPG, err = pgtest.Ensure(ctx, filepath.Join(data, "postgres"), func(format string, args ...any) { say(format, args...) })
		if err != nil {
			return fmt.Errorf("finding a PostgreSQL: %w", err)
		}
	}
	defer func() {
		if err := stopPG(); err != nil {
			fmt.Fprintln(os.Stderr, "shop: stopping PostgreSQL:", err)
		}
	}()
	// Everything started below stops when ctx ends; ending it here as well
	// lets run return an error without waiting for a signal.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ho, err := startHeadOffice(ctx, dbURL, c.addr, len(registerNames), log)
	if err != nil {
		return err
	}
	defer func() {
		cancel()
		ho.wait()
	}()
	say("head office up; dashboard at %s/", ho.url)
	say("registers keep their files in %s", data)
	regs, err := startRegisters(ctx, ho, data, log, say)
	defer func() {
		cancel()
		for _, r := range regs {
			r.wait()
		}
	}()
	if err != nil {
		return err
	}
	err = simulateDay(ctx, c, ho, regs, say)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		say("stopping: the registers finish what they were sending")
		return nil
	}
	return err
}

// startRegisters issues every register its token and starts it. On an
// error it also returns the registers it started, to be waited for.
func startRegisters(ctx context.Context, ho *headOffice, data string, log *slog.Logger, say func(string, ...any)) ([]*register, error) {
	if err := ho.engine.Pass(ctx); err != nil {
		return nil, err
	}
	var regs []*register
	for i := range registerNames {
		secret, err := ho.engine.Credentials(ctx, registerID(i))
		if err != nil {
			return regs, err
		}
		token := httpsync.JoinToken(registerID(i), secret)
		r, err := startRegister(ctx, data, i, ho.url, token, ho.codecs, log)
		if err != nil {
			return regs, err
		}
		regs = append(regs, r)
		say("%s up, syncing with the head office", r.name)
	}
	return regs, nil
}

// simulateDay plays a day of trade, over and over, until ctx ends.
func simulateDay(ctx context.Context, c config, ho *headOffice, regs []*register, say func(string, ...any)) error {
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	tick := time.NewTicker(c.every)
	defer tick.Stop()
	unplugged := regs[len(regs)-1]
	for step := 0; ; step++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		r := regs[rnd.IntN(len(regs))]
		total, lines, err := r.sell(ctx, rnd)
		if err != nil {
			return fmt.Errorf("%s: a sale: %w", r.name, err)
		}
		if lines > 0 {
			where := ""
			if !r.online.Load() {
				where = " (offline)"
			}
			say("%s rang up %d line(s), €%d.%02d%s", r.name, lines, total/100, total%100, where)
		}
		if step%3 == 0 {
			for _, r := range regs {
				if err := r.read(ctx, rnd); err != nil {
					return err
				}
			}
		}
		switch step % 16 {
		case 4:
			cents := int64(150 + rnd.IntN(100))
			if err := ho.changePrice(ctx, "coffee", cents); err != nil {
				return err
			}
			say("head office: coffee now costs €%d.%02d", cents/100, cents%100)
		case 6:
			unplugged.online.Store(false)
			say("%s unplugged: it keeps selling, offline", unplugged.name)
		case 8:
			name := fmt.Sprintf("lemon tart no. %d", step/16+1)
			if err := ho.addProduct(ctx, name, 320); err != nil {
				return err
			}
			say("head office: new product %q", name)
		case 12:
			unplugged.online.Store(true)
			unplugged.engine.Nudge()
			say("%s plugged back in", unplugged.name)
		case 15:
			if err := report(ctx, ho, regs, say); err != nil {
				return err
			}
		}
	}
}

// report prints, per register, what the head office knows of it.
func report(ctx context.Context, ho *headOffice, regs []*register, say func(string, ...any)) error {
	all, err := ho.engine.Status(ctx)
	if err != nil {
		return err
	}
	var filed int
	if err := ho.pool.QueryRow(ctx, "SELECT count(*) FROM shop.receipts").Scan(&filed); err != nil {
		return err
	}
	for _, st := range all {
		for _, t := range st.Tables {
			if t.Table == "products" {
				say("%s holds %d of %d products", ho.name(st.ID), t.Holds, t.Should)
			}
		}
	}
	say("head office has filed %d receipts", filed)
	return nil
}
