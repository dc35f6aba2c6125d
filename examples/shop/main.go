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
//	go run ./examples/shop headoffice [-addr 127.0.0.1:8080] [-data data/shop] [-registers 3] [-wish-every 0]
//	go run ./examples/shop register -n 2 [-server http://127.0.0.1:8080] [-token-file data/shop/tokens/register-2.token] [-data data/shop] [-drill FILE]
//
// The head office serves the sync endpoints and the dashboard for as many
// registers as its -registers flag says (three, the demo's, unless set),
// registers 1 to N, and keeps each register's token in a file of its data
// folder, issued the first time and handed out again after that; it never
// replaces a register's token unless started with -rotate-tokens. Either
// side keeps running while the other, or the head office's PostgreSQL, is
// away, and resumes by itself. A register, 1 to the head office's
// -registers, keeps its own SQLite file, runs the receive loop and the
// uplink, and rings up sales on a simulated till.
//
// For fire drills, and for the soak that runs these programs under
// faults, each meets on demand what only it can: a register given
// -drill FILE meets the faults that file asks, one a line, as they come
// and go — its disk full or read-only, its clock stepped, its death
// (SIGKILL) in the middle of carrying out a wish (see drill.go):
//
//	disk full
//	disk read-only
//	clock -2h
//	kill in wish
//
// and a head office given -wish-every D acts, every D, as a busy
// operator: it wishes a register drawn at random another footer or
// screen brightness, at times withdraws a wish still waiting or rolls a
// footer out to every register (see busy.go). Of several head offices
// over one database, give that flag to one: each one given it acts, and
// two make the registers twice as busy.
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
	// transport is how the registers sync: "http" (the head office's
	// sync endpoints; also when empty) or "nats" (request and reply over
	// NATS, served as a queue group).
	transport string
	// natsURL is the NATS server's, under -transport nats; empty starts
	// one inside the head office's process, on a free loopback port.
	natsURL string
	// poll is how long a register's long-poll waits; the dashboard shows
	// a register online while it started one within twice that.
	poll time.Duration
	// offlineFor is how long the demo keeps the unplugged register
	// unplugged once the head office shows it offline.
	offlineFor time.Duration
	// rotateTokens has the head office issue every register a new token,
	// replacing the one it holds: the only way it ever replaces one.
	rotateTokens bool
	// registers is how many registers the head office serves, registers
	// 1 to registers: the demo's three, unless -registers says otherwise.
	registers int
	// wishEvery has the head office act as a busy operator every so
	// often (see busy.go); 0 never.
	wishEvery time.Duration
}

// defaultPoll is how long a register's long-poll waits, unless -poll says
// otherwise: short enough for the dashboard to show an unplugged register
// offline within seconds.
const defaultPoll = 3 * time.Second

const usage = `usage:
  shop [flags]               the demo: a head office and three registers, in one process
  shop headoffice [flags]    the head office alone: sync endpoints and dashboard, for
                             registers 1 to N (-registers N, 3 unless set); with
                             -wish-every D, a busy operator making wishes every D too
  shop register -n N [flags] register N (1 or more) alone, syncing with a head office
                             that serves it; with -drill FILE, meeting the faults that
                             file asks ("disk full", "disk read-only", "clock -2h",
                             "kill in wish"), for fire drills
With -transport nats, the demo and the head office serve the registers over
NATS (a server started in the process unless -nats names one), and a
register whose -server is a nats:// URL syncs over it.
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
	fs.StringVar(&c.transport, "transport", "http", `how the registers sync: "http", or "nats" (request and reply over NATS; see -nats)`)
	fs.StringVar(&c.natsURL, "nats", "", "under -transport nats, the NATS server's URL (nats://host:port); empty starts one inside the head office's process")
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
	fs.IntVar(&c.registers, "registers", demoRegisters, "how many registers the head office serves, registers 1 to N: it prepares each and keeps its token in <data>/tokens/register-<n>.token")
	fs.DurationVar(&c.wishEvery, "wish-every", 0, "act as a busy operator every this long: wish a register drawn at random another footer or screen brightness, at times withdraw a wish still waiting or roll a footer out to every register (0: never); over one database, give it to one head office, or the registers are wished as often as by that many operators")
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
// demo is set, those of the head office alone when it is not.
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
	if c.transport != "" && c.transport != "http" && c.transport != "nats" {
		errs = append(errs, fmt.Errorf("%w: -transport must be http or nats, not %q", errBadFlag, c.transport))
	}
	if c.natsURL != "" && c.transport != "nats" {
		errs = append(errs, fmt.Errorf("%w: -nats names a NATS server for -transport nats only", errBadFlag))
	}
	if !demo && c.registers < 1 {
		errs = append(errs, fmt.Errorf("%w: -registers must be 1 or more, not %d", errBadFlag, c.registers))
	}
	if c.wishEvery < 0 {
		errs = append(errs, fmt.Errorf("%w: -wish-every must be positive, or 0 for no busy operator, not %v", errBadFlag, c.wishEvery))
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
	ho, err = startHeadOffice(ctx, dbURL, c.addr, data, c.registers, c.poll, log)
	if err != nil {
		closePG()
		return nil, "", nil, err
	}
	if c.transport == "nats" {
		if err := ho.serveNATS(ctx, c.natsURL, c.poll, log); err != nil {
			ho.wait()
			closePG()
			return nil, "", nil, err
		}
		say("registers sync over NATS at %s", ho.syncURL)
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
	c.registers = len(registerNames) // the demo's three, always
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
		r, err := startRegister(ctx, nil, data, i, ho.syncURL, token, ho.codecs, poll, log)
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
	d := newDay(c, ho, regs, rnd, say)
	defer d.closeTills(ctx)
	for event := 0; ; event++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		d.trade(ctx, event)
		if !d.look(ctx) {
			return ctx.Err()
		}
		switch d.play(ctx) {
		case stepWaits:
			continue
		case dayOver:
			return ctx.Err()
		}
		d.step++
	}
}

// day is a day of trade as it goes: the registers and their tills, what
// the demo watches the head office show, and the step of the script it
// is at.
type day struct {
	c    config
	ho   *headOffice
	regs []*register
	rnd  *rand.Rand
	say  func(string, ...any)
	// A till per register: a sale its file does not take is kept and
	// said, and the day goes on.
	tills    []*till
	watch    *onlineWatch
	wishes   *wishWatch
	commands *commandWatch
	rollout  *rolloutWatch
	db       *dbHealth
	step     int

	// unplugged is the register unplugged at step 6, since unpluggedAt.
	// maxUnplug plugs it back in even if the head office never showed it
	// offline (another process polling in its name, say).
	unplugged   *register
	unpluggedAt time.Time
	maxUnplug   time.Duration
	// A step waits for what it needs since holding, at most maxHold (see
	// hold).
	maxHold time.Duration
	holding time.Time
	// dayWishes are the day's wishes of the registers' footers; that of
	// offPrinter waits while its printer is off.
	dayWishes  map[*register]server.Wished
	offPrinter *register
	// recount is the command of step 11 to the unplugged register, which
	// plugBackIn lets expire first.
	recount uuid.UUID
}

// newDay is the day of trade of regs, before its first event.
func newDay(c config, ho *headOffice, regs []*register, rnd *rand.Rand, say func(string, ...any)) *day {
	d := &day{c: c, ho: ho, regs: regs, rnd: rnd, say: say,
		watch: newOnlineWatch(ho, statusEvery, say), wishes: newWishWatch(ho, say), commands: newCommandWatch(ho, say), rollout: &rolloutWatch{ho: ho, say: say}, db: &dbHealth{say: say},
		unplugged: regs[len(regs)-1], maxUnplug: 2*c.poll + c.offlineFor + time.Minute, maxHold: 2*c.poll + time.Minute,
		dayWishes: map[*register]server.Wished{}, offPrinter: regs[1]}
	d.tills = make([]*till, len(regs))
	for i, r := range regs {
		d.tills[i] = newTill(r, rnd, say)
	}
	return d
}

// closeTills closes every register's till.
func (d *day) closeTills(ctx context.Context) {
	for _, t := range d.tills {
		t.close(ctx)
	}
}

// trade rings up a sale on a till, and, at every third event, records the
// tills' temperature.
func (d *day) trade(ctx context.Context, event int) {
	d.tills[d.rnd.IntN(len(d.tills))].ring(ctx)
	if event%3 == 0 {
		for _, t := range d.tills {
			t.record(ctx)
		}
	}
}

// look reads, when due, what the head office shows of the registers and of
// its wishes, and says what changed. The database gone away ends nothing:
// it is said once per outage, and a step that needs it is skipped. look
// returns false when ctx ended.
func (d *day) look(ctx context.Context) bool {
	return !d.watch.due() || d.db.note(ctx, errors.Join(d.watch.check(ctx), d.wishes.check(ctx), d.commands.check(ctx)))
}

// stepOutcome is how a step of the day's script went.
type stepOutcome int

const (
	stepDone  stepOutcome = iota // the day goes on to the next step
	stepWaits                    // the step is played again at the next event
	dayOver                      // ctx ended: so does the day
)

// play plays the current step of the day's script, of sixteen; step 2
// lets the day go by.
func (d *day) play(ctx context.Context) stepOutcome {
	switch d.step % 16 {
	case 0:
		d.switchPrinterOff()
	case 1:
		return d.wishEveryFooter(ctx)
	case 3:
		return d.wishBrightness(ctx)
	case 4:
		return d.changeCoffeePrice(ctx)
	case 5:
		return d.switchPrinterOn(ctx)
	case 6:
		d.unplug()
	case 7:
		d.technicianSetsFooter(ctx)
	case 8:
		return d.replaceTart(ctx)
	case 9, 10:
		return d.wishOneFooter(ctx)
	case 11:
		return d.askRecount(ctx)
	case 12:
		return d.plugBackIn()
	case 13:
		return d.reportOnceSettled(ctx)
	case 14:
		return d.rollFooterOut(ctx)
	case 15:
		return d.awaitRollout(ctx)
	}
	return stepDone
}

// hold says whether a step waits for ready, at most maxHold: the day goes
// on without it (its database away, say).
func (d *day) hold(ready bool) bool {
	switch {
	case ready:
	case d.holding.IsZero():
		d.holding = time.Now()
		return true
	case time.Since(d.holding) < d.maxHold:
		return true
	}
	d.holding = time.Time{}
	return false
}

// wishFooter wishes register r the footer text, in place of the one the
// head office last heard of, of footers; and follows the wish.
func (d *day) wishFooter(ctx context.Context, footers map[uuid.UUID]Footer, r *register, text string) (server.Wished, error) {
	w, err := d.ho.wishFooterOf(ctx, footers, r.id, text)
	if err == nil {
		d.wishes.follow(w, r.name, "footer", fmt.Sprintf("%q", text))
	}
	return w, err
}

// switchPrinterOff switches off the printer of offPrinter, whose footer
// wish is then to wait until it is back on.
func (d *day) switchPrinterOff() {
	d.offPrinter.printer.switchOff()
	d.say("%s's printer is switched off", d.offPrinter.name)
}

// wishEveryFooter wishes every register the day's footer, once the head
// office knows every register's footer, and its earlier wishes are
// answered.
func (d *day) wishEveryFooter(ctx context.Context) stepOutcome {
	footers, err := d.ho.footers(ctx)
	if err == nil && d.hold(len(footers) == len(d.regs) && d.wishes.settled()) {
		return stepWaits
	}
	text := dayFooters[d.step/16%len(dayFooters)]
	clear(d.dayWishes)
	for _, r := range d.regs {
		if err == nil {
			d.dayWishes[r], err = d.wishFooter(ctx, footers, r, text)
		}
	}
	if !d.db.note(ctx, err) {
		return dayOver
	}
	if err == nil {
		d.say("head office wishes every register the footer %q", text)
	}
	return stepDone
}

// wishBrightness wishes register 1's screen a new brightness.
func (d *day) wishBrightness(ctx context.Context) stepOutcome {
	level := 3 + d.rnd.IntN(maxBrightness-2)
	r := d.regs[0]
	w, err := d.ho.wishSetting(ctx, r.id, "brightness", strconv.Itoa(level))
	if !d.db.note(ctx, err) {
		return dayOver
	}
	if err == nil {
		d.wishes.follow(w, r.name, "screen brightness", strconv.Itoa(level))
		d.say("head office wishes %s's screen brightness %d", r.name, level)
	}
	return stepDone
}

// changeCoffeePrice has the head office change the price of coffee.
func (d *day) changeCoffeePrice(ctx context.Context) stepOutcome {
	cents := int64(150 + d.rnd.IntN(100))
	err := d.ho.changePrice(ctx, "coffee", cents)
	if !d.db.note(ctx, err) {
		return dayOver
	}
	if err == nil {
		d.say("head office: coffee now costs €%d.%02d", cents/100, cents%100)
	}
	return stepDone
}

// switchPrinterOn switches the printer back on once the head office has
// shown its wish waiting, and asks the register for a test page.
func (d *day) switchPrinterOn(ctx context.Context) stepOutcome {
	w := d.dayWishes[d.offPrinter]
	if w.Number != 0 && d.hold(d.wishes.stands(w) != server.WishPending) {
		return stepWaits
	}
	d.say("%s's printer is back on", d.offPrinter.name)
	d.offPrinter.printer.switchOn()
	if !d.db.note(ctx, d.askTestPage(ctx)) {
		return dayOver
	}
	return stepDone
}

// unplug unplugs register 3, which keeps selling, offline.
func (d *day) unplug() {
	d.unplugged.online.Store(false)
	d.unpluggedAt = time.Now()
	d.say("%s unplugged: it keeps selling, offline", d.unplugged.name)
}

// technicianSetsFooter has a technician set register 3's footer on the
// register itself, while it is unplugged: the head office's wish of the
// next step, made in place of the footer it last heard of, is then
// superseded.
func (d *day) technicianSetsFooter(ctx context.Context) {
	r := d.unplugged
	if err := r.setFooter(ctx, technicianFooter); err != nil {
		d.say("%s: a technician could not set its footer: %s", r.name, r.why(err))
		return
	}
	d.say("a technician sets %s's footer to %q on the register itself%s", r.name, technicianFooter, r.where())
}

// replaceTart adds the day's tart, which is new, and discontinues
// yesterday's, never deleted: the registers that sold it keep it for
// their receipt lines, and no register is refused anything.
func (d *day) replaceTart(ctx context.Context) stepOutcome {
	today := d.step/16 + 1
	name := fmt.Sprintf("lemon tart no. %d", today)
	err := d.ho.addProduct(ctx, name, 320)
	if !d.db.note(ctx, err) {
		return dayOver
	}
	if err == nil {
		d.say("head office: new product %q", name)
	}
	if today > 1 {
		old := fmt.Sprintf("lemon tart no. %d", today-1)
		err := d.ho.discontinue(ctx, old)
		if !d.db.note(ctx, err) {
			return dayOver
		}
		if err == nil {
			d.say("head office: %q discontinued: the registers that sold it keep it, no longer sold, while their receipts point at it", old)
		}
	}
	return stepDone
}

// wishOneFooter wishes, at step 9, register 3 a new footer, though a
// technician changed it there (the head office has not heard of that
// yet); and at step 10 register 1 one too long for its printer — once it
// answered the day's footer, so that the wish is based on the footer it
// holds.
func (d *day) wishOneFooter(ctx context.Context) stepOutcome {
	r, text := d.unplugged, nextFooter
	if d.step%16 == 10 {
		r, text = d.regs[0], tooLongFooter
		if w := d.dayWishes[r]; w.Number != 0 && d.hold(d.wishes.answered(w)) {
			return stepWaits
		}
	}
	footers, err := d.ho.footers(ctx)
	if err == nil {
		_, err = d.wishFooter(ctx, footers, r, text)
	}
	if !d.db.note(ctx, err) {
		return dayOver
	}
	if err == nil {
		d.say("head office wishes %s the footer %q, in place of %q as it last heard", r.name, text, footers[r.id].Text)
	}
	return stepDone
}

// plugBackIn plugs the unplugged register back in once the head office has
// shown it offline for c.offlineFor, or after maxUnplug; the day waits
// meanwhile, and the registers go on selling.
func (d *day) plugBackIn() stepOutcome {
	off, shown := d.watch.offlineFor(d.unplugged.id)
	if (!shown || off < d.c.offlineFor || d.commands.pending(d.recount)) && time.Since(d.unpluggedAt) < d.maxUnplug {
		return stepWaits
	}
	d.unplugged.online.Store(true)
	d.unplugged.engine.Nudge()
	d.say("%s plugged back in", d.unplugged.name)
	return stepDone
}

// reportOnceSettled reports, once the registers answered the head office's
// wishes, what it knows of each.
func (d *day) reportOnceSettled(ctx context.Context) stepOutcome {
	if d.hold(d.wishes.settled()) {
		return stepWaits
	}
	if !d.db.note(ctx, report(ctx, d.ho, d.say)) {
		return dayOver
	}
	return stepDone
}

// rollFooterOut rolls one footer out to every register in one call, once
// every wish of the day is answered: the first register first, the others
// once it carried it out.
func (d *day) rollFooterOut(ctx context.Context) stepOutcome {
	if d.hold(d.wishes.settled()) {
		return stepWaits
	}
	text := rolloutFooters[d.step/16%len(rolloutFooters)]
	r, err := d.ho.rollFooter(ctx, text)
	if !d.db.note(ctx, err) {
		return dayOver
	}
	if err == nil {
		d.rollout.start(r, text)
		d.say("head office rolls the footer %q out to every register: one first, the others once it carried it out", text)
		// Its counts as Roll left them, the first stage wished: said
		// now, not at the next look, by which the stage may be over.
		if _, err := d.rollout.running(ctx); !d.db.note(ctx, err) {
			return dayOver
		}
	}
	return stepDone
}

// awaitRollout waits while the registers answer the rollout.
func (d *day) awaitRollout(ctx context.Context) stepOutcome {
	running, err := d.rollout.running(ctx)
	if !d.db.note(ctx, err) {
		return dayOver
	}
	if err == nil && d.hold(!running) {
		return stepWaits
	}
	return stepDone
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
	cents, counted := ho.sales.now()
	say("head office: sales so far €%d.%02d, from %d receipts, counted live as they are filed", cents/100, cents%100, counted)
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
