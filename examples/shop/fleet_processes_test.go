package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/examples/shop/shopcheck"
	"github.com/magicsync/magicsync/internal/pgtest"
)

// headOfficeProcess is one `shop headoffice` process of several over one
// database and one data folder, at a fixed address so that it comes back
// there when restarted.
type headOfficeProcess struct {
	*program
	n    int
	addr string
	args []string
}

// startHeadOffices starts n head-office processes at once, over the
// database at dbURL and the data folder data, each on an address of its
// own, and waits until every one has handed out the registers' tokens.
func startHeadOffices(t *testing.T, bin, dbURL, data string, n int) []*headOfficeProcess {
	t.Helper()
	hos := make([]*headOfficeProcess, n)
	for i := range hos {
		addr := freeAddr(t)
		hos[i] = &headOfficeProcess{n: i + 1, addr: addr,
			args: []string{"headoffice", "-addr", addr, "-data", data, "-poll", "1s", "-v"}}
		hos[i].start(t, bin, dbURL)
	}
	for _, ho := range hos {
		ho.await(t, 0, fmt.Sprintf(`%s: its token is in `, registerNames[len(registerNames)-1]))
	}
	return hos
}

// start runs the head office (again).
func (ho *headOfficeProcess) start(t *testing.T, bin, dbURL string) {
	t.Helper()
	// Its connections say which head office they are (application_name),
	// so that the test finds the one holding the planner's lock.
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", ho.appName())
	u.RawQuery = q.Encode()
	ho.program = startProgram(t, fmt.Sprintf("head office %d", ho.n), bin, []string{"DATABASE_URL=" + u.String()}, ho.args...)
}

// appName is the application_name of the head office's connections.
func (ho *headOfficeProcess) appName() string {
	return fmt.Sprintf("shop-headoffice-%d", ho.n)
}

// planning returns the head office that holds an advisory lock now, if
// one does. Once the head offices are up, with no rollout running, the
// only advisory lock they take is the planner's, for the length of a
// pass.
func planning(ctx context.Context, pool *pgxpool.Pool, hos []*headOfficeProcess) (*headOfficeProcess, error) {
	var names []string
	err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(a.application_name), '{}') FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&names)
	if err != nil {
		return nil, err
	}
	for _, ho := range hos {
		if slices.Contains(names, ho.appName()) {
			return ho, nil
		}
	}
	return nil, nil
}

// getNext asks the head office at base for register i's next message,
// without waiting, with token, and returns the answer's status code.
func getNext(ctx context.Context, base string, i int, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/sync/%s/next?wait=0", base, registerID(i)), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestHeadOfficesStartedTogetherHandOutOneTokenAndOnePassword starts
// three head-office programs at once over a new database and one data
// folder: each comes up, each says every register's token is in the same
// file, and the token in that file is the one the database holds — every
// head office accepts it — rather than each issuing its own and the last
// locking out the registers of the others. Behind a balancer, an operator
// meets any of them: each prints the same dashboard password, takes it,
// and serves the rollout form with the same token.
func TestHeadOfficesStartedTogetherHandOutOneTokenAndOnePassword(t *testing.T) {
	t.Parallel()
	bin := buildShop(t)
	dbURL := pgtest.NewDatabase(t)
	data := t.TempDir()
	hos := startHeadOffices(t, bin, dbURL, data, 3)
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for i, name := range registerNames {
		path := tokenPath(data, i)
		for _, ho := range hos {
			if !strings.Contains(ho.out.String(), fmt.Sprintf("%s: its token is in %s\n", name, path)) {
				t.Errorf("head office %d did not hand out %s's token in %s:\n%s", ho.n, name, path, ho.out.String())
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		token := strings.TrimSpace(string(b))
		_, secret, _ := strings.Cut(token, ".")
		if ok, err := storedSecret(t.Context(), pool, registerID(i), secret); err != nil || !ok {
			t.Errorf("%s's token file holds a token the database does not (%v)", name, err)
		}
		for _, ho := range hos {
			code, err := getNext(t.Context(), "http://"+ho.addr, i, token)
			if err != nil || code >= 300 {
				t.Errorf("head office %d answers %s's token with %d (%v); want it accepted", ho.n, name, code, err)
			}
		}
	}
	var passwords, forms []string
	for _, ho := range hos {
		m, _ := ho.await(t, 0, `dashboard login: user shop, password (\S+)`)
		passwords = append(passwords, m[1])
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+ho.addr+"/rollouts", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth(dashboardUser, passwords[0])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		page, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("head office %d, asked for its rollouts' page with head office 1's password: %s (%v)", ho.n, resp.Status, err)
			continue
		}
		m = regexp.MustCompile(`name="token" value="([^"]+)"`).FindStringSubmatch(string(page))
		if m == nil {
			t.Errorf("head office %d's rollouts' page has no form", ho.n)
			continue
		}
		forms = append(forms, m[1])
	}
	for i := range hos {
		if passwords[i] != passwords[0] || (i < len(forms) && forms[i] != forms[0]) {
			t.Errorf("the head offices print the dashboard passwords %v and serve forms with the tokens %v; want one of each", passwords, forms)
			break
		}
	}
	tmp, err := filepathGlob(data)
	if err != nil || len(tmp) > 0 {
		t.Errorf("files left in the tokens' folder: %v (%v)", tmp, err)
	}
	for _, ho := range hos {
		ho.interrupt(t)
	}
}

// filepathGlob lists the temporary files a token's writing may leave
// behind in data's tokens folder.
func filepathGlob(data string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Dir(tokenPath(data, 0)))
	if err != nil {
		return nil, err
	}
	var left []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".token-") {
			left = append(left, e.Name())
		}
	}
	return left, nil
}

// roundRobin is a load balancer as naive as they come: each request goes
// to the next backend in turn, with no health checks and no stickiness. A
// backend that is down answers 502 Bad Gateway, which the registers must
// take as "try again".
type roundRobin struct {
	backends []*httputil.ReverseProxy
	next     atomic.Uint64
	// badGateways counts the 502s it answered.
	badGateways atomic.Int64

	mu sync.Mutex
	// since, once set, is when a backend was killed; served is when each
	// register's first request made after it was answered by a backend
	// (with anything but a 5xx).
	since  time.Time
	served map[string]time.Time
}

// startedKey keys the moment a request reached the balancer, in its
// context.
type startedKey struct{}

func newRoundRobin(t *testing.T, addrs []string) *roundRobin {
	t.Helper()
	rr := &roundRobin{served: map[string]time.Time{}}
	transport := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(transport.CloseIdleConnections)
	for _, addr := range addrs {
		p := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr})
		p.Transport = transport
		p.ErrorLog = log.New(io.Discard, "", 0)
		p.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
			rr.badGateways.Add(1)
			w.WriteHeader(http.StatusBadGateway)
		}
		p.ModifyResponse = func(resp *http.Response) error {
			started, _ := resp.Request.Context().Value(startedKey{}).(time.Time)
			if resp.StatusCode >= 500 {
				return nil
			}
			rr.mu.Lock()
			defer rr.mu.Unlock()
			if !rr.since.IsZero() && started.After(rr.since) {
				who := strings.Split(strings.TrimPrefix(resp.Request.URL.Path, "/sync/"), "/")[0]
				if _, ok := rr.served[who]; !ok {
					rr.served[who] = time.Now()
				}
			}
			return nil
		}
		rr.backends = append(rr.backends, p)
	}
	return rr
}

func (rr *roundRobin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(context.WithValue(r.Context(), startedKey{}, time.Now()))
	rr.backends[rr.next.Add(1)%uint64(len(rr.backends))].ServeHTTP(w, r)
}

// killed notes that a backend was killed at at.
func (rr *roundRobin) killed(at time.Time) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.since, rr.served = at, map[string]time.Time{}
}

// servedAgain says how long after the kill register i's first request
// made after it was answered.
func (rr *roundRobin) servedAgain(i int) (time.Duration, bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	at, ok := rr.served[registerID(i).String()]
	return at.Sub(rr.since), ok
}

// operator changes every product's price at the head office, over and
// over — a broadcast to every register, each change a new price, higher
// than the last — until stopped. Each change is one UPDATE of all the
// shop's products, written as an operator would: straight to PostgreSQL;
// the next comes once the last reached every register, so that a change
// waits behind no backlog of others (a register applies one message per
// change, which under -race on a loaded machine may take a second).
type operator struct {
	pool *pgxpool.Pool
	seq  atomic.Int64 // the price, in cents, of the last change committed
	stop chan struct{}
	done chan struct{}
	err  error

	mu sync.Mutex
	// committed is when each change, by its price, was committed.
	committed map[int64]time.Time
	// commits hears of each change as it commits (when listened to).
	commits chan int64
	// now asks for a change at once; the price is sent back.
	now chan chan int64
}

// startOperator starts the operator's changes: one at most every every,
// each once reached says every register holds the last — or at once when
// asked (changeNow).
func startOperator(pool *pgxpool.Pool, every time.Duration, reached func(price int64) bool) *operator {
	o := &operator{pool: pool, stop: make(chan struct{}), done: make(chan struct{}), committed: map[int64]time.Time{},
		commits: make(chan int64), now: make(chan chan int64)}
	o.seq.Store(10_000)
	go func() {
		defer close(o.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		var asked chan int64 // who asked for this change, to be told its price
		for {
			if asked == nil {
				select {
				case <-o.stop:
					return
				case asked = <-o.now:
				case <-tick.C:
				}
			}
			price := o.seq.Load() + 1
			// Not retried: head offices starting, stopping or dying fail
			// no write of the operators.
			_, err := pool.Exec(context.Background(), "UPDATE shop.products SET price_cents = $1, updated_at = now() WHERE shop_id = $2", price, shopID)
			if err != nil {
				o.err = err
				return
			}
			o.mu.Lock()
			o.committed[price] = time.Now()
			o.mu.Unlock()
			o.seq.Store(price)
			if asked != nil {
				asked <- price
				asked = nil
			}
			select {
			case o.commits <- price:
			default:
			}
			for asked == nil && !reached(price) {
				select {
				case <-o.stop:
					return
				case asked = <-o.now:
				case <-time.After(20 * time.Millisecond): // the registers' files signal nothing
				}
			}
		}
	}()
	return o
}

// changeNow has the operator make a change at once, whether or not the
// last reached every register, and returns its price once committed.
func (o *operator) changeNow() (int64, error) {
	reply := make(chan int64, 1)
	select {
	case o.now <- reply:
	case <-o.done:
		return 0, fmt.Errorf("the operator stopped: %v", o.err)
	}
	select {
	case price := <-reply:
		return price, nil
	case <-o.done:
		return 0, fmt.Errorf("the operator stopped: %v", o.err)
	}
}

// committedAt says when the change to price was committed, if it was.
func (o *operator) committedAt(price int64) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.committed[price]
	return at, ok
}

// halt stops the operator, and returns why it stopped if not asked to.
func (o *operator) halt() error {
	select {
	case <-o.stop:
	default:
		close(o.stop)
	}
	<-o.done
	return o.err
}

// registerProcess is one `shop register` process, over its own data
// folder.
type registerProcess struct {
	*program
	i    int
	data string
	db   *sql.DB // the test's own connection to its SQLite file, to read it
}

// start runs the register (again), selling every every, and waits until
// it is up.
func (r *registerProcess) start(t *testing.T, bin, server, tokenFile string, every time.Duration) {
	t.Helper()
	r.program = startProgram(t, registerNames[r.i], bin, nil, "register", "-n", fmt.Sprint(r.i+1), "-server", server,
		"-token-file", tokenFile, "-data", r.data, "-every", every.String(), "-poll", "1s", "-v")
	r.await(t, 0, regexp.QuoteMeta(registerNames[r.i])+` up over `)
}

// lowestPrice reads the lowest price among the products the register
// holds: every product's price is at least that of the operator's last
// change the register applied.
func (r *registerProcess) lowestPrice(ctx context.Context) (int64, error) {
	var low sql.NullInt64
	err := r.db.QueryRowContext(ctx, "SELECT min(price_cents) FROM products WHERE NOT discontinued").Scan(&low)
	return low.Int64, err
}

// waitAnswers waits until the head office at addr answers its health
// check.
func waitAnswers(t *testing.T, addr string) {
	t.Helper()
	waitFor(t, "the head office at "+addr+" answering", func() error {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
}

// logLineRE matches a line the engines log, its level and its message.
var logLineRE = regexp.MustCompile(`level=([A-Z]+) msg="([^"]*)"`)

// acceptedWarnings are the warnings a register may log while head offices
// die and restart behind a balancer: each says a request is retried.
var acceptedWarnings = map[string]bool{
	"magicsync/httpsync: no message from the server":        true,
	"magicsync/httpsync: not acknowledged, and comes again": true,
	"magicsync/replica: send failed; retrying with backoff": true,
}

// notApplied is the warning of a message a register could not apply, and
// takes again; accepted when its file was busy (see the test).
const notApplied = "magicsync/httpsync: a message was not applied; not acknowledged, it comes again"

// TestFleetLivesThroughAKilledHeadOfficeAndARollingRestart runs the shop
// as a chain would: three head-office programs over one database and one
// data folder, behind a round-robin balancer with no health checks and no
// stickiness, and three register programs selling through it while the
// head office changes every product's price, over and over. Mid-broadcast
// the head office planning the change going out, holding the planner's
// lock, is killed (SIGKILL): the change made after the kill reaches every
// register within seconds — planning taken over, the registers served by
// the others. The killed one comes back; then every
// process is restarted in turn, head offices and registers. At the end
// every receipt and line a register wrote is filed once in PostgreSQL,
// with its values; every register holds exactly the shop's products; and
// the registers logged nothing worse than the warnings of retries.
func TestFleetLivesThroughAKilledHeadOfficeAndARollingRestart(t *testing.T) {
	t.Parallel()
	began := time.Now()
	bin := buildShop(t)
	dbURL := pgtest.NewDatabase(t)
	hoData := t.TempDir()
	hos := startHeadOffices(t, bin, dbURL, hoData, 3)
	var addrs []string
	for _, ho := range hos {
		addrs = append(addrs, ho.addr)
	}
	rr := newRoundRobin(t, addrs)
	proxy := httptest.NewServer(rr)
	defer proxy.Close()
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	const sellEvery = 150 * time.Millisecond
	regs := make([]*registerProcess, len(registerNames))
	for i := range regs {
		r := &registerProcess{i: i, data: t.TempDir()}
		r.start(t, bin, proxy.URL, tokenPath(hoData, i), sellEvery)
		if r.db, err = sql.Open("sqlite", dsn(registerFile(r.data, i))); err != nil {
			t.Fatal(err)
		}
		defer r.db.Close()
		regs[i] = r
	}
	for _, r := range regs {
		r.await(t, 0, regexp.QuoteMeta(registerNames[r.i])+` rang up `)
	}

	// The broadcast: every product's price changed, again as soon as the
	// change reached every register. Once every register applied one of
	// the changes, one head office is killed as the next goes out.
	op := startOperator(pool, 100*time.Millisecond, func(price int64) bool {
		for _, r := range regs {
			if low, err := r.lowestPrice(t.Context()); err != nil || low < price {
				return false
			}
		}
		return true
	})
	defer op.halt()
	first := op.seq.Load() + 1
	for _, r := range regs {
		waitFor(t, registerNames[r.i]+" applying the broadcast", func() error {
			low, err := r.lowestPrice(t.Context())
			if err == nil && low < first {
				err = fmt.Errorf("lowest price %d, below %d", low, first)
			}
			return err
		})
	}
	// The kill comes as a change just committed goes out, to the head
	// office planning it, holding the planner's lock (seen an instant
	// before: it may have just let go of it).
	var victim *headOfficeProcess
	for victim == nil {
		select {
		case <-op.commits:
		case <-time.After(settle):
			t.Fatalf("no price change within %v (%v)", settle, op.halt())
		}
		for tries := 0; victim == nil && tries < 50; tries++ {
			if victim, err = planning(t.Context(), pool, hos); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	// Its database session outlives it for an instant: still holding the
	// lock then, it was killed mid-pass.
	held, err := planning(t.Context(), pool, hos)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("head office %d killed, seen planning; holding the planner's lock just after the kill: %v", victim.n, held == victim)
	rr.killed(killedAt)
	// A change made at once after the kill: once no key the
	// triggers noted up to it waits in sync_touched, another head office
	// planned it (planning taken over); its arrival at every register
	// says the registers were served by the others.
	after, err := op.changeNow()
	if err != nil {
		t.Fatal(err)
	}
	// How many changes each register had yet to apply besides it (the
	// one going out at the kill, at most): it waits behind them.
	behind := make([]int64, len(regs))
	for _, r := range regs {
		low, err := r.lowestPrice(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		behind[r.i] = after - 1 - low
	}
	arrived := make([]time.Duration, len(regs))
	var noted int64 // sync_touched's sequence once the change was committed
	var planned time.Duration
	// The registers' goal is to be served again within their backoff (2 s
	// at most); the bound is the package's settle time, for a machine
	// loaded many times over, and still fails a register never served.
	deadline := killedAt.Add(settle)
	for pending := len(regs); pending > 0 || planned == 0; {
		if _, ok := op.committedAt(after); ok && noted == 0 {
			if err := pool.QueryRow(t.Context(), "SELECT last_value FROM public.sync_touched_id_seq").Scan(&noted); err != nil {
				t.Fatal(err)
			}
		}
		if noted != 0 && planned == 0 {
			var waiting bool
			if err := pool.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM public.sync_touched WHERE id <= $1)", noted).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if !waiting {
				planned = time.Since(killedAt)
			}
		}
		for _, r := range regs {
			if arrived[r.i] != 0 {
				continue
			}
			low, err := r.lowestPrice(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if low >= after {
				arrived[r.i] = time.Since(killedAt)
				pending--
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the change made after a head office was killed: planned %v, reached the registers after %v (0: not) — not all within %v (the price changes: %v)", planned, arrived, settle, op.halt())
		}
		time.Sleep(10 * time.Millisecond) // polling files that signal nothing
	}
	<-victim.done
	// Planning is taken over at the next pass of another head office: the
	// goal is 2 s; the bound leaves room for a loaded machine, but fails
	// when no other head office plans (a planner's lock never released).
	if planned > 5*time.Second {
		t.Errorf("the change made after a head office was killed was planned %v after the kill; want within 5 s", planned)
	}
	committed, _ := op.committedAt(after)
	t.Logf("a head office killed: the change made after it was committed %v after the kill, planned %v after the kill",
		committed.Sub(killedAt).Round(time.Millisecond), planned.Round(time.Millisecond))
	for i, d := range arrived {
		t.Logf("a head office killed: the change made after it reached %s %v after the kill (%d changes behind at the kill)",
			registerNames[i], d.Round(time.Millisecond), behind[i])
	}
	for i := range regs {
		if d, ok := rr.servedAgain(i); ok {
			t.Logf("%s: first request made after the kill answered %v after it", registerNames[i], d.Round(time.Millisecond))
		}
	}

	// The killed head office comes back; then every process is restarted
	// in turn, while the registers sell and the prices change.
	victim.start(t, bin, dbURL)
	victim.await(t, 0, `its token is in `)
	waitAnswers(t, victim.addr)
	for _, ho := range hos {
		ho.interrupt(t)
		ho.start(t, bin, dbURL)
		ho.await(t, 0, `its token is in `)
		waitAnswers(t, ho.addr)
	}
	if err := op.halt(); err != nil {
		t.Fatalf("changing the prices: %v", err)
	}
	// The registers are restarted last, to sell no more: what they hold
	// is then what must be filed.
	var before []string
	for _, r := range regs {
		before = append(before, r.out.String())
		r.interrupt(t)
		r.start(t, bin, proxy.URL, tokenPath(hoData, r.i), time.Hour)
	}

	// Every receipt and line filed once, every register converged.
	waitFor(t, "every register's rows filed and its products the head office's", func() error {
		var diffs []string
		for _, r := range regs {
			d, err := shopcheck.FileDifferences(t.Context(), pool, shopID, registerNames[r.i], registerID(r.i), r.db)
			if err != nil {
				return err
			}
			diffs = append(diffs, d...)
		}
		if len(diffs) > 0 {
			return fmt.Errorf("%d differences, first %s", len(diffs), diffs[0])
		}
		return nil
	})
	var receipts, lines int
	if err := pool.QueryRow(t.Context(), "SELECT (SELECT count(*) FROM shop.receipts), (SELECT count(*) FROM shop.receipt_lines)").Scan(&receipts, &lines); err != nil {
		t.Fatal(err)
	}
	if receipts == 0 || lines == 0 {
		t.Errorf("%d receipts and %d lines filed; want some", receipts, lines)
	}

	// The registers saw nothing worse than retries: their engines logged
	// (-v: warnings and errors) only the warnings of a request to retry —
	// a poll, an acknowledgement or a send that failed (502 from the
	// balancer, 503 from a head office stopping, refused connections), a
	// message applied again as its file was busy — and the registers said
	// nothing of a refusal or of a sale lost.
	retries := map[string]int{}
	for i, r := range regs {
		out := before[i] + r.out.String()
		for _, line := range strings.Split(out, "\n") {
			m := logLineRE.FindStringSubmatch(line)
			switch {
			case m != nil && m[1] == "WARN" && acceptedWarnings[m[2]]:
				retries[m[2]]++
			case m != nil && m[1] == "WARN" && m[2] == notApplied && strings.Contains(line, "(SQLITE_BUSY)"):
				// The register's till held its file's write lock past
				// the busy timeout (5 s), on a machine loaded many times
				// over: the message comes again.
				retries[m[2]+" (SQLITE_BUSY)"]++
			case m != nil, strings.Contains(line, "DATA RACE"), strings.Contains(line, "refuses"),
				strings.Contains(line, "could not"), strings.Contains(line, "lost"):
				t.Errorf("%s: %s", registerNames[i], line)
			}
		}
	}
	t.Logf("the registers logged the warnings of retries: %v", retries)
	for _, ho := range hos {
		if strings.Contains(ho.out.String(), "DATA RACE") {
			t.Errorf("head office %d raced:\n%s", ho.n, ho.out.String())
		}
	}
	t.Logf("%d receipts and %d lines filed, once each; the balancer answered %d requests 502; %v in all",
		receipts, lines, rr.badGateways.Load(), time.Since(began).Round(time.Millisecond))
}
