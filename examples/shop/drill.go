package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
)

// drill.go holds the register's drills: faults it meets on purpose, as a
// drill file asks (shop register -drill FILE), for fire drills and the
// soak. One drill per line; blank lines and comments (from a #) are
// ignored:
//
//	disk full       the register's file takes no write that needs a new page
//	                (SQLITE_FULL, "database or disk is full"), as on a full disk
//	disk read-only  the register's file takes no write at all
//	                (SQLITE_READONLY), as on a disk mounted read-only
//	clock +90s      the register's clock is stepped by that much: any Go
//	clock -2h       duration with its sign; the engine's clock and the times
//	                the till writes read the system clock plus the step,
//	                while timers and durations stay real
//	kill in wish    the next time the register carries out a wish of the
//	                head office (its printer's footer, its screen's
//	                brightness), it takes the line out of the file and kills
//	                itself (SIGKILL) in the middle of applying it, as a till
//	                whose power is cut then; started again, it carries the
//	                wish out
//
// Of two disk lines, or two clock lines, the last counts. A line that is
// no drill is said once, as a warning, and ignored: a drill file never
// stops a till. A missing or empty file is no drill, and so is one that
// cannot be read (said once per error). The register looks at the file's
// modification time every drillEvery, and reads it again when it changed;
// it says in one line each drill that starts or ends.

// drillEvery is how often a register looks whether its drill file changed.
const drillEvery = 100 * time.Millisecond

// drillForms names the drills a drill file takes, for the warning about a
// line that is none.
const drillForms = `"disk full", "disk read-only", "clock +90s" or "clock -2h" (a Go duration with its sign), "kill in wish"`

// diskState is the disk under a register's file, as a drill makes it.
type diskState int32

const (
	diskAsItIs   diskState = iota // no drill: the disk as it is
	diskFull                      // no room left: writes needing a new page fail
	diskReadOnly                  // read-only: every write fails
)

// drillState is what a drill file asks of a register; the zero value is
// no drill.
type drillState struct {
	disk diskState
	// clock is how far the register's clock is stepped from the
	// system's.
	clock time.Duration
	// killInWish has the register kill itself in the middle of carrying
	// out its next wish.
	killInWish bool
}

// parseDrill reads a drill file's content: the drills it asks, and the
// lines that are none, trimmed.
func parseDrill(content string) (drillState, []string) {
	var st drillState
	var unknown []string
	for line := range strings.Lines(content) {
		line, _, _ = strings.Cut(line, "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		fields := strings.Fields(strings.ToLower(line))
		switch {
		case len(fields) == 2 && fields[0] == "disk" && fields[1] == "full":
			st.disk = diskFull
		case len(fields) == 2 && fields[0] == "disk" && fields[1] == "read-only":
			st.disk = diskReadOnly
		case len(fields) == 3 && fields[0] == "kill" && fields[1] == "in" && fields[2] == "wish":
			st.killInWish = true
		case len(fields) == 2 && fields[0] == "clock" && strings.ContainsAny(fields[1][:1], "+-"):
			step, err := time.ParseDuration(fields[1])
			if err != nil {
				unknown = append(unknown, line)
				continue
			}
			st.clock = step
		default:
			unknown = append(unknown, line)
		}
	}
	return st, unknown
}

// signed says a clock's step with its sign, without the zero units Go
// writes: "+1h30m", "-2h", "+1m30s".
func signed(step time.Duration) string {
	s := step.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	if step > 0 {
		s = "+" + s
	}
	return s
}

// drill is a register's drills: what its drill file asks now, and the
// means by which the register meets them — its disk (open), its clock
// (now, and Clock for the engine) and its death in a wish (dieInWish).
// A nil *drill is no drill. A drill with no file (the zero value but for
// a name) is set by hand (set), as tests do.
type drill struct {
	// name is the register's, and say says what changes; nil says
	// nothing.
	name string
	say  func(string, ...any)
	// path is the drill file; "" when set by hand.
	path string

	// state is what is asked now (nil: no drill).
	state atomic.Pointer[drillState]
	// armed is set once the register is up: a disk drill meets it only
	// then, so that a register always starts (its file prepared as it
	// is) and meets the disk drill as it trades.
	armed atomic.Bool

	// mu serialises the file's reading and set, and guards what follows.
	mu sync.Mutex
	// read is the file as last read; nil when it was not (missing,
	// unreadable).
	read fs.FileInfo
	// warned holds the unknown lines and the errors said already.
	warned map[string]bool
}

// newDrill is register name's drill, asked by the drill file at path;
// say says what changes.
func newDrill(path, name string, say func(string, ...any)) *drill {
	return &drill{name: name, say: say, path: path}
}

// now is what the register's clock reads: the system's, plus the step a
// drill asks.
func (d *drill) now() time.Time {
	return time.Now().Add(d.load().clock)
}

// load is what the drill asks now.
func (d *drill) load() drillState {
	if d == nil {
		return drillState{}
	}
	if st := d.state.Load(); st != nil {
		return *st
	}
	return drillState{}
}

// disk is the disk under the register's file now, as the drill makes it
// (the disk as it is until the register is up).
func (d *drill) disk() diskState {
	if d == nil || !d.armed.Load() {
		return diskAsItIs
	}
	return d.load().disk
}

// drillClock is the engine's clock under a drill: the system's plus the
// drill's step; its timers are the system's.
type drillClock struct{ d *drill }

// Now is the system's time plus the drill's step.
func (c drillClock) Now() time.Time { return c.d.now() }

// After is time.After: timers stay real.
func (drillClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// set makes next the drill, saying in a line each drill that starts or
// ends — or, when none is left, one line saying so.
func (d *drill) set(next drillState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.setLocked(next)
}

// setLocked is set, d.mu held.
func (d *drill) setLocked(next drillState) {
	prev := d.load()
	d.state.Store(&next)
	if prev == next || d.say == nil {
		return
	}
	if next == (drillState{}) {
		d.say("%s's drill ended: disk and clock as they are", d.name)
		return
	}
	if next.disk != prev.disk {
		switch next.disk {
		case diskFull:
			d.say("%s's disk is full (drill)", d.name)
		case diskReadOnly:
			d.say("%s's disk is read-only (drill)", d.name)
		default:
			d.say("%s's disk takes writes again (drill over)", d.name)
		}
	}
	if next.clock != prev.clock {
		if next.clock == 0 {
			d.say("%s's clock is the system's again (drill over)", d.name)
		} else {
			d.say("%s's clock is stepped %s (drill)", d.name, signed(next.clock))
		}
	}
	if next.killInWish != prev.killInWish {
		if next.killInWish {
			d.say("%s will die (SIGKILL) carrying out its next wish (drill)", d.name)
		} else {
			d.say("%s no longer dies carrying out its next wish (drill over)", d.name)
		}
	}
}

// warn says a problem with the drill file once: the same line, or the
// same error, is not said again. d.mu is held.
func (d *drill) warn(key, format string, args ...any) {
	if d.warned[key] {
		return
	}
	if d.warned == nil {
		d.warned = map[string]bool{}
	}
	d.warned[key] = true
	if d.say != nil {
		d.say(format, args...)
	}
}

// check reads the drill file again if it changed since it was last read
// (its modification time, size or identity), and makes what it asks the
// drill. A missing file is no drill; one that cannot be read is no drill
// either, and said once per error.
func (d *drill) check() {
	if d == nil || d.path == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fi, err := os.Stat(d.path)
	if err == nil && d.read != nil && os.SameFile(fi, d.read) && fi.ModTime().Equal(d.read.ModTime()) && fi.Size() == d.read.Size() {
		return // unchanged
	}
	var b []byte
	if err == nil {
		b, err = os.ReadFile(d.path)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.read = nil
		d.setLocked(drillState{})
		return
	case err != nil:
		d.read = nil
		d.warn("error: "+err.Error(), "%s: warning: its drill file cannot be read (%v); no drill meanwhile", d.name, err)
		d.setLocked(drillState{})
		return
	}
	d.read = fi
	st, unknown := parseDrill(string(b))
	for _, line := range unknown {
		d.warn("line: "+line, "%s: warning: its drill file %s has the line %q, which is no drill; it is ignored (the drills: %s)", d.name, d.path, line, drillForms)
	}
	d.setLocked(st)
}

// watch checks the drill file every drillEvery until ctx ends.
func (d *drill) watch(ctx context.Context) {
	tick := time.NewTicker(drillEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			d.check()
		}
	}
}

// dieInWish kills the register (SIGKILL) when its drill file asks it to
// die carrying out a wish: a handler calls it in the middle of applying
// one, as the power of a till may be cut then. It first takes the line
// out of the file, so that once started again the register carries the
// wish out; it does not die when it cannot, which would have it die
// again at every start. ctx is the handler's: should the kill not land,
// dieInWish returns once ctx ends.
func (d *drill) dieInWish(ctx context.Context) {
	if d == nil || !d.load().killInWish {
		return
	}
	d.mu.Lock()
	if err := d.forgetKill(); err != nil {
		// Not asked again until the file changes.
		next := d.load()
		next.killInWish = false
		d.state.Store(&next)
		d.mu.Unlock()
		d.sayf("%s does not die carrying out a wish, as the drill file asks: it could not take the line out of the file, and would die again at every start (%v)", d.name, err)
		return
	}
	d.sayf("%s dies (SIGKILL) carrying out a wish, as the drill file asks", d.name)
	self, err := os.FindProcess(os.Getpid())
	if err == nil {
		err = self.Kill()
	}
	d.mu.Unlock()
	if err != nil {
		d.sayf("%s could not kill itself (%v): it carries the wish out", d.name, err)
		return
	}
	<-ctx.Done()
}

// sayf says what the drill does, when it says anything.
func (d *drill) sayf(format string, args ...any) {
	if d.say != nil {
		d.say(format, args...)
	}
}

// forgetKill takes the "kill in wish" lines out of the drill file, in one
// step (see replaceFile), keeping the others; d.mu is held. A drill set
// by hand forgets it in memory.
func (d *drill) forgetKill() error {
	if d.path == "" {
		next := d.load()
		next.killInWish = false
		d.state.Store(&next)
		return nil
	}
	b, err := os.ReadFile(d.path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", d.path, err)
	}
	fi, err := os.Stat(d.path)
	if err != nil {
		return err
	}
	var kept strings.Builder
	for line := range strings.Lines(string(b)) {
		if st, _ := parseDrill(line); st.killInWish {
			continue
		}
		kept.WriteString(line)
	}
	if err := replaceFile(d.path, ".drill-*", kept.String(), fi.Mode().Perm()); err != nil {
		return fmt.Errorf("rewriting %s: %w", d.path, err)
	}
	return nil
}

// open opens the register's SQLite file, over dsn, on the disk the drill
// makes: each connection is opened as the disk is then (see
// diskConnector), and one opened before the disk changed is not used
// again.
func (d *drill) open(path string) (*sql.DB, error) {
	c, err := sqlite.NewConnector(dsn(path))
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(diskConnector{Connector: c, drill: d}), nil
}

// diskConnector opens a register's connections on the disk its drill
// makes. Full, a connection may not grow the file (PRAGMA max_page_count,
// which SQLite raises to the file's size then): a write that needs a new
// page fails with SQLITE_FULL, "database or disk is full", as on a disk
// with no room left, and one that fits in the pages the file has goes
// through, as there. Read-only, a connection takes no write at all
// (PRAGMA query_only): every write fails with SQLITE_READONLY, as on a
// disk mounted read-only.
type diskConnector struct {
	driver.Connector
	drill *drill
}

// sqliteConn is what the pool uses of the driver's connections.
type sqliteConn interface {
	driver.Conn
	driver.ConnPrepareContext
	driver.ConnBeginTx
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// Connect opens a connection on the disk as the drill makes it now.
func (c diskConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := conn.(sqliteConn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("a drill's disk: the driver's connection %T lacks what the pool uses", conn)
	}
	disk := c.drill.disk()
	pragma := ""
	switch disk {
	case diskFull:
		pragma = "PRAGMA max_page_count = 1"
	case diskReadOnly:
		pragma = "PRAGMA query_only = 1"
	}
	if pragma != "" {
		if _, err := sc.ExecContext(ctx, pragma, nil); err != nil {
			conn.Close()
			return nil, fmt.Errorf("a drill's disk (%s): %w", pragma, err)
		}
	}
	return &diskConn{sqliteConn: sc, drill: c.drill, disk: disk}, nil
}

// diskConn is a connection opened on the disk a drill made: once the
// disk changed, the pool drops it (IsValid, ResetSession) and opens one
// on the disk as it is now.
type diskConn struct {
	sqliteConn
	drill *drill
	disk  diskState
}

// IsValid says whether the pool may keep the connection: the disk is
// still the one it was opened on.
func (c *diskConn) IsValid() bool {
	return c.disk == c.drill.disk() && c.sqliteConn.IsValid()
}

// ResetSession, before the pool hands the connection out again, has it
// dropped if the disk changed meanwhile.
func (c *diskConn) ResetSession(ctx context.Context) error {
	if c.disk != c.drill.disk() {
		return driver.ErrBadConn
	}
	return c.sqliteConn.ResetSession(ctx)
}

// Unwrap is the driver's connection, for what reaches it through
// sql.Conn.Raw (modernc.org/sqlite's Limit, say).
func (c *diskConn) Unwrap() driver.Conn { return c.sqliteConn }

// ExecContext runs a statement, its failure marked as met on the drill's
// disk (see drillDiskError).
func (c *diskConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	res, err := c.sqliteConn.ExecContext(ctx, query, args)
	return res, c.mark(err)
}

// QueryContext runs a query, its failure marked as met on the drill's
// disk (see drillDiskError).
func (c *diskConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := c.sqliteConn.QueryContext(ctx, query, args)
	return rows, c.mark(err)
}

// mark wraps SQLite's error, on a connection opened on a disk a drill
// made full or read-only, in a drillDiskError; any other error it leaves
// as it is (database/sql compares driver.ErrSkip itself).
func (c *diskConn) mark(err error) error {
	if _, ok := errors.AsType[*sqlite.Error](err); !ok || c.disk == diskAsItIs {
		return err
	}
	return &drillDiskError{disk: c.disk, err: err}
}

// drillDiskError is SQLite's error on a connection opened on a disk a
// drill made full or read-only: the register says it as the drill's
// (see register.why), though the drill may have ended since the
// connection was opened.
type drillDiskError struct {
	disk diskState
	err  error
}

func (e *drillDiskError) Error() string { return e.err.Error() }
func (e *drillDiskError) Unwrap() error { return e.err }
