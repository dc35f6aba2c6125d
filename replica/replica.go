// The Replica and its lanes: New, Close, the settings' defaults, the
// catalogs' order, the build, and the replica's identity.

package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/safetext"
)

// maxBuildBytes bounds the build a replica keeps and reports, as the
// server bounds what it keeps of it.
const maxBuildBytes = 256

// Replica is the engine on one device: it applies what the server sends
// (Receive) and sends up what the host wrote (Run). It is safe for
// concurrent use.
type Replica struct {
	db       *sql.DB
	codecs   *magicsync.Codecs
	identity Identity
	uplink   Uplink
	settings Settings
	log      *slog.Logger
	clock    Clock
	build    string

	// prepared are the statements every message runs.
	prepared statements
	// learnt is what the tries of a message that did not apply learnt to
	// leave out, for its next delivery.
	learnt learnt
	closed atomic.Bool
	// file is the database's file, "" for one in memory: the same on every
	// connection of the pool.
	file string

	lanes  []*lane
	laneOf map[string]*lane
	// catalogs lists the catalog tables parents first, by foreign keys.
	catalogs []*codec.TableCodec
	// own lists the record and setting tables.
	own []*codec.TableCodec
	// retiring maps every catalog declaring Retired to the query saying
	// whether a row of the file points at one of its rows, by key (see
	// referencedQuery): "" when no foreign key of the file can.
	retiring map[string]string
	// unswept lists the retained rows, by table and key, whose delete the
	// database refused in a sweep of gather's: gather leaves them to the
	// sweeps of the server's messages, so that one such row never blocks a
	// lane.
	unswept sync.Map

	mu    sync.Mutex
	id    uuid.UUID
	known bool

	rngMu sync.Mutex
	rng   *rand.Rand

	// offers carries the wishes out: the handlers, and the offers under
	// way.
	offers offers
	// commands runs the server's commands (commands.go).
	commands commandRunner

	// beforeCommit, set by tests, runs just before a message commits.
	beforeCommit func(ctx context.Context) error
}

type lane struct {
	name   string
	tables []string
	nudge  chan struct{}
	// send is what the lane's sending keeps from one turn to the next.
	send laneSend
	// rows bounds the rows of the lane's next message (0: MaxRows): halved
	// each time the server finds a message too large, doubled back after
	// every eight messages taken (taken counts them). Only the lane's
	// goroutine uses them.
	rows, taken int
	// problem is why the server refuses the lane's messages, while it
	// does, for Status; nil when it takes them.
	problem atomic.Pointer[laneProblem]
}

// New opens the replica over a database Install has prepared. It refuses a
// connection without durable commits, a journal that can roll back, and
// recursive triggers, naming the PRAGMA and how to set it; it refuses lanes
// naming tables that are not the replica's own, and a database whose
// engine tables or triggers are missing or out of date.
func New(ctx context.Context, db *sql.DB, codecs *magicsync.Codecs, identity Identity, uplink Uplink, settings Settings) (*Replica, error) {
	if db == nil || codecs == nil || identity == nil || uplink == nil {
		return nil, errors.New("magicsync/replica: replica.New needs a database, codecs, an identity and an uplink")
	}
	r := &Replica{db: db, codecs: codecs, identity: identity, uplink: uplink, laneOf: map[string]*lane{}}
	r.settings = settings.withDefaults()
	r.log = r.settings.Logger
	r.clock = r.settings.Clock
	r.build = safetext.Text(r.settings.Build, maxBuildBytes)
	r.rng = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6d61676963))
	if err := r.setLanes(); err != nil {
		return nil, err
	}
	if err := r.setHandlers(); err != nil {
		return nil, err
	}
	p, err := checkConn(ctx, db)
	if err != nil {
		return nil, err
	}
	r.file = p.file
	if err := r.checkInstalled(ctx); err != nil {
		return nil, err
	}
	order, err := catalogOrder(ctx, db, codecs)
	if err != nil {
		return nil, err
	}
	r.catalogs = order
	var unindexed []fkReference
	if r.retiring, unindexed, err = retiringQueries(ctx, db, order); err != nil {
		return nil, err
	}
	for _, ref := range unindexed {
		// Each sweep asks, of every row kept retired, whether a row of
		// ref.child points at it: without an index, a scan of the whole
		// child table per row kept, after every write of the host's.
		r.log.Warn("magicsync/replica: a foreign key pointing at a catalog with Retired has no index: sweeping the rows kept retired reads the whole table; add the index",
			"table", ref.child, "columns", ref.from, "sql", createIndexSQL(ref))
	}
	if err := r.prepared.prepare(ctx, db, r.catalogs); err != nil {
		return nil, err
	}
	for _, tc := range codecs.Tables() {
		if tc.Mirror != codec.Catalog {
			r.own = append(r.own, tc)
		}
	}
	if err := r.startBuild(ctx); err != nil {
		return nil, errors.Join(err, r.prepared.close())
	}
	if _, _, err := r.whoAmI(ctx); err != nil {
		return nil, errors.Join(err, r.prepared.close())
	}
	return r, nil
}

// Close releases the statements the replica prepared on the database; it
// closes neither the database nor the transport (closing the database
// releases the statements too). Call it once Run has returned and no
// Receive is under way: a Receive after Close returns ErrClosed.
func (r *Replica) Close() error {
	r.closed.Store(true)
	return r.prepared.close()
}

func (s Settings) withDefaults() Settings {
	if s.Idle <= 0 {
		s.Idle = time.Second
	}
	if s.SendTimeout <= 0 {
		s.SendTimeout = 30 * time.Second
	}
	if s.ResendAfter <= 0 {
		s.ResendAfter = time.Minute
	}
	if s.BackoffMin <= 0 {
		s.BackoffMin = 100 * time.Millisecond
	}
	if s.BackoffMax <= 0 {
		s.BackoffMax = 30 * time.Second
	}
	if s.BackoffMax < s.BackoffMin {
		s.BackoffMax = s.BackoffMin
	}
	if s.DigestsEvery == 0 {
		s.DigestsEvery = time.Hour
	}
	if s.MaxRows <= 0 {
		s.MaxRows = 5000
	}
	if s.Build == "" {
		s.Build = defaultBuild()
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Clock == nil {
		s.Clock = systemClock{}
	}
	if s.WishesTimeout <= 0 {
		s.WishesTimeout = 30 * time.Second
	}
	if s.WishesEvery <= 0 {
		s.WishesEvery = time.Minute
	}
	if s.CommandsTimeout <= 0 {
		s.CommandsTimeout = 5 * time.Minute
	}
	if s.CommandsKept <= 0 {
		s.CommandsKept = 30 * 24 * time.Hour
	}
	return s
}

// defaultBuild names the running binary: its main module's version and,
// when built from a checkout, the VCS revision.
func defaultBuild() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	build := info.Main.Path + "@" + info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			build += "+" + s.Value
		}
	}
	return build
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// setLanes checks the lanes and assigns every own table to one.
func (r *Replica) setLanes() error {
	lanes := slices.Clone(r.settings.Lanes)
	if !slices.ContainsFunc(lanes, func(l Lane) bool { return l.Name == "main" }) {
		lanes = append([]Lane{{Name: "main"}}, lanes...)
	}
	var problems []string
	for _, l := range lanes {
		if l.Name == "" {
			problems = append(problems, "a lane without a name")
			continue
		}
		if !safetext.Safe(l.Name) {
			problems = append(problems, fmt.Sprintf("lane %q: its name is not UTF-8 text without NUL, which no message can carry; name it in plain text", l.Name))
			continue
		}
		if slices.ContainsFunc(r.lanes, func(x *lane) bool { return x.name == l.Name }) {
			problems = append(problems, fmt.Sprintf("lane %q is declared twice", l.Name))
			continue
		}
		ln := &lane{name: l.Name, nudge: make(chan struct{}, 1)}
		for _, t := range l.Tables {
			tc, err := r.codecs.Table(t)
			switch {
			case err != nil:
				problems = append(problems, fmt.Sprintf("lane %q names table %q, which is not declared", l.Name, t))
			case tc.Mirror == codec.Catalog:
				problems = append(problems, fmt.Sprintf("lane %q names %q, a catalog: only the replica's own tables go up", l.Name, t))
			case r.laneOf[t] != nil:
				problems = append(problems, fmt.Sprintf("table %q is in lanes %q and %q; give it one", t, r.laneOf[t].name, l.Name))
			default:
				r.laneOf[t] = ln
				ln.tables = append(ln.tables, t)
			}
		}
		r.lanes = append(r.lanes, ln)
	}
	if len(problems) > 0 {
		return fmt.Errorf("magicsync/replica: replica settings: %s", joinProblems(problems))
	}
	main := r.lane("main")
	for _, tc := range r.codecs.Tables() {
		if tc.Mirror != codec.Catalog && r.laneOf[tc.Name] == nil {
			r.laneOf[tc.Name] = main
			main.tables = append(main.tables, tc.Name)
		}
	}
	return nil
}

func (r *Replica) lane(name string) *lane {
	for _, l := range r.lanes {
		if l.name == name {
			return l
		}
	}
	return nil
}

func joinProblems(ps []string) string {
	if len(ps) == 1 {
		return ps[0]
	}
	out := ""
	for _, p := range ps {
		out += "\n  - " + p
	}
	return out
}

// catalogOrder sorts the catalogs so that a table comes after every table
// its foreign keys point at.
func catalogOrder(ctx context.Context, db *sql.DB, codecs *magicsync.Codecs) ([]*codec.TableCodec, error) {
	var catalogs []*codec.TableCodec
	for _, tc := range codecs.Tables() {
		if tc.Mirror == codec.Catalog {
			catalogs = append(catalogs, tc)
		}
	}
	parents := map[string][]string{}
	for _, tc := range catalogs {
		rows, err := db.QueryContext(ctx, selectForeignKeyParents, tc.Name)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var p string
			if err := rows.Scan(&p); err != nil {
				rows.Close()
				return nil, err
			}
			if p != tc.Name {
				parents[tc.Name] = append(parents[tc.Name], p)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	var order []*codec.TableCodec
	placed := map[string]bool{}
	var visit func(tc *codec.TableCodec, path []string) error
	visit = func(tc *codec.TableCodec, path []string) error {
		if placed[tc.Name] {
			return nil
		}
		if slices.Contains(path, tc.Name) {
			return fmt.Errorf("magicsync/replica: the catalogs' foreign keys form a cycle (%v → %s); the engine applies parents before children and needs an order", path, tc.Name)
		}
		for _, p := range parents[tc.Name] {
			if ptc, err := codecs.Table(p); err == nil && ptc.Mirror == codec.Catalog {
				if err := visit(ptc, append(path, tc.Name)); err != nil {
					return err
				}
			}
		}
		placed[tc.Name] = true
		order = append(order, tc)
		return nil
	}
	for _, tc := range catalogs {
		if err := visit(tc, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// fkReference is a foreign key of one table (child) pointing at another
// (parent): the child's columns from, the parent's columns to.
type fkReference struct {
	child    string
	from, to []string
}

// retiringQueries reads, once, the foreign keys of every table of the file
// and builds, for each catalog declaring Retired, the query saying whether
// a row points at one of its rows (referencedQuery). It also returns the
// foreign keys that query reads whose columns no index leads with. A host
// that changes its schema restarts the replica, as it does for
// catalogOrder.
func retiringQueries(ctx context.Context, db *sql.DB, catalogs []*codec.TableCodec) (map[string]string, []fkReference, error) {
	out := map[string]string{}
	for _, tc := range catalogs {
		if tc.Retired != "" {
			out[tc.Name] = ""
		}
	}
	if len(out) == 0 {
		return out, nil, nil
	}
	type fkID struct {
		child string
		id    int
	}
	refs := map[string][]fkReference{}
	var last fkID
	var parent string
	var cur *fkReference
	flush := func() {
		if cur != nil {
			refs[parent] = append(refs[parent], *cur)
		}
		cur = nil
	}
	rows, err := db.QueryContext(ctx, selectEveryForeignKey)
	if err != nil {
		return nil, nil, fmt.Errorf("magicsync/replica: reading the foreign keys: %w", err)
	}
	for rows.Next() {
		var id fkID
		var p, from string
		var to sql.NullString
		if err := rows.Scan(&id.child, &id.id, &p, &from, &to); err != nil {
			rows.Close()
			return nil, nil, err
		}
		if cur == nil || id != last {
			flush()
			last, parent = id, p
			// SQLite matches a parent's name without regard to case.
			for name := range out {
				if strings.EqualFold(name, p) {
					parent = name
				}
			}
			cur = &fkReference{child: id.child}
		}
		cur.from = append(cur.from, from)
		cur.to = append(cur.to, to.String)
	}
	flush()
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("magicsync/replica: reading the foreign keys: %w", err)
	}
	var unindexed []fkReference
	for _, tc := range catalogs {
		if tc.Retired == "" || len(refs[tc.Name]) == 0 {
			continue
		}
		var pk []string
		if slices.ContainsFunc(refs[tc.Name], func(r fkReference) bool { return r.to[0] == "" }) {
			if pk, err = primaryKeyColumns(ctx, db, tc.Name); err != nil {
				return nil, nil, err
			}
		}
		var usable []fkReference
		for _, ref := range refs[tc.Name] {
			if ref.to[0] == "" {
				// No columns named: the parent's primary key. A key of
				// another arity is one SQLite refuses to enforce too.
				if len(pk) != len(ref.from) {
					continue
				}
				ref.to = pk
			}
			usable = append(usable, ref)
			indexed, err := leadsAnIndex(ctx, db, ref.child, ref.from)
			if err != nil {
				return nil, nil, err
			}
			if !indexed {
				unindexed = append(unindexed, ref)
			}
		}
		out[tc.Name] = referencedQuery(tc, usable)
	}
	return out, unindexed, nil
}

// leadsAnIndex reports whether an index of table (its primary key's
// included) leads with the columns cols, in any order.
func leadsAnIndex(ctx context.Context, db *sql.DB, table string, cols []string) (bool, error) {
	type indexColumn struct {
		index, column string
	}
	all, err := queryAll(ctx, db, func(rows *sql.Rows, c *indexColumn) error {
		var seq int
		return rows.Scan(&c.index, &seq, &c.column)
	}, selectIndexColumns, table)
	if err != nil {
		return false, fmt.Errorf("magicsync/replica: reading the indexes of %q: %w", table, err)
	}
	byIndex := map[string][]string{}
	for _, c := range all {
		byIndex[c.index] = append(byIndex[c.index], c.column)
	}
	for _, indexed := range byIndex {
		if len(indexed) >= len(cols) && sameColumns(indexed[:len(cols)], cols) {
			return true, nil
		}
	}
	return false, nil
}

// sameColumns reports whether a and b name the same columns, in any order,
// without regard to case.
func sameColumns(a, b []string) bool {
	for _, x := range a {
		if !slices.ContainsFunc(b, func(y string) bool { return strings.EqualFold(x, y) }) {
			return false
		}
	}
	return len(a) == len(b)
}

func primaryKeyColumns(ctx context.Context, db *sql.DB, table string) ([]string, error) {
	return queryAll(ctx, db, scanText, selectPrimaryKeyColumns, table)
}

// startBuild records this build; rows an earlier, different build set aside
// after a permanent refusal, and reports of rows it could not take, are
// given another chance; wishes this build carries out none of are set
// aside.
func (r *Replica) startBuild(ctx context.Context) error {
	if err := r.writeEngine(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, releaseBacklog, r.build)
		if err != nil {
			return fmt.Errorf("magicsync/replica: releasing the backlog: %w", err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			r.log.Info("magicsync/replica: a new build sends the backlog again", "rows", n, "build", r.build)
		}
		if _, err := tx.ExecContext(ctx, releaseReports, r.build); err != nil {
			return fmt.Errorf("magicsync/replica: releasing the reports set aside: %w", err)
		}
		if _, err := tx.ExecContext(ctx, releaseAnswers, r.build); err != nil {
			return fmt.Errorf("magicsync/replica: releasing the answers set aside: %w", err)
		}
		if _, err := tx.ExecContext(ctx, releaseCommandAnswers, r.build); err != nil {
			return fmt.Errorf("magicsync/replica: releasing the answers on commands set aside: %w", err)
		}
		_, err = tx.ExecContext(ctx, recordBuild, r.build)
		return err
	}); err != nil {
		return err
	}
	// Wishes an earlier build recorded, of a table this one carries out
	// none of, wait for a build that does.
	// sync_wishes refuses writes not marked as the engine's.
	if err := r.writeEngine(ctx, func(tx *sql.Tx) error { return r.setAsideWishes(ctx, tx) }); err != nil {
		return fmt.Errorf("magicsync/replica: %w", err)
	}
	return r.resendUnconfirmed(ctx)
}

// whoAmI asks the Identity until it knows; the first time it does, the
// server's tables become read-only for the host.
func (r *Replica) whoAmI(ctx context.Context) (uuid.UUID, bool, error) {
	r.mu.Lock()
	if r.known {
		id := r.id
		r.mu.Unlock()
		return id, true, nil
	}
	r.mu.Unlock()
	id, known, err := r.identity.ID(ctx)
	if err != nil || !known {
		return uuid.Nil, false, err
	}
	if id == uuid.Nil {
		return uuid.Nil, false, errors.New("magicsync/replica: the Identity answered the nil UUID as known")
	}
	if err := r.becomeKnown(ctx, id); err != nil {
		return uuid.Nil, false, fmt.Errorf("magicsync/replica: recording the replica's id: %w", err)
	}
	r.mu.Lock()
	r.id, r.known = id, true
	r.mu.Unlock()
	return id, true, nil
}

// becomeKnown records the replica's id. The first time the database learns
// it, the host's notes of own rows that no longer exist are dropped rather
// than sent as deletes: nothing went up before, so the server never had
// those rows. They are rows deleted during setup, and keys renamed — a
// placeholder of the replica's own row renamed to the id it learnt, and
// its rows with it — whose deletes, of another origin's rows, the server
// would refuse, and the backlog keep for good. Deletes the server asked
// for (a provisioning's, resent) are kept.
func (r *Replica) becomeKnown(ctx context.Context, id uuid.UUID) error {
	return r.engineWrite(ctx, func(conn *sql.Conn) (bool, error) {
		var known bool
		if err := conn.QueryRowContext(ctx, selectKnown).Scan(&known); err != nil {
			return false, err
		}
		if !known {
			for _, tc := range r.own {
				q := codec.QuoteIdent(tc.Name)
				res, err := conn.ExecContext(ctx, fmt.Sprintf(dropSetupNotesFormat, notedKey(tc, q), q), tc.Name)
				if err != nil {
					return false, err
				}
				if n, _ := res.RowsAffected(); n > 0 {
					r.log.Info("magicsync/replica: the replica knows its id; rows deleted or renamed while it was set up are not sent", "table", tc.Name, "rows", n)
				}
			}
		}
		if _, err := conn.ExecContext(ctx, recordID, id.String()); err != nil {
			return false, err
		}
		return true, nil
	})
}
