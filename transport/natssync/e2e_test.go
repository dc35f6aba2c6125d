package natssync_test

// The e2e suite's drills (internal/e2e) over NATS rather than HTTP: a
// lossy link, a register SIGKILLed mid-sales, the head office restored
// from a dump, a register restored from an older copy of its file — each
// with the assertions of its HTTP counterpart.

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/testenv"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/natssync"
	"github.com/magicsync/magicsync/transport/natssync/embedded"
)

// openRegisterAt opens the register's SQLite file at path with driver d
// (created when missing), its tables made and the engine installed.
func openRegisterAt(t *testing.T, d sqlitetest.Driver, path string) *sql.DB {
	t.Helper()
	db := sqlitetest.OpenPath(t, d, path, sqlitetest.Safe())
	if err := prepareRegisterDB(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db
}

func prepareRegisterDB(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, shoptest.SQLiteProducts+shoptest.SQLiteReceipts); err != nil {
		return fmt.Errorf("making the tables: %w", err)
	}
	codecs, err := shopCodecs()
	if err != nil {
		return err
	}
	if err := replica.Install(ctx, db, codecs); err != nil {
		return fmt.Errorf("installing the engine: %w", err)
	}
	return nil
}

// close stops the register and closes its database, so that its file can
// be copied.
func (g *register) close() {
	g.t.Helper()
	g.stop()
	if err := g.db.Close(); err != nil {
		g.t.Fatal(err)
	}
}

func (g *register) count(query string, args ...any) int {
	g.t.Helper()
	var n int
	if err := g.db.QueryRow(query, args...).Scan(&n); err != nil {
		g.t.Fatal(err)
	}
	return n
}

func (g *register) strings(query string) []string {
	g.t.Helper()
	rows, err := g.db.Query(query)
	if err != nil {
		g.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			g.t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		g.t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func poolStrings(t *testing.T, pool *pgxpool.Pool, query string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func poolCount(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// settled says whether the register and the head office (its database
// behind pool) agree, as internal/e2e's settled does: the register holds
// its shop's products at the head office's prices, the head office holds
// the register's receipts, each once with its total, and nothing of the
// register's is unconfirmed.
func settled(t *testing.T, pool *pgxpool.Pool, g *register) (bool, string) {
	t.Helper()
	have := g.strings(`SELECT id || ':' || price_cents FROM products`)
	want := poolStrings(t, pool, `SELECT p.id::text || ':' || p.price_cents FROM shop.products p JOIN shop.registers r ON r.shop_id = p.shop_id WHERE r.id = $1`, g.id)
	if !slices.Equal(have, want) {
		return false, fmt.Sprintf("products %v; want %v", have, want)
	}
	filed := poolStrings(t, pool, `SELECT id::text || ':' || total_cents FROM shop.receipts WHERE register_id = $1`, g.id)
	held := g.strings(`SELECT id || ':' || total_cents FROM receipts`)
	if !slices.Equal(filed, held) {
		return false, fmt.Sprintf("receipts filed %d, held %d", len(filed), len(held))
	}
	if n := g.count(`SELECT count(*) FROM sync_pending`); n != 0 {
		return false, fmt.Sprintf("%d rows unconfirmed", n)
	}
	return true, ""
}

func settle(t *testing.T, pool *pgxpool.Pool, regs ...*register) {
	t.Helper()
	settleWithin(t, 30*time.Second, pool, regs...)
}

func settleWithin(t *testing.T, d time.Duration, pool *pgxpool.Pool, regs ...*register) {
	t.Helper()
	why := ""
	defer func() {
		if t.Failed() {
			t.Log("last:", why)
		}
	}()
	eventuallyWithin(t, d, "every register settling", func() bool {
		for _, g := range regs {
			var ok bool
			if ok, why = settled(t, pool, g); !ok {
				g.engine.Nudge()
				return false
			}
		}
		return true
	})
}

// lossyLink relays the replicas' requests from one NATS server (theirs)
// to another (the head office's), and the replies back, losing and
// doubling each at random: a request lost never reaches the head office,
// a reply lost is lost after the head office acted on the request, a
// request doubled reaches it twice, a reply doubled reaches the replica
// twice.
type lossyLink struct {
	mu      sync.Mutex
	rnd     *rand.Rand
	lose    float64
	twice   float64
	lost    atomic.Int64
	doubled atomic.Int64
}

func (l *lossyLink) roll(p float64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rnd.Float64() < p
}

// startLossyLink relays prefix's requests from the server at from to the
// one at to until the test ends.
func startLossyLink(t *testing.T, from, to string, seed uint64, lose, twice float64) *lossyLink {
	t.Helper()
	l := &lossyLink{rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), lose: lose, twice: twice}
	in, err := nats.Connect(from)
	if err != nil {
		t.Fatal(err)
	}
	out, err := nats.Connect(to)
	if err != nil {
		in.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	sub, err := in.Subscribe(natssync.DefaultPrefix+".>", func(m *nats.Msg) {
		wg.Go(func() { l.relay(ctx, out, m) })
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sub.Drain()
		cancel()
		wg.Wait()
		in.Close()
		out.Close()
	})
	return l
}

func (l *lossyLink) relay(ctx context.Context, out *nats.Conn, m *nats.Msg) {
	if l.roll(l.lose) {
		l.lost.Add(1)
		return
	}
	forward := func() (*nats.Msg, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return out.RequestMsgWithContext(ctx, &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
	}
	resp, err := forward()
	if err != nil {
		return // the replica's request times out, as with no responders
	}
	if l.roll(l.twice) {
		l.doubled.Add(1)
		if again, err := forward(); err == nil {
			resp = again
		}
	}
	if l.roll(l.lose) {
		l.lost.Add(1)
		return
	}
	reply := &nats.Msg{Header: resp.Header, Data: resp.Data}
	_ = m.RespondMsg(reply)
	if l.roll(l.twice) {
		l.doubled.Add(1)
		_ = m.RespondMsg(reply)
	}
}

// Registers sell and the head office changes its catalog over a link that
// loses a tenth of the requests and of the replies (the latter after the
// head office acted), and delivers a tenth of each twice. Everything
// converges: every receipt is filed once with its total, every register
// holds the catalog at the head office's prices, nothing is left
// unconfirmed. One driver: the faults are the transport's, not SQLite's.
func TestOverALossyLinkNothingIsLostOrDoubled(t *testing.T) {
	t.Parallel()
	o := newOffice(t)
	hub := startNATS(t, embedded.Options{})
	edge := startNATS(t, embedded.Options{})
	o.serve(hub.URL())
	link := startLossyLink(t, edge.URL(), hub.URL(), testenv.Seed(t), 0.05, 0.1)
	products := []uuid.UUID{o.addProduct("coffee", 250), o.addProduct("tea", 180)}
	var regs []*register
	for range 3 {
		id, token := o.addRegister()
		regs = append(regs, startRegister(t, o.codecs, edge.URL(), id, token))
	}
	for i := range 20 {
		for _, g := range regs {
			g.sell(int64(100 + i))
		}
		if i%4 == 0 {
			products = append(products, o.addProduct(fmt.Sprintf("product %d", i), int64(300+i)))
		}
		o.exec(`UPDATE shop.products SET price_cents = price_cents + 1 WHERE id = $1`, products[i%len(products)])
		time.Sleep(20 * time.Millisecond) // the pace of a till
	}
	settleWithin(t, 90*time.Second, o.pool, regs...)
	if n := o.count(`SELECT count(*) FROM shop.receipts`); n != 60 {
		t.Fatalf("%d receipts filed; want the 60 sold", n)
	}
	if link.lost.Load() == 0 || link.doubled.Load() == 0 {
		t.Fatalf("the link lost %d and doubled %d: the drill injected no fault", link.lost.Load(), link.doubled.Load())
	}
	t.Logf("the link lost %d requests or replies and doubled %d", link.lost.Load(), link.doubled.Load())
}

// registerEnv, set, makes the test binary a register process: its
// replica over the NATS server, selling every 10 ms until it is killed.
const registerEnv = "MAGICSYNC_NATSSYNC_REGISTER"

// runRegisterProcess is a register process. The environment's registerEnv
// holds, space-separated, the SQLite driver's name, the file's path, the
// NATS server's URL, the register's id and its token. It says "ready" on
// standard output once it runs, then "sold <id> <cents>" once each sale is
// committed.
func runRegisterProcess() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "register:", err)
		return 1
	}
	f := strings.Fields(os.Getenv(registerEnv))
	if len(f) != 5 {
		return fail(fmt.Errorf("%s = %q: want driver, path, url, id, token", registerEnv, os.Getenv(registerEnv)))
	}
	driver := sqlitetest.Driver{Name: f[0]}
	db, err := sql.Open(driver.Name, driver.DSN(f[1], sqlitetest.Safe()))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	if err := prepareRegisterDB(ctx, db); err != nil {
		return fail(err)
	}
	id, err := uuid.Parse(f[3])
	if err != nil {
		return fail(err)
	}
	codecs, err := shopCodecs()
	if err != nil {
		return fail(err)
	}
	nc, err := natssync.Connect(f[2], id)
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	client := natssync.NewClient(nc, id, f[4], natssync.ClientOptions{
		PollWait: time.Second, RequestTimeout: 2 * time.Second, BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond, Logger: quiet()})
	r, err := replica.New(ctx, db, codecs, replica.Me(id), client, replica.Settings{
		Logger: quiet(), Idle: 20 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond, DigestsEvery: -1})
	if err != nil {
		return fail(err)
	}
	defer r.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _ = r.Run(ctx) })
	wg.Go(func() { _ = client.ReceiveLoop(ctx, r.Endpoint()) })
	fmt.Println("ready")
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return 0
		case <-tick.C:
		}
		sale := uuid.New()
		if _, err := db.ExecContext(ctx, `INSERT INTO receipts (register_id, id, total_cents, changed_at) VALUES (?, ?, ?, ?)`,
			id.String(), sale.String(), i, at); err != nil {
			return fail(err)
		}
		fmt.Println("sold", sale, i)
	}
}

// tillProcess is a register process.
type tillProcess struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	sold []string // "<id>:<cents>", as it said
	done chan struct{}
}

func (p *tillProcess) soldSoFar() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sold)
}

// startTill starts a register process over the SQLite file at path and
// returns once it runs; it is killed, at the latest, when the test ends.
func startTill(t *testing.T, d sqlitetest.Driver, path, natsURL string, id uuid.UUID, token string) *tillProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), registerEnv+"="+strings.Join([]string{d.Name, path, natsURL, id.String(), token}, " "))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &tillProcess{cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "ready":
				close(ready)
			case len(f) == 3 && f[0] == "sold":
				p.mu.Lock()
				p.sold = append(p.sold, f[1]+":"+f[2])
				p.mu.Unlock()
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-p.done
	})
	select {
	case <-ready:
	case <-p.done:
		t.Fatal("the register process ended before it ran")
	case <-time.After(30 * time.Second):
		t.Fatal("the register process did not run within 30 s")
	}
	return p
}

// A register process over NATS is SIGKILLed mid-sales, some of its
// receipts filed, others not yet, and a price changed meanwhile. Started
// again on the same SQLite file, it holds every sale it said it committed,
// and in the end the head office holds each of them once with its total,
// the register the head office's prices, nothing unconfirmed.
func TestARegisterKilledMidSalesLosesAndDoublesNothing(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		o := newOffice(t)
		ns := startNATS(t, embedded.Options{})
		o.serve(ns.URL())
		coffee := o.addProduct("coffee", 250)
		id, token := o.addRegister()
		path := sqlitetest.NewPath(t)
		p := startTill(t, d, path, ns.URL(), id, token)
		eventually(t, "some sales filed while the register sells on", func() bool {
			return o.count(`SELECT count(*) FROM shop.receipts WHERE register_id = $1`, id) >= 10 && len(p.soldSoFar()) >= 20
		})
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		_ = p.cmd.Wait()
		said := p.soldSoFar()
		t.Logf("killed having said %d sales committed, %d of them filed", len(said), o.count(`SELECT count(*) FROM shop.receipts WHERE register_id = $1`, id))
		o.exec(`UPDATE shop.products SET price_cents = 260 WHERE id = $1`, coffee)

		g := startRegisterOn(t, openRegisterAt(t, d, path), o.codecs, ns.URL(), id, token)
		held := g.strings(`SELECT id || ':' || total_cents FROM receipts`)
		for _, s := range said {
			if _, found := slices.BinarySearch(held, s); !found {
				t.Fatalf("sale %s, committed before the kill, is not in the register's file", s)
			}
		}
		after := g.sell(9999)
		settle(t, o.pool, g)
		if g.price(coffee) != 260 {
			t.Fatalf("the coffee is at %d on the register; want 260", g.price(coffee))
		}
		if n := o.count(`SELECT count(*) FROM shop.receipts WHERE register_id = $1 AND id = $2`, id, after); n != 1 {
			t.Fatalf("the sale after the restart is filed %d times; want once", n)
		}
		if n := o.count(`SELECT count(*) FROM shop.receipts WHERE register_id = $1`, id); n != len(held)+1 {
			t.Fatalf("%d receipts filed; want the %d the register holds", n, len(held)+1)
		}
	})
}

// copyFile copies a SQLite file whose every connection is closed.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// copyDatabase copies a stopped SQLite database, its write-ahead log with
// it when there is one; what stood beside the destination is removed
// first (internal/e2e's copyDatabase).
func copyDatabase(t *testing.T, from, to string) {
	t.Helper()
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Remove(to + suffix); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	copyFile(t, from, to)
	if _, err := os.Stat(from + "-wal"); err == nil {
		copyFile(t, from+"-wal", to+"-wal")
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

// A register over NATS restored from an older copy of its file numbers
// its uploads again from where the copy left off: nothing it writes after
// the restore is taken for a repeat, no receipt the head office filed is
// lost, and it is provisioned again — the head office's products, and its
// own receipts of before the copy and after the restore, not those lost
// with the disk (internal/e2e's TestReplicaRestoredFromAnOlderCopyLosesNothing).
func TestARegisterRestoredFromAnOlderCopyLosesNothing(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		o := newOffice(t)
		ns := startNATS(t, embedded.Options{})
		o.serve(ns.URL())
		o.addProduct("bread", 100)
		id, token := o.addRegister()
		path := sqlitetest.NewPath(t)
		g := startRegisterOn(t, openRegisterAt(t, d, path), o.codecs, ns.URL(), id, token)
		g.sell(1)
		settle(t, o.pool, g)
		g.close()
		backup := path + ".backup"
		copyDatabase(t, path, backup)

		g = startRegisterOn(t, openRegisterAt(t, d, path), o.codecs, ns.URL(), id, token)
		for i := range 3 {
			g.sell(int64(10 + i))
		}
		o.addProduct("milk", 200)
		settle(t, o.pool, g)
		g.close()
		copyDatabase(t, backup, path) // the disk dies; the copy comes back

		g = startRegisterOn(t, openRegisterAt(t, d, path), o.codecs, ns.URL(), id, token)
		var after []uuid.UUID
		for i := range 3 {
			after = append(after, g.sell(int64(100+i)))
		}
		eventually(t, "the restored register's new receipts filed", func() bool {
			return o.count(`SELECT count(*) FROM shop.receipts WHERE id = ANY($1)`, after) == len(after)
		})
		if n := o.count(`SELECT count(*) FROM shop.receipts WHERE register_id = $1`, id); n != 7 {
			t.Fatalf("%d receipts filed; want all 7 (1 before the copy, 3 lost with the disk, 3 after)", n)
		}
		eventually(t, "the restored register provisioned again", func() bool {
			return g.count(`SELECT count(*) FROM products`) == 2 && g.count(`SELECT count(*) FROM sync_pending`) == 0
		})
		if n := o.count(`SELECT count(*) FROM shop.receipts WHERE register_id = $1`, id); n != 7 {
			t.Fatalf("after the provisioning, %d receipts filed; want all 7 still", n)
		}
		if n := g.count(`SELECT count(*) FROM receipts`); n != 4 {
			t.Fatalf("the register holds %d receipts; want its 4 (1 before the copy, 3 after the restore)", n)
		}
	})
}

// pgTool finds a PostgreSQL client program: in $PATH, else among the
// installed server versions, the newest first.
func pgTool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	var found []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin/", "/usr/pgsql-*/bin/", "/usr/local/pgsql/bin/", "/opt/homebrew/opt/postgresql@*/bin/"} {
		m, _ := filepath.Glob(pattern + name)
		found = append(found, m...)
	}
	if len(found) == 0 {
		testenv.Missing(t, name+" is not installed (Debian: apt install postgresql-client)", "the tests of a head office restored from a dump")
	}
	version := func(p string) int {
		for _, part := range strings.FieldsFunc(p, func(r rune) bool { return r < '0' || r > '9' }) {
			if n, err := strconv.Atoi(part); err == nil {
				return n
			}
		}
		return 0
	}
	slices.SortFunc(found, func(a, b string) int { return version(b) - version(a) })
	return found[0]
}

// The head office, a process serving over NATS, is restored from a dump
// taken while the register ran: the receipts filed after the dump are in
// the register's file, recorded as confirmed, and in PostgreSQL no more.
// The restored head office has the register sent them again, and
// provisions it; prices changed and sales made after the restore reach
// their side; each receipt ends filed once (internal/e2e's
// TestHeadOfficeRestoredFromADumpLosesNoReceipt, its selling register).
func TestAHeadOfficeRestoredFromADumpHasTheLostReceiptsSentAgain(t *testing.T) {
	t.Parallel()
	dump, restore := pgTool(t, "pg_dump"), pgTool(t, "pg_restore")
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		ctx := context.Background()
		o := newOffice(t)
		ns := startNATS(t, embedded.Options{})
		var products []uuid.UUID
		for i := range 3 {
			products = append(products, o.addProduct(fmt.Sprintf("product %d", i), int64(100*(i+1))))
		}
		id, token := o.addRegister()
		first := startChild(t, o.url, ns.URL())
		g := startRegisterOn(t, openRegisterAt(t, d, sqlitetest.NewPath(t)), o.codecs, ns.URL(), id, token)
		for i := range 2 {
			g.sell(int64(i + 1))
		}
		settle(t, o.pool, g)

		file := filepath.Join(t.TempDir(), "office.dump")
		if out, err := exec.CommandContext(ctx, dump, "--format=custom", "--file="+file, "--dbname="+o.url).CombinedOutput(); err != nil {
			t.Fatalf("pg_dump: %v\n%s", err, out)
		}
		var afterDump []uuid.UUID
		for i := range 8 {
			afterDump = append(afterDump, g.sell(int64(100+i)))
		}
		settle(t, o.pool, g)

		// The head office goes down, and comes back from the dump.
		if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-first.done
		restored := pgtest.NewDatabase(t)
		if out, err := exec.CommandContext(ctx, restore, "--no-owner", "--no-privileges", "--exit-on-error", "--dbname="+restored, file).CombinedOutput(); err != nil {
			t.Fatalf("pg_restore: %v\n%s", err, out)
		}
		pool, err := pgxpool.New(ctx, restored)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if n := poolCount(t, pool, `SELECT count(*) FROM shop.receipts WHERE register_id = $1`, id); n != 2 {
			t.Fatalf("the restored head office holds %d receipts of the register; the drill wants the 2 filed before the dump", n)
		}
		startChild(t, restored, ns.URL())
		for i := range 20 {
			if _, err := pool.Exec(ctx, `UPDATE shop.products SET price_cents = price_cents + 1 WHERE id = $1`, products[i%len(products)]); err != nil {
				t.Fatal(err)
			}
			g.sell(int64(2000 + i))
		}
		settle(t, pool, g)
		for _, sale := range afterDump {
			if n := poolCount(t, pool, `SELECT count(*) FROM shop.receipts WHERE register_id = $1 AND id = $2`, id, sale); n != 1 {
				t.Errorf("receipt %s, filed after the dump, is %d times in the restored head office; want once", sale, n)
			}
		}
		if n := poolCount(t, pool, `SELECT count(*) FROM shop.receipts WHERE register_id = $1`, id); n != 30 {
			t.Fatalf("the restored head office holds %d receipts; want the 30 sold", n)
		}
	})
}
