package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

// The hostile neighbour: one registered replica, with its valid token,
// speaking raw HTTP, floods the head office — uploads of many tiny
// undecodable rows, many of them in parallel, 1,000 long-polls, bodies
// trickled slowly — while two honest registers (real SQLite, through
// httpsync.Client) trade. Real PostgreSQL, the engine's Run, the HTTP
// handler over httptest.

// Figures of the hostile neighbour test.
//
// The issue asks for 1 s at the 99th percentile, and that is what is
// asserted without the race detector. On this 2-core machine, which runs
// PostgreSQL, the head office, both registers and the neighbour's 1,000
// polling goroutines at once, the honest receipts are filed in 0.18-0.29 s
// at the median and 0.44-0.55 s at the 99th percentile when nothing else
// runs (go test -count=1 -run TestHostileNeighbour -v ./internal/e2e/):
// the head office records a replica's polls once a second, not with a
// commit each, and a poll a newer one replaces no longer cuts its
// statement mid-flight (which closed the pool's connection). Under the
// race detector, which slows every instruction of the process several
// times, 1.1 s and 2.2 s (before those changes 2.3-4.9 s and 3.8-9.8 s),
// and 4.6 s and 10.5 s with the machine's load at 12: the bound there
// only catches a regression to the unlimited handler (tens of seconds,
// and 5xx answers). The test's name says what holds in both: the other
// registers keep filing, within a bound, and the memory is bounded.
const (
	// hostileGoalP99 is the bound on the 99th percentile of the
	// time from an honest receipt's commit on its register to its row in
	// PostgreSQL, while the neighbour floods.
	hostileGoalP99 = time.Second
	// hostileFilingP99 and hostileFilingP99Race are the bounds asserted,
	// without and with the race detector.
	hostileFilingP99     = hostileGoalP99
	hostileFilingP99Race = 20 * time.Second
	// hostileRSS bounds the resident memory of the test process, read
	// from /proc (VmRSS), which holds the head office (engine, handler,
	// pgx pool), the neighbour's client side and both registers with their
	// SQLite databases: the 300 MB bound on the head office holds
	// a fortiori when it holds for all of them together. It bounds the
	// memory the Go runtime holds (runtime/metrics) as well, in both
	// modes.
	hostileRSS = 300 << 20
	// hostileRSSRace bounds the resident memory under the race detector,
	// whose shadow memory multiplies what the process uses by 5 to 10
	// (the Go documentation's figures): the 300 MiB bound, times 10.
	// Measured: 767-1236 MiB, for 139-176 MiB the Go runtime held.
	hostileRSSRace = 10 * hostileRSS
	// rejectedKept mirrors the server's bound on the refused rows it keeps
	// per replica and side (server.maxRejectedKept), plus its two rows
	// that count the others.
	rejectedKept = 1000 + 2
	// hostilePolls is the long-polls the neighbour keeps going at once.
	hostilePolls = 1000
)

// raceDetector reports whether the test binary was built with -race.
func raceDetector() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// TestHostileNeighbourFloodingLeavesOtherRegistersFilingAndMemoryBounded
// asserts the 99th percentile of an honest receipt's filing during the
// flood (1 s without the race detector, 20 s with it), and the process's
// resident memory on Linux (300 MiB, 3 GiB under the race detector) and
// the Go runtime's (300 MiB). It runs alone, not in parallel with the
// other tests: it measures latencies and the process's memory, which they
// would share.
func TestHostileNeighbourFloodingLeavesOtherRegistersFilingAndMemoryBounded(t *testing.T) {
	ctx := context.Background()
	h := newHeadOffice(t)
	// A body trickled slowly is answered 408 after BodyGrace: 2 s here,
	// so that the flood sees several of them end.
	srv := serveHTTP(t, h, headoffice.HandlerOptions{BodyGrace: 2 * time.Second})

	// The honest registers: one per SQLite driver.
	var honest []*httpRegister
	for _, d := range sqlitetest.Drivers() {
		g := h.httpRegister(d)
		g.start(srv.URL, tokenOf(t, h, g.id), 0)
		honest = append(honest, g)
	}
	// The hostile one: a real register with a valid token.
	hostile := uuid.New()
	h.exec("INSERT INTO shop.registers (id, shop_id) VALUES ($1, $2)", hostile, h.addShop())
	n := &neighbour{t: t, id: hostile, token: tokenOf(t, h, hostile), base: srv.URL, addr: srv.Listener.Addr().String(),
		table: receiptsTable(t, h), status: map[string]map[int]int{}}
	n.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: hostilePolls + 100, MaxIdleConns: hostilePolls + 100}}
	t.Cleanup(n.client.CloseIdleConnections)

	// The watcher has its own connections: it does not take the engine's.
	cfg, err := pgxpool.ParseConfig(h.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	watchPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watchPool.Close)
	w := newFilingWatch()
	watchCtx, stopWatch := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer bg.Wait()
	defer stopWatch()
	bg.Go(func() { w.run(watchCtx, t, watchPool) })
	rss := &rssSampler{}
	bg.Go(func() { rss.run(watchCtx) })

	// Trading: each register rings a receipt every 100 ms, from before the
	// flood to after it.
	tradeCtx, stopTrade := context.WithCancel(ctx)
	defer stopTrade()
	var trading sync.WaitGroup
	var flooding atomic.Bool
	for _, g := range honest {
		trading.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-tradeCtx.Done():
					return
				case <-tick.C:
				}
				id, at, err := ringOne(g)
				if err != nil {
					t.Errorf("ringing on register %s: %v", g.id, err)
					return
				}
				w.rung(id, g.id, at, flooding.Load())
			}
		})
	}

	time.Sleep(time.Second) // trading before the flood: the unflooded figures
	floodCtx, stopFlood := context.WithCancel(ctx)
	defer stopFlood()
	flooding.Store(true)
	var flood sync.WaitGroup
	n.flood(floodCtx, &flood)
	time.Sleep(8 * time.Second) // the flood's length
	stopFlood()
	flood.Wait()
	flooding.Store(false)
	time.Sleep(time.Second) // trading after it
	stopTrade()
	trading.Wait()

	// Nothing lost: every receipt rung is filed, once (the key is the
	// receipt's), and nothing waits on a register.
	for _, g := range honest {
		g.allFiled(w.rungBy(g.id))
	}
	eventuallyWithin(t, 30*time.Second, "the watcher seeing every receipt filed", func() (bool, string) {
		left := w.left()
		return left == 0, fmt.Sprintf("%d not seen yet", left)
	})
	stopWatch()
	bg.Wait()

	calm, flooded := w.latencies()
	t.Logf("receipts filed before and after the flood: %d, p50 %v, p99 %v, max %v",
		len(calm), pct(calm, 50), pct(calm, 99), pct(calm, 100))
	t.Logf("receipts filed during the flood: %d, p50 %v, p99 %v, max %v",
		len(flooded), pct(flooded, 50), pct(flooded, 99), pct(flooded, 100))
	t.Logf("the neighbour's calls answered, by kind and status: %v", n.statuses())
	race := raceDetector()
	t.Logf("the process's resident memory: at most %d MiB, of which the Go runtime's at most %d MiB, over %d samples (GOMAXPROCS %d, race detector %v)",
		rss.max()>>20, rss.maxGo()>>20, rss.samples(), runtime.GOMAXPROCS(0), race)
	var filedBytes, outboxBytes int64
	var filedRows, outboxRows int
	if err := h.pool.QueryRow(ctx, eng(`SELECT count(*), coalesce(sum(length(filed)), 0) FROM public.sync_filed WHERE replica = $1`), hostile).Scan(&filedRows, &filedBytes); err != nil {
		t.Fatal(err)
	}
	if err := h.pool.QueryRow(ctx, eng(`SELECT count(*), coalesce(sum(length(body)), 0) FROM public.sync_outbox WHERE replica = $1`), hostile).Scan(&outboxRows, &outboxBytes); err != nil {
		t.Fatal(err)
	}
	t.Logf("kept for the neighbour: %d filings of %d KiB, %d queued messages of %d KiB", filedRows, filedBytes>>10, outboxRows, outboxBytes>>10)

	if len(flooded) < 20 {
		t.Fatalf("receipts rung during the flood: %d; want at least 20", len(flooded))
	}
	bound := hostileFilingP99
	if race {
		bound = hostileFilingP99Race
	}
	p99 := pct(flooded, 99)
	if p99 > hostileGoalP99 {
		t.Logf("p99 of an honest receipt's filing while the neighbour floods = %v: above the issue's %v on this machine; asserted: at most %v", p99, hostileGoalP99, bound)
	}
	if p99 > bound {
		t.Errorf("p99 of an honest receipt's filing while the neighbour floods = %v; want at most %v", p99, bound)
	}
	if m := rss.maxGo(); m > hostileRSS {
		t.Errorf("the Go runtime's memory reached %d MiB; want under %d MiB", m>>20, hostileRSS>>20)
	}
	rssBound := int64(hostileRSS)
	if race {
		rssBound = hostileRSSRace
	}
	switch {
	case runtime.GOOS != "linux":
		t.Logf("no resident memory to read on %s (no /proc): the Go runtime's alone is bounded", runtime.GOOS)
	case rss.samples() == 0:
		t.Error("no sample of the process's resident memory")
	case rss.max() > rssBound:
		t.Errorf("the process's resident memory reached %d MiB; want under %d MiB (race detector %v)", rss.max()>>20, rssBound>>20, race)
	}

	// On a machine slow enough, the rate limit may have answered every
	// garbage upload of the flood 429: once it lets go, one more goes to
	// the engine, which must refuse it as the limits say.
	for i := 0; i < 40 && n.statuses()["small"][http.StatusNoContent]+n.statuses()["small"][http.StatusRequestEntityTooLarge] == 0; i++ {
		if i > 0 {
			time.Sleep(250 * time.Millisecond) // the limit's refill; no signal
		}
		n.call(context.Background(), "small", "POST", "/up", n.garbage(3000))
	}

	// The flood was one: each of its attacks reached the head office and
	// was answered as the limits say — never with a 5xx, which the
	// neighbour would take as the server's fault and send again.
	st := n.statuses()
	reached := func(kind string, statuses ...int) bool {
		for _, s := range statuses {
			if st[kind][s] > 0 {
				return true
			}
		}
		return false
	}
	if !reached("small", http.StatusNoContent, http.StatusRequestEntityTooLarge) &&
		!reached("refusals", http.StatusRequestEntityTooLarge) && !reached("rows", http.StatusRequestEntityTooLarge) {
		t.Errorf("no garbage upload of the neighbour reached the engine; answered: %v", st)
	}
	if !reached("slow", http.StatusRequestTimeout, http.StatusTooManyRequests) {
		// Not asserted: transport/httpsync's own tests pin the 408.
		t.Logf("no trickled body of the neighbour answered 408 or 429 within the flood; answered: %v", st)
	}
	if !reached("poll", http.StatusNoContent, http.StatusOK) {
		t.Errorf("no long-poll of the neighbour answered; answered: %v", st)
	}
	want := map[string][]int{
		"small":    {http.StatusNoContent, http.StatusTooManyRequests},
		"refusals": {http.StatusRequestEntityTooLarge, http.StatusTooManyRequests},
		"rows":     {http.StatusRequestEntityTooLarge, http.StatusTooManyRequests},
		"slow":     {http.StatusRequestTimeout, http.StatusTooManyRequests, -1, 0},
		"poll":     {http.StatusNoContent, http.StatusOK},
	}
	for kind, byStatus := range st {
		for status, count := range byStatus {
			if !slices.Contains(want[kind], status) {
				t.Errorf("%d %s calls of the neighbour answered %d; want only %v", count, kind, status, want[kind])
			}
		}
	}

	// Nothing of the garbage stored: no row filed, and the refusals kept
	// within the bound.
	if got := h.count("SELECT count(*) FROM shop.receipts WHERE register_id = $1", hostile); got != 0 {
		t.Errorf("the neighbour's rows filed: %d; want none", got)
	}
	kept := h.count(eng("SELECT count(*) FROM public.sync_rejected WHERE replica = $1"), hostile)
	decoded := h.count(eng("SELECT count(*) FROM public.sync_rejected WHERE replica = $1 AND reason LIKE '%does not decode%'"), hostile)
	t.Logf("refused rows of the neighbour kept: %d (%d of them for not decoding)", kept, decoded)
	if kept > 2*rejectedKept {
		t.Errorf("refused rows of the neighbour kept: %d; want at most %d", kept, 2*rejectedKept)
	}
}

// receiptsTable is the wire name of the receipts table.
func receiptsTable(t testing.TB, h *headOffice) string {
	t.Helper()
	tc, err := h.codecs.Of(Receipt{})
	if err != nil {
		t.Fatal(err)
	}
	return tc.Name
}

// ringOne rings one receipt on g, and returns its id and the time its
// transaction committed.
func ringOne(g *httpRegister) (uuid.UUID, time.Time, error) {
	id := uuid.New()
	if _, err := g.db.Exec("INSERT INTO receipts (register_id, id, total_cents, changed_at) VALUES (?, ?, ?, ?)", g.id, id, 100, at); err != nil {
		return id, time.Time{}, fmt.Errorf("ringing: %w", err)
	}
	committed := time.Now()
	g.r.Nudge()
	return id, committed, nil
}

// neighbour is the hostile replica: its calls, and what they were
// answered, by kind.
type neighbour struct {
	t      testing.TB
	id     uuid.UUID
	token  string
	base   string
	addr   string
	table  string
	client *http.Client
	seq    atomic.Uint64

	mu     sync.Mutex
	status map[string]map[int]int
}

func (n *neighbour) answered(kind string, status int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.status[kind] == nil {
		n.status[kind] = map[int]int{}
	}
	n.status[kind][status]++
}

func (n *neighbour) statuses() map[string]map[int]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]map[int]int{}
	for k, v := range n.status {
		out[k] = map[int]int{}
		for s, c := range v {
			out[k][s] = c
		}
	}
	return out
}

// garbage is an upload of rows undecodable rows of the receipts table,
// each a few bytes, under the next sequence.
func (n *neighbour) garbage(rows int) []byte {
	ch := &syncpb.TableChanges{Table: n.table, Columns: []string{"register_id", "id", "total_cents", "note", "changed_at"}}
	var key [1]wire.Value
	for i := range rows {
		// A kind byte no value has: the row does not decode. Its key, a
		// tuple of one int, is well formed, as the encoder asks.
		ch.Upserts = append(ch.Upserts, []byte{0xff, byte(i), byte(i >> 8)})
		key[0] = wire.Value{Kind: wire.Int, I: int64(i)}
		ch.UpsertKeys = append(ch.UpsertKeys, wire.AppendTuple(nil, key[:]))
	}
	body, err := wire.EncodeToServer(&syncpb.ToServer{Replica: n.id[:], Lane: httpsync.DefaultLane, Sequence: n.seq.Add(1),
		Up: &syncpb.Up{Tables: []*syncpb.TableChanges{ch}}})
	if err != nil {
		n.t.Errorf("encoding the garbage: %v", err)
	}
	return body
}

// call makes one call of the neighbour and records its answer; a call
// ended by the flood's end records nothing.
func (n *neighbour) call(ctx context.Context, kind, method, path string, body []byte) {
	req, err := http.NewRequestWithContext(ctx, method, n.base+"/sync/"+n.id.String()+path, strings.NewReader(string(body)))
	if err != nil {
		n.t.Errorf("%s: %v", kind, err)
		return
	}
	req.Header.Set("Authorization", "Bearer "+n.token)
	resp, err := n.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			n.answered(kind, -1)
		}
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	n.answered(kind, resp.StatusCode)
}

// pause waits d, or until ctx ends; it reports whether ctx goes on.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// flood starts the neighbour's attacks, until ctx ends.
func (n *neighbour) flood(ctx context.Context, wg *sync.WaitGroup) {
	// Uploads that the server takes and files, every row refused for not
	// decoding: 3,000 rows of 4 bytes.
	// Uploads whose refusals would not fit in one confirmation: 40,000.
	// Uploads beyond server.MaxUploadRows: refused before decoding.
	big := n.garbage(server.MaxUploadRows + 10_000)
	kinds := []struct {
		kind string
		body func() []byte
	}{
		{"small", func() []byte { return n.garbage(3000) }},
		{"refusals", func() []byte { return n.garbage(40_000) }},
		{"rows", func() []byte { return big }},
	}
	// Twelve uploaders in parallel, each sending again at once, whatever
	// the answer.
	for i := range 12 {
		k := kinds[i%len(kinds)]
		wg.Go(func() {
			for ctx.Err() == nil {
				n.call(ctx, k.kind, "POST", "/up", k.body())
			}
		})
	}
	// The long-polls, each polling again 100 ms after its answer.
	for range hostilePolls {
		wg.Go(func() {
			for ctx.Err() == nil {
				n.call(ctx, "poll", "GET", "/next", nil)
				if !pause(ctx, 100*time.Millisecond) {
					return
				}
			}
		})
	}
	// Two bodies trickled a byte every 200 ms, again once answered.
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				n.trickle(ctx)
			}
		})
	}
}

// trickle sends an upload's body a byte every 200 ms until the server
// answers, and records its answer.
func (n *neighbour) trickle(ctx context.Context) {
	began := time.Now()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", n.addr)
	if err != nil {
		if ctx.Err() == nil {
			n.answered("slow", -1)
		}
		return
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /sync/%s/up HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n\r\n", n.id, n.token); err != nil {
		return
	}
	answer := make(chan int, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answer <- -1
			return
		}
		_ = resp.Body.Close()
		answer <- resp.StatusCode
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// Still unanswered when the flood ended: status 0. Under the
			// full flood this happens to bodies open 5–7 s, past a
			// BodyGrace of 2 s (see the report of issue 10).
			n.answered("slow", 0)
			n.t.Logf("a trickled body still unanswered after %v", time.Since(began).Round(time.Millisecond))
			conn.Close()
			<-answer
			return
		case status := <-answer:
			n.answered("slow", status)
			return
		case <-tick.C:
			_, _ = conn.Write([]byte{'x'}) // a failed write is seen as the answer
		}
	}
}

// filingWatch records, for each receipt rung, when it was committed on its
// register and when the watcher first saw it in PostgreSQL.
type filingWatch struct {
	mu      sync.Mutex
	pending map[uuid.UUID]rungReceipt
	calm    []time.Duration
	flooded []time.Duration
	by      map[uuid.UUID]int
}

type rungReceipt struct {
	at      time.Time
	flooded bool
}

func newFilingWatch() *filingWatch {
	return &filingWatch{pending: map[uuid.UUID]rungReceipt{}, by: map[uuid.UUID]int{}}
}

func (w *filingWatch) rung(id, register uuid.UUID, at time.Time, flooded bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending[id] = rungReceipt{at: at, flooded: flooded}
	w.by[register]++
}

func (w *filingWatch) rungBy(register uuid.UUID) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.by[register]
}

func (w *filingWatch) left() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

func (w *filingWatch) latencies() (calm, flooded []time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calm), slices.Clone(w.flooded)
}

// run looks every 5 ms for the receipts not seen yet.
func (w *filingWatch) run(ctx context.Context, t testing.TB, pool *pgxpool.Pool) {
	for pause(ctx, 5*time.Millisecond) {
		w.mu.Lock()
		ids := make([]uuid.UUID, 0, len(w.pending))
		for id := range w.pending {
			ids = append(ids, id)
		}
		w.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		rows, err := pool.Query(ctx, `SELECT id FROM shop.receipts WHERE id = ANY($1)`, ids)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("watching the receipts: %v", err)
			}
			return
		}
		seen := time.Now()
		var found []uuid.UUID
		for rows.Next() {
			var id uuid.UUID
			if err := rows.Scan(&id); err != nil {
				t.Errorf("watching the receipts: %v", err)
			}
			found = append(found, id)
		}
		rows.Close()
		w.mu.Lock()
		for _, id := range found {
			r, ok := w.pending[id]
			if !ok {
				continue
			}
			delete(w.pending, id)
			if r.flooded {
				w.flooded = append(w.flooded, seen.Sub(r.at))
			} else {
				w.calm = append(w.calm, seen.Sub(r.at))
			}
		}
		w.mu.Unlock()
	}
}

// pct is the p-th percentile of ds (100: the largest), rounded to the
// millisecond.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	i = min(max(i-1, 0), len(s)-1)
	return s[i].Round(time.Millisecond)
}

// rssSampler samples the process's resident memory every 50 ms, on Linux.
// With it, the memory the Go runtime holds (runtime/metrics: all it
// mapped, less what it released), which the race detector's shadow
// memory is no part of.
type rssSampler struct {
	mu     sync.Mutex
	peak   int64
	peakGo int64
	n      int
}

// goMemory is the memory the Go runtime holds.
func goMemory() int64 {
	ms := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(ms)
	return int64(ms[0].Value.Uint64()) - int64(ms[1].Value.Uint64())
}

func (s *rssSampler) run(ctx context.Context) {
	for pause(ctx, 50*time.Millisecond) {
		g := goMemory()
		s.mu.Lock()
		s.peakGo = max(s.peakGo, g)
		s.mu.Unlock()
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			continue // not Linux: no resident set to sample
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			v, ok := strings.CutPrefix(line, "VmRSS:")
			if !ok {
				continue
			}
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				continue
			}
			s.mu.Lock()
			s.peak = max(s.peak, kb<<10)
			s.n++
			s.mu.Unlock()
		}
	}
}

func (s *rssSampler) max() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

func (s *rssSampler) maxGo() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakGo
}

func (s *rssSampler) samples() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}
