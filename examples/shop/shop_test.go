package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magicsync/magicsync/dashboard"
	"github.com/magicsync/magicsync/examples/shop/shopcheck"
	"github.com/magicsync/magicsync/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testPoll is the registers' long-poll window in the tests: the dashboard
// shows a register offline once it started none within twice that (at
// least 2 s).
const testPoll = 500 * time.Millisecond

// testShop is the demo's head office and its three registers, started by
// the demo's own code over a fresh database, a free loopback port and a
// temporary folder, and stopped when the test ends.
type testShop struct {
	t    *testing.T
	ctx  context.Context
	ho   *headOffice
	regs []*register
	data string
	http *http.Client
	// log is the engine's logger, passed to the test's log.
	log *slog.Logger
	// stop stops everything and waits for it; the test's end calls it too.
	stop func()
}

// startShop starts the head office and, when registers is true, the three
// registers, as the demo's run does.
func startShop(t *testing.T, registers bool) *testShop {
	t.Helper()
	return openShop(t, pgtest.NewDatabase(t), t.TempDir(), registers)
}

// openShop starts the shop over the database at dbURL, with the
// registers' files in data, as running the demo again would.
func openShop(t *testing.T, dbURL, data string, registers bool) *testShop {
	t.Helper()
	tl := &testLog{t: t}
	log := slog.New(slog.NewTextHandler(tl, &slog.HandlerOptions{Level: slog.LevelError}))
	ctx, cancel := context.WithCancel(t.Context())
	ho, err := startHeadOffice(ctx, dbURL, "127.0.0.1:0", "", len(registerNames), testPoll, log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &testShop{t: t, ctx: ctx, ho: ho, data: data, http: &http.Client{Timeout: 10 * time.Second}, log: log}
	s.stop = sync.OnceFunc(func() {
		cancel()
		for _, r := range s.regs {
			r.wait()
		}
		ho.wait()
		s.http.CloseIdleConnections()
		tl.close()
	})
	t.Cleanup(s.stop)
	if registers {
		s.regs, err = startRegisters(ctx, ho, data, testPoll, log, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// testLog passes the engine's logs to the test's, until the test ends.
type testLog struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (l *testLog) close() {
	l.mu.Lock()
	l.done = true
	l.mu.Unlock()
}

// waitFor calls check until it returns nil, failing the test with check's
// last complaint when that takes longer than settle.
func waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(settle)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, settle, err)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		case <-tick.C:
		}
	}
}

// overview reads the dashboard's GET /status.json.
func (s *testShop) overview() (dashboard.Overview, error) {
	var ov dashboard.Overview
	req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, s.ho.url+"/status.json", nil)
	if err != nil {
		return ov, err
	}
	req.SetBasicAuth(dashboardUser, s.ho.dashboardPassword)
	resp, err := s.http.Do(req)
	if err != nil {
		return ov, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ov, fmt.Errorf("GET /status.json: %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		return ov, fmt.Errorf("GET /status.json: Content-Type %q", ct)
	}
	err = json.NewDecoder(resp.Body).Decode(&ov)
	return ov, err
}

// holdings reads, per register name, how many products the dashboard says
// it holds and should hold.
func (s *testShop) holdings() (map[string][2]int, dashboard.Overview, error) {
	ov, err := s.overview()
	if err != nil {
		return nil, ov, err
	}
	if ov.Summary.Replicas != len(registerNames) || len(ov.Replicas) != len(registerNames) {
		return nil, ov, fmt.Errorf("status.json shows %d replicas (%d listed), want %d", ov.Summary.Replicas, len(ov.Replicas), len(registerNames))
	}
	out := map[string][2]int{}
	for _, r := range ov.Replicas {
		t, ok := tableOf(r, "products")
		if !ok {
			return nil, ov, fmt.Errorf("%s: no products in status.json", r.Name)
		}
		out[r.Name] = [2]int{t.Holds, t.Should}
	}
	return out, ov, nil
}

func tableOf(r dashboard.Replica, name string) (dashboard.Table, bool) {
	for _, t := range r.Tables {
		if t.Table == name {
			return t, true
		}
	}
	return dashboard.Table{}, false
}

// waitHoldings waits until status.json shows, for every register, the
// products it holds and should hold as want says.
func (s *testShop) waitHoldings(want map[string][2]int) {
	s.t.Helper()
	waitFor(s.t, fmt.Sprintf("products held %v", want), func() error {
		got, _, err := s.holdings()
		if err != nil {
			return err
		}
		for name, w := range want {
			if got[name] != w {
				return fmt.Errorf("status.json shows holdings %v", got)
			}
		}
		return nil
	})
}

// all is want for every register.
func all(holds, should int) map[string][2]int {
	m := map[string][2]int{}
	for _, n := range registerNames {
		m[n] = [2]int{holds, should}
	}
	return m
}

// productCount counts the shop's products in its range: those not
// discontinued, which every register should hold.
func (s *testShop) productCount() int {
	s.t.Helper()
	var n int
	if err := s.ho.pool.QueryRow(s.ctx, "SELECT count(*) FROM shop.products WHERE NOT discontinued").Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	return n
}

// differences lists how the registers' databases differ from the head
// office's (see shopcheck): every register must hold exactly the shop's
// products in its range and their barcodes, besides only the discontinued
// products its receipt lines point at, and every row it wrote must be
// filed, once, with its values.
func (s *testShop) differences(ctx context.Context) ([]string, error) {
	var diffs []string
	for _, r := range s.regs {
		d, err := shopcheck.FileDifferences(ctx, s.ho.pool, shopID, r.name, r.id, r.db)
		if err != nil {
			return nil, err
		}
		diffs = append(diffs, d...)
	}
	return diffs, nil
}

// unconfirmed says what a register still has to send or to hear filed.
func unconfirmed(ctx context.Context, r *register) (string, error) {
	st, err := r.engine.Status(ctx)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, l := range st.Lanes {
		if l.Unsent != 0 || l.Unconfirmed != 0 {
			parts = append(parts, fmt.Sprintf("lane %s: %d unsent, %d unconfirmed", l.Name, l.Unsent, l.Unconfirmed))
		}
	}
	if st.Backlog != 0 {
		parts = append(parts, fmt.Sprintf("backlog %d", st.Backlog))
	}
	if len(st.Rejected) != 0 {
		parts = append(parts, fmt.Sprintf("%d rejected, first: %s", len(st.Rejected), st.Rejected[0].Reason))
	}
	return strings.Join(parts, "; "), nil
}

// converged checks that the shop has settled: the registers hold what
// the head office holds, have nothing left to send or to hear confirmed,
// and the dashboard shows every register holding every product, with
// nothing on its way up or rejected.
func (s *testShop) converged() error {
	ctx := s.ctx
	n := s.productCount()
	got, ov, err := s.holdings()
	if err != nil {
		return err
	}
	for _, name := range registerNames {
		if got[name] != [2]int{n, n} {
			return fmt.Errorf("status.json shows products held %v, want %d of %d each", got, n, n)
		}
	}
	// Summary.Unsent is what each register said with its last message:
	// the rows it had yet to send once that message was on its way.
	if ov.Summary.Unsent != 0 || ov.Summary.Rejected != 0 || ov.Summary.Backlog != 0 {
		return fmt.Errorf("status.json summary: %+v", ov.Summary)
	}
	for _, r := range s.regs {
		left, err := unconfirmed(ctx, r)
		if err != nil {
			return err
		}
		if left != "" {
			return fmt.Errorf("%s: %s", r.name, left)
		}
	}
	diffs, err := s.differences(ctx)
	if err != nil {
		return err
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%d differences:\n\t%s", len(diffs), strings.Join(diffs, "\n\t"))
	}
	return nil
}

// sell rings up a sale on r and reads its temperature; it returns the
// number of lines sold.
func (s *testShop) sell(r *register, rnd *rand.Rand) int {
	s.t.Helper()
	sold, err := r.ringUp(s.ctx, rnd)
	if err == nil {
		err = r.save(s.ctx, sold)
	}
	if err != nil || len(sold.lines) == 0 {
		s.t.Fatalf("%s: a sale: %d lines, %v", r.name, len(sold.lines), err)
	}
	if err := r.read(s.ctx, rnd); err != nil {
		s.t.Fatal(err)
	}
	return len(sold.lines)
}

func (s *testShop) receiptsFiled(r *register) int {
	s.t.Helper()
	var n int
	if err := s.ho.pool.QueryRow(s.ctx, "SELECT count(*) FROM shop.receipts WHERE register_id = $1", r.id).Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	return n
}

func localCount(t *testing.T, r *register, table string) int {
	t.Helper()
	var n int
	if err := r.db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitOnline waits until status.json shows the register named online, or
// offline and needing attention for it, as online says; and every other
// register online, when others is true.
func (s *testShop) waitOnline(name string, online, others bool) {
	s.t.Helper()
	what := name + " shown offline"
	if online {
		what = name + " shown online"
	}
	waitFor(s.t, what, func() error {
		ov, err := s.overview()
		if err != nil {
			return err
		}
		found := false
		for _, r := range ov.Replicas {
			switch {
			case r.Name == name:
				found = true
				if r.Online != online || slices.Contains(r.Attention, "offline") == online {
					return fmt.Errorf("%s: online %v, attention %q", r.Name, r.Online, r.Attention)
				}
			case others && !r.Online:
				return fmt.Errorf("%s is shown offline", r.Name)
			}
		}
		if !found {
			return fmt.Errorf("status.json does not list %s", name)
		}
		return nil
	})
}

// TestUnplugAndConverge is the end-to-end test: the head office and
// three registers over real HTTP on loopback; one register is unplugged,
// and the dashboard shows it offline; both sides write; it is plugged
// back, shown online again, and everything converges — rows, confirmations
// and the dashboard's numbers.
func TestUnplugAndConverge(t *testing.T) {
	s := startShop(t, true)
	rnd := seeded(t)
	n := len(productNames)
	s.waitHoldings(all(n, n))

	// Trade, everyone online.
	for _, r := range s.regs {
		s.sell(r, rnd)
	}
	waitFor(t, "first sales filed", s.converged)

	// Unplug register 3; both sides go on writing.
	off := s.regs[2]
	s.waitOnline(off.name, true, true)
	off.online.Store(false)
	// Its long-polls stop: the dashboard shows it offline (within twice
	// its poll window), the others online.
	s.waitOnline(off.name, false, true)
	if err := s.ho.addProduct(s.ctx, "lemon tart", 320); err != nil {
		t.Fatal(err)
	}
	if err := s.ho.addProduct(s.ctx, "eclair", 280); err != nil {
		t.Fatal(err)
	}
	if err := s.ho.changePrice(s.ctx, "coffee", 199); err != nil {
		t.Fatal(err)
	}
	filedBefore := s.receiptsFiled(off)
	offline := 0 // rows written offline: receipts and their lines
	for range 3 {
		offline += 1 + s.sell(off, rnd)
	}
	// The others get the new range while register 3 cannot: the dashboard
	// shows it holding the 4 products it had that did not change, of 7.
	s.waitHoldings(map[string][2]int{
		registerNames[0]: {n + 2, n + 2},
		registerNames[1]: {n + 2, n + 2},
		registerNames[2]: {n - 1, n + 2},
	})
	_, ov, err := s.holdings()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ov.Replicas {
		wantAttention := r.Name == off.name
		if got := slices.Contains(r.Attention, fmt.Sprintf("holds %d of %d products", n-1, n+2)); got != wantAttention {
			t.Errorf("%s: attention %q", r.Name, r.Attention)
		}
	}
	for _, r := range s.regs[:2] {
		s.sell(r, rnd)
		s.sell(r, rnd)
	}
	if got := s.receiptsFiled(off); got != filedBefore {
		t.Errorf("register 3 is unplugged, yet the head office filed %d receipts of it, had %d", got, filedBefore)
	}
	if left, err := unconfirmed(s.ctx, off); err != nil || !strings.Contains(left, fmt.Sprintf("lane main: %d unsent, 0 unconfirmed", offline)) {
		t.Errorf("unplugged register 3 has %q waiting (%v); want its 3 sales (%d rows) unsent", left, err, offline)
	}

	// Plug it back: shown online again; it writes some more as it catches
	// up.
	off.online.Store(true)
	off.engine.Nudge()
	s.waitOnline(off.name, true, false)
	s.sell(off, rnd)
	waitFor(t, "convergence after plugging register 3 back", s.converged)

	// The dashboard's numbers, once settled: every register online,
	// nothing needing attention, and what each filed.
	waitFor(t, "the dashboard settled", func() error {
		ov, err := s.overview()
		if err != nil {
			return err
		}
		if ov.Summary.Replicas != 3 || ov.Summary.Online != 3 || ov.Summary.Attention != 0 || ov.Summary.Provisioning != 0 {
			return fmt.Errorf("status.json summary %+v", ov.Summary)
		}
		for _, r := range ov.Replicas {
			reg := s.regs[slices.Index(registerNames, r.Name)]
			for _, table := range []string{"receipts", "receipt_lines"} {
				tb, _ := tableOf(r, table)
				if want := localCount(t, reg, table); tb.Filed != want {
					return fmt.Errorf("status.json: %s %s: %d filed; want %d", r.Name, table, tb.Filed, want)
				}
			}
			if len(r.Attention) != 0 {
				return fmt.Errorf("%s needs attention: %q", r.Name, r.Attention)
			}
		}
		return nil
	})
	var filed int
	if err := s.ho.pool.QueryRow(s.ctx, "SELECT count(*) FROM shop.receipts").Scan(&filed); err != nil {
		t.Fatal(err)
	}
	if filed != 3+3+4+1 {
		t.Errorf("the head office filed %d receipts; 11 were rung up", filed)
	}
}

// syncBuffer is an io.Writer the demo's output goes to, read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// inOrder checks that printed holds each of want, each after the one
// before it.
func inOrder(t *testing.T, printed string, want ...string) {
	t.Helper()
	at := 0
	for i, w := range want {
		j := strings.Index(printed[at:], w)
		switch {
		case j >= 0:
			at += j + len(w)
			continue
		case strings.Contains(printed, w):
			t.Errorf("the demo printed %q, but not after %q", w, want[i-1])
		default:
			t.Errorf("the demo did not print %q", w)
		}
		return
	}
}

// TestRunDemo runs the demo as main does, for a few seconds of a fast
// day, and checks what it printed: the dashboard's address, the day's
// events, the registers' holdings, where the head office's wishes of
// their footers come to stand, and a clean stop.
func TestRunDemo(t *testing.T) { runDemo(t, "http") }

// The same day of trade, the registers syncing over NATS (a server
// started inside the head office's process): everything TestRunDemo
// checks holds.
func TestRunDemoOverNATS(t *testing.T) { runDemo(t, "nats") }

// runDemo runs the demo over transport until a day was reported on, and
// checks what it printed.
func runDemo(t *testing.T, transport string) {
	var out syncBuffer
	c := config{
		transport:   transport,
		data:        t.TempDir(),
		addr:        "127.0.0.1:0",
		every:       40 * time.Millisecond,
		poll:        testPoll,
		offlineFor:  100 * time.Millisecond,
		out:         &out,
		databaseURL: pgtest.NewDatabase(t),
	}
	// Run until a register has sold something (once it holds products)
	// and a day of 16 events has been reported on after that, as Ctrl-C
	// would stop it then. The day waits for the registers to answer the
	// head office's wishes, a few round trips each.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- run(ctx, c) }()
	deadline := time.After(3 * settle)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	reported := func() bool {
		_, after, sold := strings.Cut(out.String(), " rang up ")
		_, rolled, reported := strings.Cut(after, "head office: where its wishes to the registers stand: ")
		return sold && reported && regexp.MustCompile(`rollout of the footer "[^"]+" (done|stopped)`).MatchString(rolled)
	}
	for !reported() {
		select {
		case err := <-ran:
			t.Fatalf("run returned before the day was reported on: %v\n%s", err, out.String())
		case <-deadline:
			cancel()
			<-ran
			t.Fatalf("no report on the day within %v:\n%s", 3*settle, out.String())
		case <-tick.C:
		}
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	printed := out.String()
	t.Logf("the demo printed:\n%s", printed)
	for _, want := range []string{
		"head office up; dashboard at http://127.0.0.1:",
		"registers keep their files in " + c.data,
		"register 1 up, syncing with the head office",
		"register 3 up, syncing with the head office",
		" rang up ",
		"head office: coffee now costs €",
		"head office: register 1 is online",
		"register 3 unplugged: it keeps selling, offline",
		`head office: new product "lemon tart no. 1"`,
		"head office: register 3 is offline (last seen ",
		"register 3 plugged back in",
		"head office has filed ",
		"stopping: the registers finish what they were sending",
	} {
		if transport == "nats" && want == "head office up; dashboard at http://127.0.0.1:" {
			want = "registers sync over NATS at nats://127.0.0.1:"
		}
		if !strings.Contains(printed, want) {
			t.Errorf("the demo did not print %q", want)
		}
	}
	if !regexp.MustCompile(`head office: sales so far €\d+\.\d\d, from \d+ receipts, counted live as they are filed`).MatchString(printed) {
		t.Error("the demo did not report its live sales total")
	}
	if !regexp.MustCompile(`register 1 holds \d+ of \d+ products`).MatchString(printed) {
		t.Error("the demo did not report what register 1 holds")
	}
	if !regexp.MustCompile(`register \d rang up \d line\(s\), €\d+\.\d\d \(receipt [0-9a-f]{8}\)`).MatchString(printed) {
		t.Error("the demo did not print a sale with its total and receipt")
	}
	// Register 3 is plugged back in only once the head office showed it
	// offline, and after it was unplugged.
	unplug := strings.Index(printed, "register 3 unplugged")
	shown := strings.Index(printed, "head office: register 3 is offline")
	plug := strings.Index(printed, "register 3 plugged back in")
	if !(unplug < shown && shown < plug) {
		t.Errorf("register 3 unplugged at %d, shown offline at %d, plugged back at %d of the output; want in that order", unplug, shown, plug)
	}
	// The head office's wishes of the footers, in the day's order: register
	// 2's waits while its printer is off, and is carried out once it is
	// back on; register 1 refuses a footer too long for its printer;
	// register 3's technician changed its footer before the head office's
	// wish arrived, and that footer stands.
	const (
		day       = `head office wishes every register the footer "Fresh bread every morning"`
		tooLong   = `"Thank you for shopping at the corner shop, see you soon!"`
		wishCount = "head office: where its wishes to the registers stand: 2 carried out, 1 refused, 1 superseded"
	)
	inOrder(t, printed,
		"register 2's printer is switched off",
		day,
		`head office: register 2's footer waits to become "Fresh bread every morning": the printer is off`,
		"register 2's printer is back on",
		`head office: register 2's footer is now "Fresh bread every morning"`,
		`register 2 prints the footer "Fresh bread every morning"`,
		wishCount)
	inOrder(t, printed,
		day,
		`head office: register 1's footer is now "Fresh bread every morning"`,
		`head office wishes register 1 the footer `+tooLong+`, in place of "Fresh bread every morning" as it last heard`,
		`head office: register 1 refused the footer `+tooLong+`: `+tooLong+` is longer than the printer's 40 characters`,
		`register 1 prints the footer "Fresh bread every morning"`,
		wishCount)
	inOrder(t, printed,
		"register 3 unplugged: it keeps selling, offline",
		`a technician sets register 3's footer to "Ask us about the loyalty card" on the register itself (offline)`,
		`head office wishes register 3 the footer "Closed on Monday for the inventory", in place of `,
		"register 3 plugged back in",
		`head office: register 3's footer did not become "Closed on Monday for the inventory", superseded: it was changed on the register first, and "Ask us about the loyalty card" stands`,
		`register 3 prints the footer "Ask us about the loyalty card"`,
		wishCount)
	// Commands: register 2, its printer back on, prints a test page; register
	// 3, unplugged, is asked to recount its drawer within 2 s, and the
	// command expires before it is plugged back in.
	inOrder(t, printed,
		"register 2's printer is back on",
		"head office asks register 2 to print a test page",
		"register 2: print a test page succeeded: test page printed on register 2's printer")
	inOrder(t, printed,
		"register 3 unplugged: it keeps selling, offline",
		"head office asks register 3, unplugged, to recount its drawer within 2s",
		"register 3: recount the drawer expired: its deadline passed before it started",
		"register 3 plugged back in")
	// After the report, one footer rolled out to every register: the
	// first register alone, then the others once it carried it out.
	const rolled = `"Summer hours: 7 to 19"`
	inOrder(t, printed,
		wishCount,
		`head office rolls the footer `+rolled+` out to every register: one first, the others once it carried it out`,
		`rollout of the footer `+rolled+`: 1 of 3 registers wished: 1 on their way`,
		`rollout of the footer `+rolled+`: 3 of 3 registers wished: 3 carried out`,
		`rollout of the footer `+rolled+` done`)
	if !regexp.MustCompile(`head office wishes register 1's screen brightness \d+\n(?s:.*)head office: register 1's screen brightness is now \d+\n`).MatchString(printed) {
		t.Error("the demo did not print register 1's screen brightness wished, then carried out")
	}
	// Stopped means stopped: the head office no longer listens.
	if m := regexp.MustCompile(`dashboard at http://(\S+)/`).FindStringSubmatch(printed); m != nil {
		if conn, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
			conn.Close()
			t.Errorf("the head office still listens on %s after run returned", m[1])
		}
	}
	lines := strings.Split(strings.TrimSpace(printed), "\n")
	if last := lines[len(lines)-1]; !strings.HasSuffix(last, "stopping: the registers finish what they were sending") {
		t.Errorf("the demo's last line is %q", last)
	}
}

// TestRestartResumes stops the shop while a register is unplugged with
// sales the head office has not seen and a product it has not received,
// and starts it again over the same database and files, as running the
// demo again does: it resumes, and converges with nothing lost.
func TestRestartResumes(t *testing.T) {
	dbURL, data := pgtest.NewDatabase(t), t.TempDir()
	s := openShop(t, dbURL, data, true)
	rnd := seeded(t)
	n := len(productNames)
	s.waitHoldings(all(n, n))
	for _, r := range s.regs {
		s.sell(r, rnd)
	}
	waitFor(t, "first sales filed", s.converged)
	s.regs[2].online.Store(false)
	s.sell(s.regs[2], rnd)
	s.sell(s.regs[2], rnd)
	if err := s.ho.addProduct(s.ctx, "lemon tart", 320); err != nil {
		t.Fatal(err)
	}
	s.waitHoldings(map[string][2]int{registerNames[0]: {n + 1, n + 1}, registerNames[1]: {n + 1, n + 1}, registerNames[2]: {n, n + 1}})
	s.stop()

	s = openShop(t, dbURL, data, true)
	s.waitHoldings(all(n+1, n+1))
	s.sell(s.regs[0], rnd)
	waitFor(t, "convergence after a restart", s.converged)
	var filed int
	if err := s.ho.pool.QueryRow(s.ctx, "SELECT count(*) FROM shop.receipts").Scan(&filed); err != nil {
		t.Fatal(err)
	}
	if filed != 3+2+1 {
		t.Errorf("the head office filed %d receipts; 6 were rung up", filed)
	}
}
