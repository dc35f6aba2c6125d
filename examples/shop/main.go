// Command shop is magicsync's demo: a head office over PostgreSQL and three
// registers, each over its own SQLite file, syncing over HTTP while a day
// of trade goes by — sales, a price change, a new product and an old one
// discontinued, one register unplugged and plugged back, and the head
// office wishing the registers' receipt footer and screen brightness other
// values, which each register carries out, has wait, refuses, or finds
// changed on site first.
//
// Each product has one or two barcodes, a catalog of its own that follows
// its product to the registers holding it; the tills ring products up by
// barcode. The head office never deletes a product, which the registers'
// receipt lines may point at: it discontinues it, and a register keeps a
// discontinued product, marked so and no longer sold, only while its own
// receipt lines point at it (see rows.go).
//
//	go run ./examples/shop
//
// runs all of it in one process. The head office and a register also run
// as programs of their own, as they would in a shop:
//
//	go run ./examples/shop headoffice [-addr 127.0.0.1:8080] [-data data/shop]
//	go run ./examples/shop register -n 2 [-server http://127.0.0.1:8080] [-token-file data/shop/tokens/register-2.token] [-data data/shop]
//
// The head office serves the sync endpoints and the dashboard, and keeps
// each register's token in a file of its data folder, issued the first
// time and handed out again after that; it never replaces a register's
// token unless started with -rotate-tokens. Either side keeps running
// while the other, or the head office's PostgreSQL, is away, and resumes
// by itself. A register keeps its own SQLite
// file, runs the receive loop and the uplink, and rings up sales on a
// simulated till.
//
// The demo and the head office use $DATABASE_URL when set, else the
// PostgreSQL server on 127.0.0.1:5432 when one answers, else start a
// private one from the local PostgreSQL binaries, under the data folder;
// on the last two they keep their tables in a database of their own,
// magicsync_shop, created on the first run.
// Each prints a line for every event; Ctrl-C stops it (a second Ctrl-C at
// once), and running it again resumes from the same data.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/server"
)

// config is the demo's, and the head office program's.
type config struct {
	data        string
	addr        string
	every       time.Duration
	runFor      time.Duration
	verbose     bool
	out         io.Writer
	databaseURL string
	// poll is how long a register's long-poll waits; the dashboard shows
	// a register online while it started one within twice that.
	poll time.Duration
	// offlineFor is how long the demo keeps the unplugged register
	// unplugged once the head office shows it offline.
	offlineFor time.Duration
	// rotateTokens has the head office issue every register a new token,
	// replacing the one it holds: the only way it ever replaces one.
	rotateTokens bool
}

// defaultPoll is how long a register's long-poll waits, unless -poll says
// otherwise: short enough for the dashboard to show an unplugged register
// offline within seconds.
const defaultPoll = 3 * time.Second

const usage = `usage:
  shop [flags]               the demo: a head office and three registers, in one process
  shop headoffice [flags]    the head office alone: sync endpoints and dashboard
  shop register -n N [flags] register N (1 to 3) alone, syncing with a head office
Run "shop <command> -h" for a command's flags.
`

func main() {
	args := os.Args[1:]
	command := ""
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		command, args = args[0], args[1:]
	}
	var program func(context.Context) error
	switch command {
	case "", "demo":
		c, err := demoFlags(flag.NewFlagSet("shop", flag.ExitOnError), args)
		if err != nil {
			fmt.Fprintln(os.Stderr, "shop:", err)
			os.Exit(2)
		}
		program = func(ctx context.Context) error { return run(ctx, c) }
	case "headoffice":
		c, err := headOfficeFlags(flag.NewFlagSet("shop headoffice", flag.ExitOnError), args)
		if err != nil {
			fmt.Fprintln(os.Stderr, "shop headoffice:", err)
			os.Exit(2)
		}
		program = func(ctx context.Context) error { return runHeadOffice(ctx, c) }
	case "register":
		c, err := registerFlags(flag.NewFlagSet("shop register", flag.ExitOnError), args)
		if err != nil {
			fmt.Fprintln(os.Stderr, "shop register:", err)
			os.Exit(2)
		}
		program = func(ctx context.Context) error { return runRegister(ctx, c) }
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "shop: no command %q\n%s", command, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// Once stopping, a second Ctrl-C stops at once.
		<-ctx.Done()
		stop()
	}()
	if err := program(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(1)
	}
}

// commonFlags are the demo's and the head office's.
func commonFlags(fs *flag.FlagSet, c *config) {
	fs.StringVar(&c.data, "data", filepath.Join("data", "shop"), "folder for the head office's files (registers' tokens, a private PostgreSQL if one is started)")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "where the head office listens (sync endpoints and dashboard)")
	fs.DurationVar(&c.poll, "poll", defaultPoll, "how long a register's long-poll waits; the dashboard shows it offline after twice that without one")
	fs.DurationVar(&c.runFor, "for", 0, "stop after this long (0: run until Ctrl-C)")
	fs.BoolVar(&c.verbose, "v", false, "log the engine's warnings and errors to stderr")
	c.out = os.Stdout
	c.databaseURL = os.Getenv("DATABASE_URL")
}

// demoFlags reads the demo's flags and checks them all, before anything
// starts.
func demoFlags(fs *flag.FlagSet, args []string) (config, error) {
	var c config
	commonFlags(fs, &c)
	fs.DurationVar(&c.every, "every", 1500*time.Millisecond, "time between two events of the simulated day")
	fs.DurationVar(&c.offlineFor, "offline", 5*time.Second, "how long register 3 stays unplugged once the head office shows it offline")
	_ = fs.Parse(args) // ExitOnError
	if err := extraArgs(fs); err != nil {
		return c, err
	}
	return c, c.check(true)
}

// headOfficeFlags reads the head office's flags and checks them all,
// before anything starts.
func headOfficeFlags(fs *flag.FlagSet, args []string) (config, error) {
	var c config
	commonFlags(fs, &c)
	fs.BoolVar(&c.rotateTokens, "rotate-tokens", false, "issue every register a new token, replacing the one it holds (which stops working at once)")
	_ = fs.Parse(args) // ExitOnError
	if err := extraArgs(fs); err != nil {
		return c, err
	}
	return c, c.check(false)
}

// errBadFlag is wrapped by every error about a flag's value.
var errBadFlag = errors.New("bad flag")

// extraArgs refuses arguments left after the flags.
func extraArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (flags come as -name value)", errBadFlag, fs.Arg(0))
	}
	return nil
}

// check checks the configuration's values: those of the demo too when
// demo is set.
func (c config) check(demo bool) error {
	var errs []error
	if c.poll <= 0 {
		errs = append(errs, fmt.Errorf("%w: -poll must be positive, not %v", errBadFlag, c.poll))
	}
	if c.runFor < 0 {
		errs = append(errs, fmt.Errorf("%w: -for must be positive, or 0 to run until Ctrl-C, not %v", errBadFlag, c.runFor))
	}
	if c.addr == "" {
		errs = append(errs, fmt.Errorf("%w: -addr must name where to listen, as host:port", errBadFlag))
	} else if _, _, err := net.SplitHostPort(c.addr); err != nil {
		errs = append(errs, fmt.Errorf("%w: -addr %q is not host:port: %w", errBadFlag, c.addr, err))
	}
	if demo {
		if c.every <= 0 {
			errs = append(errs, fmt.Errorf("%w: -every must be positive, not %v", errBadFlag, c.every))
		}
		if c.offlineFor < 0 {
			errs = append(errs, fmt.Errorf("%w: -offline must not be negative, not %v", errBadFlag, c.offlineFor))
		}
	}
	return errors.Join(errs...)
}

// limit ends ctx after d, when d is positive.
func limit(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

// logger is the engine's: quiet, unless verbose.
func logger(verbose bool) *slog.Logger {
	if verbose {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.DiscardHandler)
}

// sayer prints a line, stamped with the time, to out.
func sayer(out io.Writer) func(string, ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(out, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

// stopped says whether err only says that ctx ended.
func stopped(ctx context.Context, err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil
}

// shopDatabase is the database the demo keeps its tables in, unless
// $DATABASE_URL names another.
const shopDatabase = "magicsync_shop"

// openHeadOffice finds a PostgreSQL (starting a private one under the data
// folder if need be) and starts the head office over it. stop, to be
// called once ctx ended, waits for the head office and stops that
// PostgreSQL.
func openHeadOffice(ctx context.Context, c config, log *slog.Logger, say func(string, ...any)) (ho *headOffice, data string, stop func(), err error) {
	if err := os.MkdirAll(c.data, 0o755); err != nil {
		return nil, "", nil, err
	}
	data, err = filepath.Abs(c.data)
	if err != nil {
		return nil, "", nil, err
	}
	dbURL := c.databaseURL
	stopPG := func() error { return nil }
	if dbURL == "" {
		dbURL, stopPG, err = pgtest.Ensure(ctx, filepath.Join(data, "postgres"), func(format string, args ...any) { say(format, args...) })
		if err != nil {
			return nil, "", nil, fmt.Errorf("finding a PostgreSQL: %w", err)
		}
		// A database of the demo's own: a server found running may hold
		// other things in its default database.
		if dbURL, err = pgtest.EnsureDatabase(ctx, dbURL, shopDatabase); err != nil {
			_ = stopPG()
			return nil, "", nil, err
		}
		say("using database %s", shopDatabase)
	}
	closePG := func() {
		if err := stopPG(); err != nil {
			fmt.Fprintln(os.Stderr, "shop: stopping PostgreSQL:", err)
		}
	}
	ho, err = startHeadOffice(ctx, dbURL, c.addr, data, len(registerNames), c.poll, log)
	if err != nil {
		closePG()
		return nil, "", nil, err
	}
	return ho, data, func() { ho.wait(); closePG() }, nil
}

// run is the demo: the head office and the three registers, and a day of
// trade, until ctx ends.
func run(ctx context.Context, c config) error {
	if c.poll <= 0 {
		c.poll = defaultPoll
	}
	if err := c.check(true); err != nil {
		return err
	}
	ctx, cancel := limit(ctx, c.runFor)
	defer cancel()
	say := sayer(c.out)
	log := logger(c.verbose)
	ho, data, stopHeadOffice, err := openHeadOffice(ctx, c, log, say)
	if err != nil {
		if stopped(ctx, err) {
			return nil // stopped while starting: nothing went wrong
		}
		return err
	}
	defer func() {
		cancel()
		stopHeadOffice()
	}()
	say("head office up; dashboard at %s/", ho.url)
	say("dashboard login: user %s, password %s", dashboardUser, ho.dashboardPassword)
	say("registers keep their files in %s", data)
	regs, err := startRegisters(ctx, ho, data, c.poll, log, say)
	defer func() {
		cancel()
		for _, r := range regs {
			r.wait()
		}
	}()
	if err != nil {
		if stopped(ctx, err) {
			say("stopping while the registers start")
			return nil
		}
		return err
	}
	err = simulateDay(ctx, c, ho, regs, say)
	if stopped(ctx, err) {
		say("stopping: the registers finish what they were sending")
		return nil
	}
	return err
}

// startRegisters hands every register its token (issued the first time,
// kept in the data folder) and starts it. On an error it also returns the
// registers it started, to be waited for.
func startRegisters(ctx context.Context, ho *headOffice, data string, poll time.Duration, log *slog.Logger, say func(string, ...any)) ([]*register, error) {
	var regs []*register
	for i := range registerNames {
		token, _, err := ho.token(ctx, data, i)
		if err != nil {
			return regs, err
		}
		r, err := startRegister(ctx, nil, data, i, ho.url, token, ho.codecs, poll, log)
		if err != nil {
			return regs, err
		}
		regs = append(regs, r)
		say("%s up, syncing with the head office", r.name)
	}
	return regs, nil
}

// statusEvery spaces the demo's reads of the registers' status.
const statusEvery = 500 * time.Millisecond

// The footers of the day: the head office wishes every register one of
// dayFooters, a day's in turn, and register 3 nextFooter; a technician
// sets technicianFooter on register 3 itself; tooLongFooter does not fit
// the printers.
var (
	dayFooters       = []string{"Fresh bread every morning", "Try our new lemon tart", "Open on Sundays, 8 to 12"}
	nextFooter       = "Closed on Monday for the inventory"
	technicianFooter = "Ask us about the loyalty card"
	tooLongFooter    = "Thank you for shopping at the corner shop, see you soon!"
)

// simulateDay plays a day of trade, over and over, until ctx ends: a sale
// at every event, the till's temperature at every third, and a script of
// sixteen steps:
//
//   - register 2's printer is switched off, and the head office wishes
//     every register a new footer: register 2's waits, until its printer
//     is back on;
//   - the head office wishes register 1's screen a new brightness;
//   - a price change;
//   - register 3 unplugged; a technician sets its footer on the register
//     itself, and the head office, not knowing it, wishes register 3 a new
//     footer in place of the one it last heard of: once register 3 is
//     plugged back in, the wish is superseded, the technician's footer
//     standing;
//   - a new product (with its barcodes, which the tills scan), the one
//     added the day before discontinued, and a footer too long for
//     register 1's printer, which it refuses;
//   - a report, once the registers answered the head office's wishes;
//   - a footer rolled out to every register in one call, the first
//     register before the others, its counts said as they move.
//
// Register 3 is plugged back in only once the head office has shown it
// offline for c.offlineFor: the dashboard shows a register online while it
// started a long-poll within twice its window, so a shorter unplug would
// never show. Every step that waits for the head office to see something
// waits at most a minute or so, then goes on.
func simulateDay(ctx context.Context, c config, ho *headOffice, regs []*register, say func(string, ...any)) error {
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	tick := time.NewTicker(c.every)
	defer tick.Stop()
	watch := newOnlineWatch(ho, statusEvery, say)
	wishes := newWishWatch(ho, say)
	rollout := &rolloutWatch{ho: ho, say: say}
	db := &dbHealth{say: say}
	unplugged := regs[len(regs)-1]
	var unpluggedAt time.Time
	// maxUnplug plugs register 3 back in even if the head office never
	// showed it offline (another process polling in its name, say).
	maxUnplug := 2*c.poll + c.offlineFor + time.Minute
	// hold says whether a step waits for ready, at most maxHold: the day
	// goes on without it (its database away, say).
	maxHold := 2*c.poll + time.Minute
	var holding time.Time
	hold := func(ready bool) bool {
		switch {
		case ready:
		case holding.IsZero():
			holding = time.Now()
			return true
		case time.Since(holding) < maxHold:
			return true
		}
		holding = time.Time{}
		return false
	}
	// dayWishes are the day's wishes of the registers' footers; that of
	// register 2 waits while its printer is off.
	dayWishes := map[*register]server.Wished{}
	offPrinter := regs[1]
	// wishFooter wishes register r the footer text, in place of the one
	// the head office last heard of, of footers; and follows the wish.
	wishFooter := func(footers map[uuid.UUID]Footer, r *register, text string) (server.Wished, error) {
		seen, ok := footers[r.id]
		if !ok {
			seen.RegisterID = r.id // not heard of yet: whatever it holds stands
		}
		w, err := ho.wishFooter(ctx, seen, text)
		if err == nil {
			wishes.follow(w, r.name, "footer", fmt.Sprintf("%q", text))
		}
		return w, err
	}
	// A till per register: a sale its file does not take is kept and
	// said, and the day goes on.
	tills := make([]*till, len(regs))
	for i, r := range regs {
		tills[i] = newTill(r, rnd, say)
	}
	defer func() {
		for _, t := range tills {
			t.close(ctx)
		}
	}()
	step := 0
	for event := 0; ; event++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		tills[rnd.IntN(len(tills))].ring(ctx)
		if event%3 == 0 {
			for _, t := range tills {
				t.record(ctx)
			}
		}
		// The database gone away ends nothing: the step is skipped, and
		// said once per outage.
		if watch.due() && !db.note(ctx, errors.Join(watch.check(ctx), wishes.check(ctx))) {
			return ctx.Err()
		}
		switch step % 16 {
		case 0:
			offPrinter.printer.switchOff()
			say("%s's printer is switched off", offPrinter.name)
		case 1:
			// Once the head office knows every register's footer, and its
			// earlier wishes are answered.
			footers, err := ho.footers(ctx)
			if err == nil && hold(len(footers) == len(regs) && wishes.settled()) {
				continue
			}
			text := dayFooters[step/16%len(dayFooters)]
			clear(dayWishes)
			for _, r := range regs {
				if err == nil {
					dayWishes[r], err = wishFooter(footers, r, text)
				}
			}
			if !db.note(ctx, err) {
				return ctx.Err()
			}
			if err == nil {
				say("head office wishes every register the footer %q", text)
			}
		case 3:
			level := 3 + rnd.IntN(maxBrightness-2)
			r := regs[0]
			w, err := ho.wishSetting(ctx, r.id, "brightness", strconv.Itoa(level))
			if !db.note(ctx, err) {
				return ctx.Err()
			}
			if err == nil {
				wishes.follow(w, r.name, "screen brightness", strconv.Itoa(level))
				say("head office wishes %s's screen brightness %d", r.name, level)
			}
		case 4:
			cents := int64(150 + rnd.IntN(100))
			err := ho.changePrice(ctx, "coffee", cents)
			if !db.note(ctx, err) {
				return ctx.Err()
			}
			if err == nil {
				say("head office: coffee now costs €%d.%02d", cents/100, cents%100)
			}
		case 5:
			// Back on once the head office has shown its wish waiting.
			w := dayWishes[offPrinter]
			if w.Number != 0 && hold(wishes.stands(w) != server.WishPending) {
				continue
			}
			say("%s's printer is back on", offPrinter.name)
			offPrinter.printer.switchOn()
		case 6:
			unplugged.online.Store(false)
			unpluggedAt = time.Now()
			say("%s unplugged: it keeps selling, offline", unplugged.name)
		case 7:
			if err := unplugged.setFooter(ctx, technicianFooter); err != nil {
				say("%s: a technician could not set its footer: %s", unplugged.name, unplugged.why(err))
				break
			}
			say("a technician sets %s's footer to %q on the register itself%s", unplugged.name, technicianFooter, unplugged.where())
		case 8:
			// The day's tart is new; yesterday's is discontinued, never
			// deleted: the registers that sold it keep it for their
			// receipt lines, and no register is refused anything.
			day := step/16 + 1
			name := fmt.Sprintf("lemon tart no. %d", day)
			err := ho.addProduct(ctx, name, 320)
			if !db.note(ctx, err) {
				return ctx.Err()
			}
			if err == nil {
				say("head office: new product %q", name)
			}
			if day > 1 {
				old := fmt.Sprintf("lemon tart no. %d", day-1)
				err := ho.discontinue(ctx, old)
				if !db.note(ctx, err) {
					return ctx.Err()
				}
				if err == nil {
					say("head office: %q discontinued: the registers that sold it keep it, no longer sold, while their receipts point at it", old)
				}
			}
		case 9, 10:
			// Register 3 a new footer, though a technician changed it there
			// (the head office has not heard of that yet); then register 1
			// one too long for its printer — once it answered the day's
			// footer, so that the wish is based on the footer it holds.
			r, text := unplugged, nextFooter
			if step%16 == 10 {
				r, text = regs[0], tooLongFooter
				if w := dayWishes[r]; w.Number != 0 && hold(wishes.answered(w)) {
					continue
				}
			}
			footers, err := ho.footers(ctx)
			if err == nil {
				_, err = wishFooter(footers, r, text)
			}
			if !db.note(ctx, err) {
				return ctx.Err()
			}
			if err == nil {
				say("head office wishes %s the footer %q, in place of %q as it last heard", r.name, text, footers[r.id].Text)
			}
		case 12:
			off, shown := watch.offlineFor(unplugged.id)
			if (!shown || off < c.offlineFor) && time.Since(unpluggedAt) < maxUnplug {
				continue // the day waits; the registers go on selling
			}
			unplugged.online.Store(true)
			unplugged.engine.Nudge()
			say("%s plugged back in", unplugged.name)
		case 13:
			if hold(wishes.settled()) {
				continue // the registers answer the head office's wishes
			}
			if !db.note(ctx, report(ctx, ho, say)) {
				return ctx.Err()
			}
		case 14:
			// Once every wish of the day is answered, one footer for every
			// register, rolled out in one call: the first register first,
			// the others once it carried it out.
			if hold(wishes.settled()) {
				continue
			}
			text := rolloutFooters[step/16%len(rolloutFooters)]
			r, err := ho.rollFooter(ctx, text)
			if !db.note(ctx, err) {
				return ctx.Err()
			}
			if err == nil {
				rollout.start(r, text)
				say("head office rolls the footer %q out to every register: one first, the others once it carried it out", text)
				// Its counts as Roll left them, the first stage wished: said
				// now, not at the next look, by which the stage may be over.
				if _, err := rollout.running(ctx); !db.note(ctx, err) {
					return ctx.Err()
				}
			}
		case 15:
			running, err := rollout.running(ctx)
			if !db.note(ctx, err) {
				return ctx.Err()
			}
			if err == nil && hold(!running) {
				continue // the registers answer the rollout
			}
		}
		step++
	}
}

// report prints, per register, what the head office knows of it.
func report(ctx context.Context, ho *headOffice, say func(string, ...any)) error {
	all, err := ho.engine.Status(ctx)
	if err != nil {
		return err
	}
	var filed int
	if err := ho.pool.QueryRow(ctx, "SELECT count(*) FROM shop.receipts").Scan(&filed); err != nil {
		return err
	}
	slices.SortFunc(all, func(a, b server.ReplicaStatus) int { return strings.Compare(ho.name(a.ID), ho.name(b.ID)) })
	for _, st := range all {
		for _, t := range st.Tables {
			if t.Table == "products" {
				say("%s holds %d of %d products", ho.name(st.ID), t.Holds, t.Should)
			}
		}
	}
	say("head office has filed %d receipts", filed)
	footers, err := ho.footers(ctx)
	if err != nil {
		return err
	}
	for _, st := range all {
		if f, ok := footers[st.ID]; ok {
			say("%s prints the footer %q", ho.name(st.ID), f.Text)
		}
	}
	wishes, err := ho.engine.Wishes(ctx, server.WishScope{})
	if err != nil {
		return err
	}
	say("head office: where its wishes to the registers stand: %s", wishCounts(wishes.Counts))
	return nil
}
