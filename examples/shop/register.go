package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"modernc.org/sqlite" // the register's SQLite driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/natssync"
)

// register is one till: its own SQLite file, the engine's replica, and the
// HTTP client that carries messages both ways. Unplugging it cuts the
// network, not the till: sales go on, and go up once it is plugged back.
type register struct {
	id     uuid.UUID
	name   string
	file   string
	db     *sql.DB
	engine *replica.Replica
	log    *slog.Logger
	online atomic.Bool
	// printer prints the footer, and carries out the head office's
	// wishes of it.
	printer *printer
	// contact follows how the head office answers its receive loop.
	contact *contact
	// drill is what the register's drill file asks of it (nil: no
	// drill file): its disk full or read-only, its clock stepped, its
	// death in a wish (see drill.go).
	drill *drill
	wg    sync.WaitGroup
	// closeTransport closes what the register syncs over, once it
	// stopped (its NATS connection); nil over HTTP.
	closeTransport func()
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

// openFile opens a register's SQLite file, with no drill:
// modernc.org/sqlite over dsn.
func openFile(path string) (*sql.DB, error) {
	return sql.Open("sqlite", dsn(path))
}

// startRegister opens (or reopens) a register's database and starts its
// loops; they stop when ctx ends. Its long-polls wait at most poll. A
// data folder or file it cannot write to is named as read-only, with how
// to mend it, before SQLite is asked anything. dr, unless nil, is the
// register's drill, which it meets (see drill.go): it reads the drill
// file at once, and then as it changes, until ctx ends.
func startRegister(ctx context.Context, dr *drill, dir string, i int, headOffice, token string, codecs *magicsync.Codecs, poll time.Duration, log *slog.Logger) (*register, error) {
	return openRegister(ctx, dr, registerID(i), registerName(i), registerFile(dir, i), headOffice, token, codecs, poll, log)
}

// openRegister is startRegister for the register id, called name, over
// the SQLite file file: one of the corner shop's, or (in tests) a register
// of another shop.
func openRegister(ctx context.Context, dr *drill, id uuid.UUID, name, file, headOffice, token string, codecs *magicsync.Codecs, poll time.Duration, log *slog.Logger) (_ *register, err error) {
	r := &register{id: id, name: name, file: file, log: log, contact: newContact(), printer: &printer{drill: dr}, drill: dr}
	r.online.Store(true)
	if err := checkWritable(r.file); err != nil {
		return nil, fmt.Errorf("%s: %w", r.name, err)
	}
	if err := createPrivate(r.file); err != nil {
		return nil, fmt.Errorf("%s: creating its file: %w", r.name, err)
	}
	open := openFile
	if dr != nil {
		// What the drill file asks now counts from the start: the clock
		// the engine and the till read. (A disk drill meets the
		// register once it is up.)
		dr.check()
		open = dr.open
	}
	db, err := open(r.file)
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
		return nil, fmt.Errorf("%s: creating its tables: %w", r.name, r.plain(err))
	}
	if err := upgradeRegister(ctx, db); err != nil {
		return nil, fmt.Errorf("%s: upgrading its tables: %w", r.name, r.plain(err))
	}
	if err := replica.Install(ctx, db, codecs); err != nil {
		return nil, fmt.Errorf("%s: %w", r.name, r.plain(err))
	}
	var (
		uplink  replica.Uplink
		receive func(ctx context.Context, e replica.Endpoint) error
	)
	if strings.HasPrefix(headOffice, "nats://") {
		nc, err := natssync.Connect(headOffice, r.id, nats.Name(r.name))
		if err != nil {
			return nil, fmt.Errorf("%s: connecting to NATS: %w", r.name, err)
		}
		r.closeTransport = nc.Close
		defer func() {
			if err != nil {
				nc.Close()
			}
		}()
		client := natssync.NewClient(nc, r.id, token, natssync.ClientOptions{
			PollWait: poll, Online: r.online.Load, Logger: log.With("register", r.name),
			BackoffMin: 200 * time.Millisecond, BackoffMax: 2 * time.Second,
		})
		uplink, receive = client, func(ctx context.Context, e replica.Endpoint) error { return client.ReceiveLoop(ctx, e) }
	} else {
		client := httpsync.NewClient(headOffice, r.id, token, httpsync.ClientOptions{
			PollWait: poll, Online: r.online.Load, Logger: log.With("register", r.name),
			HTTPClient: &http.Client{Transport: r.contact},
			BackoffMin: 200 * time.Millisecond, BackoffMax: 2 * time.Second,
		})
		uplink, receive = client, func(ctx context.Context, e replica.Endpoint) error { return client.ReceiveLoop(ctx, e) }
	}
	settings := replica.Settings{
		Lanes:      []replica.Lane{{Name: "telemetry", Tables: []string{"readings"}}},
		Idle:       300 * time.Millisecond,
		BackoffMin: 200 * time.Millisecond, BackoffMax: 2 * time.Second,
		DigestsEvery: time.Minute,
		// The head office's wishes of the footer go to the printer, of
		// the other settings to the screen.
		Wishes: wishHandlers(r.printer, screen{drill: dr}),
		// Its printer prints test pages, its till recounts the drawer.
		Commands: commandHandlers(r),
		Logger:   log.With("register", r.name),
	}
	if dr != nil {
		settings.Clock = drillClock{dr}
	}
	r.engine, err = replica.New(ctx, db, codecs, replica.Me(r.id), uplink, settings)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.name, r.plain(err))
	}
	defer func() {
		if err != nil {
			r.engine.Close()
		}
	}()
	r.printer.backOn = r.engine.OfferWishes
	if err := r.writeSettings(ctx); err != nil {
		return nil, fmt.Errorf("%s: writing its settings: %w", r.name, r.plain(err))
	}
	if dr != nil {
		// Up: from now on the register meets a disk drill too.
		dr.armed.Store(true)
		if dr.path != "" {
			r.wg.Go(func() { dr.watch(ctx) })
		}
	}
	r.wg.Go(func() { _ = r.engine.Run(ctx) })
	r.wg.Go(func() { _ = receive(ctx, r.engine.Endpoint()) })
	return r, nil
}

// now is what the register's clock reads: the system's, stepped as its
// drill file asks. The times the register writes are read from it.
func (r *register) now() time.Time {
	return r.drill.now()
}

// upgradeRegister brings the tables of a file an earlier demo created up
// to registerSchema: it adds products.discontinued, which SQLite cannot add
// "IF NOT EXISTS". It runs before replica.New, which reads the tables'
// columns and foreign keys once.
func upgradeRegister(ctx context.Context, db *sql.DB) error {
	var has bool
	if err := db.QueryRowContext(ctx, "SELECT count(*) > 0 FROM pragma_table_info('products') WHERE name = 'discontinued'").Scan(&has); err != nil || has {
		return err
	}
	_, err := db.ExecContext(ctx, "ALTER TABLE products ADD COLUMN discontinued INTEGER NOT NULL DEFAULT 0")
	return err
}

// createPrivate creates the register's file, empty, readable and writable
// by its owner only (0600, like the token files), unless it exists: SQLite
// would create it world-readable, and gives its -wal and -shm files the
// mode of the database file. An existing file is left as it is.
func createPrivate(file string) error {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// readOnlyError names a register's data folder, or one of its files, as
// read-only.
type readOnlyError struct {
	path   string
	folder bool
	err    error
}

func (e *readOnlyError) Error() string {
	if e.folder {
		return fmt.Sprintf("the data folder %s is read-only", e.path)
	}
	return fmt.Sprintf("its file %s is read-only", e.path)
}

func (e *readOnlyError) Unwrap() error { return e.err }

// mend says how to make the folder or file writable again.
func (e *readOnlyError) mend() string {
	if errors.Is(e.err, syscall.EROFS) {
		return "it is on a file system mounted read-only: remount it read-write, or pick another folder with -data"
	}
	return fmt.Sprintf("make it writable by the user the register runs as (chmod u+w %s), or pick another folder with -data", e.path)
}

// readOnly says whether err is the operating system refusing to write.
func readOnly(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// checkWritable checks, before the register opens its file, that it can
// write there: that it can create a file in the data folder (SQLite keeps
// its -wal and -shm files beside the database), and open the database and
// those files for writing, where they exist. A read-only folder or file is
// named as such (a *readOnlyError), with how to mend it: SQLite's own
// error would say "unable to open database file" or "attempt to write a
// readonly database", and name neither.
//
// It opens the files themselves, so it must run before any connection to
// them is open in this process: closing a descriptor of a file drops every
// POSIX lock the process holds on it, SQLite's included.
func checkWritable(file string) error {
	dir := filepath.Dir(file)
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		if readOnly(err) {
			ro := &readOnlyError{path: dir, folder: true, err: err}
			return fmt.Errorf("%w: %s", ro, ro.mend())
		}
		return fmt.Errorf("the data folder %s cannot be written to: %w", dir, err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return err
	}
	for _, path := range []string{file, file + "-wal", file + "-shm"} {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		switch {
		case err == nil:
			f.Close()
		case errors.Is(err, fs.ErrNotExist):
		case readOnly(err):
			ro := &readOnlyError{path: path, err: err}
			return fmt.Errorf("%w: %s", ro, ro.mend())
		default:
			return fmt.Errorf("opening %s for writing: %w", path, err)
		}
	}
	return nil
}

// why says in plain words why the register could not write to its file:
// the disk is full, the data folder or the file is read-only, and so on,
// by SQLite's result code. SQLite does not tell a read-only folder from a
// read-only file, so that is looked up on the disk — without opening the
// file, which the engine's connections hold locks on. A disk a drill
// made full or read-only is said as such, and named a drill.
func (r *register) why(err error) string {
	se, ok := errors.AsType[*sqlite.Error](err)
	if !ok {
		return err.Error()
	}
	drilled := r.drill.disk()
	if de, ok := errors.AsType[*drillDiskError](err); ok {
		drilled = de.disk // met on the drill's disk, which may have ended since
	}
	switch code := se.Code() & 0xff; code {
	case sqlite3.SQLITE_FULL:
		if drilled == diskFull {
			return "the disk is full (drill)"
		}
		return "the disk is full"
	case sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM, sqlite3.SQLITE_IOERR:
		if code == sqlite3.SQLITE_READONLY && drilled == diskReadOnly {
			return (&readOnlyError{path: r.file}).Error() + " (drill)"
		}
		dir := filepath.Dir(r.file)
		if f, err := os.CreateTemp(dir, ".write-check-*"); err != nil && readOnly(err) {
			return (&readOnlyError{path: dir, folder: true, err: err}).Error()
		} else if err == nil {
			f.Close()
			os.Remove(f.Name())
		}
		if fi, err := os.Stat(r.file); err == nil && fi.Mode().Perm()&0o200 == 0 {
			return (&readOnlyError{path: r.file}).Error()
		}
		switch code {
		case sqlite3.SQLITE_READONLY:
			return fmt.Sprintf("its file %s takes no writes (%v)", r.file, err)
		case sqlite3.SQLITE_IOERR:
			return fmt.Sprintf("the disk failed to write (%v)", err)
		}
		return fmt.Sprintf("its file %s cannot be opened (%v)", r.file, err)
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return fmt.Sprintf("its file %s is locked by another program", r.file)
	}
	return err.Error()
}

// plain is err, which the register's file returned, saying why in plain
// words; SQLite's own error stays in its chain.
func (r *register) plain(err error) error {
	if _, ok := errors.AsType[*sqlite.Error](err); !ok {
		return err
	}
	return &plainError{words: r.why(err), err: err}
}

type plainError struct {
	words string
	err   error
}

func (e *plainError) Error() string { return e.words }
func (e *plainError) Unwrap() error { return e.err }

// refused says whether SQLite refused what was written for the data
// itself — a constraint, a value too big or of the wrong type — which no
// retry mends, rather than for a failure of storage (a full disk, a
// read-only file), which goes once the storage is mended.
func refused(err error) bool {
	se, ok := errors.AsType[*sqlite.Error](err)
	if !ok {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH:
		return true
	}
	return false
}

// writeSettings sets the footer the register prints and its screen's
// brightness, once: from then on they change as the head office wishes,
// or as a technician sets them on the register.
func (r *register) writeSettings(ctx context.Context) error {
	now := r.now().UTC()
	if _, err := r.db.ExecContext(ctx, "INSERT INTO footers (register_id, text, changed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
		r.id, "Thank you — see you soon!", now); err != nil {
		return err
	}
	_, err := r.db.ExecContext(ctx, "INSERT INTO register_settings (register_id, name, value, changed_at) VALUES (?, 'brightness', '7', ?) ON CONFLICT DO NOTHING",
		r.id, now)
	return err
}

// setFooter sets the footer on the register itself, as a technician on
// site would: the register's own write, which goes up as any other.
func (r *register) setFooter(ctx context.Context, text string) error {
	if _, err := r.db.ExecContext(ctx, "UPDATE footers SET text = ?, changed_at = ? WHERE register_id = ?", text, r.now().UTC(), r.id); err != nil {
		return err
	}
	r.engine.Nudge()
	return nil
}

// saleLine is one product sold on a sale.
type saleLine struct {
	id       uuid.UUID
	product  string
	quantity int64
	price    int64
}

// sale is one sale rung up: its receipt, when, its lines and total.
type sale struct {
	receipt uuid.UUID
	at      time.Time
	lines   []saleLine
	total   int64
}

// String says what was sold: "2 line(s), €3.50 (receipt 1a2b3c4d)".
func (s sale) String() string {
	return fmt.Sprintf("%d line(s), €%d.%02d (receipt %s)", len(s.lines), s.total/100, s.total%100, s.receipt.String()[:8])
}

// ringUp rings up a sale of one to three products the register holds, at
// their prices now, as the till scans their barcodes; none (no lines)
// while it holds no products yet. A discontinued product it keeps for its
// receipt lines has no barcodes any more, and is not sold. It only reads
// the register's file, which a full disk still allows: save writes the
// sale.
func (r *register) ringUp(ctx context.Context, rnd *rand.Rand) (sale, error) {
	rows, err := r.db.QueryContext(ctx, "SELECT code FROM barcodes ORDER BY code")
	if err != nil {
		return sale{}, err
	}
	var codes []string
	for rows.Next() {
		var code string
		if err := rows.Scan(&code); err != nil {
			rows.Close()
			return sale{}, err
		}
		codes = append(codes, code)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return sale{}, err
	}
	s := sale{receipt: uuid.New(), at: r.now().UTC()}
	for range 1 + rnd.IntN(3) {
		if len(codes) == 0 {
			break // nothing to sell yet
		}
		id, price, found, err := r.lookup(ctx, codes[rnd.IntN(len(codes))])
		if err != nil {
			return sale{}, err
		}
		if !found {
			continue // let go since it was listed
		}
		l := saleLine{id: uuid.New(), product: id, quantity: int64(1 + rnd.IntN(2)), price: price}
		s.lines = append(s.lines, l)
		s.total += l.quantity * l.price
	}
	return s, nil
}

// lookup finds the product a barcode scanned names, and its price; found
// is false for a code the register does not hold, or whose product is
// discontinued.
func (r *register) lookup(ctx context.Context, code string) (product string, price int64, found bool, err error) {
	err = r.db.QueryRowContext(ctx, `SELECT p.id, p.price_cents FROM barcodes b JOIN products p ON p.id = b.product_id
		WHERE b.code = ? AND NOT p.discontinued`, code).Scan(&product, &price)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, false, nil
	}
	return product, price, err == nil, err
}

// save writes a sale rung up into the register's file, as one local
// transaction, and nudges the engine to send it up. A sale the file holds
// already (a commit that went through though it reported an error) is
// not written twice.
func (r *register) save(ctx context.Context, s sale) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// A write first: the transaction takes the write lock at once,
	// waiting for it (busy_timeout) if need be.
	res, err := tx.ExecContext(ctx, "INSERT INTO receipts (register_id, id, total_cents, rung_at) VALUES (?, ?, 0, ?) ON CONFLICT DO NOTHING", r.id, s.receipt, s.at)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err // saved before, or err
	}
	for _, l := range s.lines {
		if _, err := tx.ExecContext(ctx, "INSERT INTO receipt_lines (register_id, id, receipt_id, product_id, quantity, price_cents, rung_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
			r.id, l.id, s.receipt, l.product, l.quantity, l.price, s.at); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, "UPDATE receipts SET total_cents = ? WHERE register_id = ? AND id = ?", s.total, r.id, s.receipt); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	r.engine.Nudge()
	return nil
}

// read records the till's temperature; it goes up in the telemetry lane.
func (r *register) read(ctx context.Context, rnd *rand.Rand) error {
	now := r.now()
	_, err := r.db.ExecContext(ctx, "INSERT INTO readings (register_id, id, celsius, at) VALUES (?, ?, ?, ?)",
		r.id, now.UnixNano(), 20+rnd.Float64()*5, now.UTC())
	return err
}

// where is " (offline)" while the register is unplugged.
func (r *register) where() string {
	if !r.online.Load() {
		return " (offline)"
	}
	return ""
}

// wait stops the register once its context ended.
func (r *register) wait() {
	r.wg.Wait()
	r.engine.Close()
	r.db.Close()
	if r.closeTransport != nil {
		r.closeTransport()
	}
}

// maxUnsaved is the most sales a till keeps in memory while its
// register's file refuses them.
const maxUnsaved = 100

// till rings up sales on a register and saves them in its file, saying
// what happens in plain words.
//
// A sale the file does not take — the disk full, the data folder made
// read-only, any failure of storage — does not stop the till. The sale is
// kept in memory, and the kept sales are saved, oldest first, before the
// till rings up its next one: once the file takes writes again they are
// all saved, and nothing rung up is lost. Nothing the file holds is
// touched: a failed sale's transaction is rolled back whole. The till
// keeps at most max sales so; with that many waiting it rings up no new
// sale, and says why, rather than drop one a customer paid for. Kept
// sales live in memory only: when the program stops they are tried once
// more, and those the file still refuses are named as lost.
//
// A sale SQLite refuses for its data (a constraint: a product gone from
// the range, say) would be refused forever, and would hold up every sale
// behind it: it is not kept, and the till says so.
type till struct {
	r   *register
	rnd *rand.Rand
	say func(string, ...any)
	max int
	// unsaved are the sales rung up that the file has not taken yet,
	// oldest first.
	unsaved []sale
	// empty: the till last found no products to sell, and said so.
	empty bool
}

func newTill(r *register, rnd *rand.Rand, say func(string, ...any)) *till {
	return &till{r: r, rnd: rnd, say: say, max: maxUnsaved}
}

// ring saves the sales kept unsaved, then rings up a new sale and saves
// it — or keeps it, behind those that still wait — saying what happened.
// It rings up none while the register holds no products yet, nor while
// max sales wait.
func (t *till) ring(ctx context.Context) {
	name := t.r.name
	kept, err := t.saveKept(ctx)
	switch {
	case len(kept) > 0 && err == nil:
		t.say("%s saved %d sale(s) it had kept in memory: its file takes writes again", name, len(kept))
	case len(kept) > 0:
		t.say("%s saved %d sale(s) it had kept in memory; %d still wait", name, len(kept), len(t.unsaved))
	}
	if len(t.unsaved) >= t.max {
		t.say("%s rings up no new sale: %d unsaved sale(s) wait in memory, the most it keeps, and its file still refuses them: %s",
			name, len(t.unsaved), t.r.why(err))
		return
	}
	s, rerr := t.r.ringUp(ctx, t.rnd)
	switch {
	case stopped(ctx, rerr):
		return
	case rerr != nil:
		t.say("%s could not ring up a sale: %s", name, t.r.why(rerr))
		return
	case len(s.lines) == 0:
		if !t.empty {
			// Said once, not at every sale: why the head office sends
			// none, when it refuses the register, is said apart.
			t.say("%s holds no products yet: nothing to sell until the head office sends them", name)
		}
		t.empty = true
		return
	}
	t.empty = false
	t.unsaved = append(t.unsaved, s)
	if err == nil {
		// Nothing waits before it: save it now.
		var saved []sale
		saved, err = t.saveKept(ctx)
		switch {
		case len(saved) == 1:
			t.say("%s rang up %s%s", name, s, t.r.where())
			return
		case err == nil:
			return // refused for its data: saveKept said so
		}
	}
	t.say("%s could not save a sale of %s: %s. It keeps %d unsaved sale(s) in memory and tries them again at its next sale",
		name, s, t.r.why(err), len(t.unsaved))
}

// saveKept saves the kept sales, oldest first, until the file fails one;
// it returns those it saved and that failure. A sale refused for its data
// is dropped, and said so. Saving is not cut short by ctx: a sale rung up
// is not lost to a Ctrl-C in the middle of its transaction.
func (t *till) saveKept(ctx context.Context) ([]sale, error) {
	ctx = context.WithoutCancel(ctx)
	var saved []sale
	for len(t.unsaved) > 0 {
		s := t.unsaved[0]
		err := t.r.save(ctx, s)
		if err != nil && !refused(err) {
			t.r.log.Warn("shop: a sale could not be saved; kept in memory", "register", t.r.name, "receipt", s.receipt, "err", err)
			return saved, err
		}
		t.unsaved = t.unsaved[1:]
		if err != nil {
			t.say("%s could not save a sale of %s, and gives up on it: SQLite refuses it (%v)", t.r.name, s, err)
			continue
		}
		saved = append(saved, s)
	}
	return saved, nil
}

// record records the till's temperature; a reading the file does not
// take is not kept (the next one follows soon), but said.
func (t *till) record(ctx context.Context) {
	if err := t.r.read(ctx, t.rnd); err != nil && !stopped(ctx, err) {
		t.say("%s could not record its temperature: %s", t.r.name, t.r.why(err))
	}
}

// close tries the kept sales once more, as the program stops, and names
// those the file still refuses: they are lost.
func (t *till) close(ctx context.Context) {
	if len(t.unsaved) == 0 {
		return
	}
	saved, err := t.saveKept(ctx)
	if len(saved) > 0 {
		t.say("%s saved %d sale(s) it had kept in memory", t.r.name, len(saved))
	}
	if len(t.unsaved) == 0 {
		return
	}
	var receipts []string
	for _, s := range t.unsaved {
		receipts = append(receipts, s.receipt.String()[:8])
	}
	t.say("%s stops with %d sale(s) it could not save, which are lost (receipts %s): %s",
		t.r.name, len(t.unsaved), strings.Join(receipts, ", "), t.r.why(err))
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
	// drill is the register's drill file (see drill.go); "" is none.
	drill string
}

// registerFlags reads the register program's flags and checks them all,
// before anything starts.
func registerFlags(fs *flag.FlagSet, args []string) (registerConfig, error) {
	c := registerConfig{out: os.Stdout}
	fs.IntVar(&c.n, "n", 0, fmt.Sprintf("which register this is: 1 or more, among those the head office serves (its -registers flag, %d unless set)", demoRegisters))
	fs.StringVar(&c.server, "server", "http://127.0.0.1:8080", "the head office's address")
	fs.StringVar(&c.tokenFile, "token-file", "", "the file holding the register's token, as the head office wrote it (default: <data>/tokens/register-<n>.token)")
	fs.StringVar(&c.data, "data", filepath.Join("data", "shop"), "folder for the register's SQLite file")
	fs.DurationVar(&c.every, "every", 2*time.Second, "time between two sales on the till")
	fs.DurationVar(&c.poll, "poll", defaultPoll, "how long a long-poll waits for a message")
	fs.DurationVar(&c.runFor, "for", 0, "stop after this long (0: run until Ctrl-C)")
	fs.BoolVar(&c.verbose, "v", false, "log the engine's warnings and errors to stderr")
	fs.StringVar(&c.drill, "drill", "", "a drill file: faults the register meets on purpose, one a line — \"disk full\", \"disk read-only\", \"clock +90s\" (any signed Go duration), \"kill in wish\"; read again whenever it changes; missing or empty: no drill")
	_ = fs.Parse(args) // ExitOnError
	if err := extraArgs(fs); err != nil {
		return c, err
	}
	return c, c.check()
}

// check checks the register's configuration, before anything starts.
func (c registerConfig) check() error {
	var errs []error
	if c.n < 1 {
		errs = append(errs, fmt.Errorf("%w: -n must be 1 or more, not %d", errBadFlag, c.n))
	}
	if c.every <= 0 {
		errs = append(errs, fmt.Errorf("%w: -every must be positive, not %v", errBadFlag, c.every))
	}
	if c.poll <= 0 {
		errs = append(errs, fmt.Errorf("%w: -poll must be positive, not %v", errBadFlag, c.poll))
	}
	if c.runFor < 0 {
		errs = append(errs, fmt.Errorf("%w: -for must be positive, or 0 to run until Ctrl-C, not %v", errBadFlag, c.runFor))
	}
	if err := checkServer(c.server); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", errBadFlag, err))
	}
	return errors.Join(errs...)
}

// runRegister is the register program: register c.n over its own SQLite
// file, syncing with the head office at c.server — the receive loop and the
// uplink — while its till rings up sales, until ctx ends. A sale its file
// does not take does not end it: the till says why and keeps the sale
// until the file takes it (see till). With c.drill, it meets the faults
// that drill file asks, as they come and go (see drill.go).
func runRegister(ctx context.Context, c registerConfig) error {
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := limit(ctx, c.runFor)
	defer cancel()
	say := sayer(c.out)
	i := c.n - 1
	if c.tokenFile == "" {
		c.tokenFile = tokenPath(c.data, i)
	}
	name := registerName(i)
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return fmt.Errorf("reading %s's token: %w (the head office writes it when it starts, for each of the registers its -registers flag names, 1 to %d unless set: for %s, start it with -registers %d or more)",
			name, err, demoRegisters, name, c.n)
	}
	token := strings.TrimSpace(string(b))
	if claimed, ok := httpsync.TokenReplica(token); !ok || claimed != registerID(i) {
		return fmt.Errorf("%s holds no token of %s", c.tokenFile, name)
	}
	codecs, err := codecs()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.data, 0o755); err != nil {
		return fmt.Errorf("creating the data folder: %w", err)
	}
	data, err := filepath.Abs(c.data)
	if err != nil {
		return err
	}
	var dr *drill
	if c.drill != "" {
		dr = newDrill(c.drill, name, say)
	}
	r, err := startRegister(ctx, dr, data, i, strings.TrimRight(c.server, "/"), token, codecs, c.poll, logger(c.verbose))
	if err != nil {
		return err
	}
	defer func() {
		cancel()
		r.wait()
	}()
	say("%s up over %s, syncing with %s", r.name, registerFile(data, i), c.server)
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(c.n)))
	t := newTill(r, rnd, say)
	tick := time.NewTicker(c.every)
	defer tick.Stop()
	problem := ""
	answered := contactUnknown
	for event := 0; ; event++ {
		select {
		case <-ctx.Done():
			say("stopping: %s finishes what it was sending", r.name)
			t.close(ctx)
			return nil
		case <-r.contact.changed:
			// Said at once: a refusal, say, of its token.
			answered = r.contact.say(r.name, c.server, answered, say)
			event--
			continue
		case <-tick.C:
		}
		t.ring(ctx)
		if event%3 == 0 {
			t.record(ctx)
		}
		problem = r.sayRefusals(ctx, problem, say)
	}
}

// sayRefusals says, in plain words and without -v, when the head office
// starts or stops refusing what the register sends — its token refused or
// rotated, a wrong address, an older head office — given what it said
// last; the sales wait on the register meanwhile. It returns what it says
// now.
func (r *register) sayRefusals(ctx context.Context, said string, say func(string, ...any)) string {
	st, err := r.engine.Status(ctx)
	if err != nil {
		return said
	}
	problem := ""
	for _, l := range st.Lanes {
		if l.Problem != "" {
			problem = l.Problem
			break
		}
	}
	switch {
	case problem != "" && problem != said:
		say("%s: the head office refuses what it sends, so its sales wait on the register (nothing is lost): %s", r.name, problem)
	case problem == "" && said != "":
		say("%s: the head office takes its sales again", r.name)
	}
	return problem
}
