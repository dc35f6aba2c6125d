package headoffice

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/server"
)

// countingEngine is an engine that counts the tokens it is asked to check.
type countingEngine struct {
	SchemaEngine
	checked atomic.Int64
}

func (e *countingEngine) Authenticate(ctx context.Context, replica uuid.UUID, token string) (bool, error) {
	e.checked.Add(1)
	return e.SchemaEngine.Authenticate(ctx, replica, token)
}

func (e *countingEngine) Classify(err error) int { return e.SchemaEngine.(Classifier).Classify(err) }

// realOffice is a head office's engine over a database of its own, with
// n registers, and their tokens.
func realOffice(t *testing.T, n int) (*server.Server, []uuid.UUID, []string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, shopserver.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	codecs := shoptest.Codecs(t, shoptest.Notice{})
	opts := server.Options{Replicas: shoptest.Replicas, Logger: quiet()}
	shopserver.InstallTriggers(t, pool, codecs, opts)
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	var tokens []string
	for range n {
		id := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO shop.registers VALUES ($1)`, id); err != nil {
			t.Fatal(err)
		}
		secret, err := s.Credentials(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		ids, tokens = append(ids, id), append(tokens, JoinToken(id, secret))
	}
	return s, ids, tokens
}

// clientFrom is an HTTP client whose connections come from the local
// address ip (any of 127.0.0.0/8 on Linux's loopback).
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// getFrom sends GET url with token from client, and returns the status and
// the Retry-After header.
func getFrom(c *http.Client, url, token string) (int, string, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

// A flood of wrong tokens from one address is answered 429 with
// Retry-After once the address had its failures, before any token of it
// is checked — the engine checks no more than the failures allowed —
// while a register with its right token, from another address, is served
// throughout; the flooding address's own right token waits too. (Before,
// every wrong token was checked and answered 401, as fast as they came.)
func TestWrongTokensFromOneAddressAreThrottledWhileAnotherIsServed(t *testing.T) {
	t.Parallel()
	s, ids, tokens := realOffice(t, 2)
	e := &countingEngine{SchemaEngine: ForServer(s).(SchemaEngine)}
	const allowed = 10
	srv := httptest.NewServer(NewHandler(e, HandlerOptions{Logger: quiet(), MaxAuthFailures: allowed, AuthFailureEvery: time.Hour}))
	t.Cleanup(srv.Close)
	schema := func(id uuid.UUID) string { return srv.URL + "/sync/" + id.String() + "/schema" }
	attacker, honest := clientFrom(t, "127.0.0.1"), clientFrom(t, "127.0.0.2")

	// The honest register is served, from its address, while the flood
	// goes on.
	flooding := make(chan struct{})
	var served, refused atomic.Int64
	var honestDone sync.WaitGroup
	honestDone.Go(func() {
		for {
			select {
			case <-flooding:
				if served.Load() > 0 {
					return
				}
			default:
			}
			code, _, err := getFrom(honest, schema(ids[1]), tokens[1])
			switch {
			case err != nil:
				t.Errorf("the honest register's request: %v", err)
				return
			case code == http.StatusOK:
				served.Add(1)
			default:
				refused.Add(1)
				t.Errorf("the honest register's request, from another address, answered %d during the flood; want 200", code)
			}
		}
	})

	const flood, workers = 2000, 8
	codes := make([]map[int]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		codes[w] = map[int]int{}
		wg.Go(func() {
			for i := range flood / workers {
				wrong := JoinToken(ids[0], fmt.Sprintf("guess-%d-%d", w, i))
				code, retry, err := getFrom(attacker, schema(ids[0]), wrong)
				if err != nil {
					t.Errorf("a flooding request: %v", err)
					return
				}
				codes[w][code]++
				if code == http.StatusTooManyRequests {
					if n, err := strconv.Atoi(retry); err != nil || n < 1 {
						t.Errorf("a 429 with Retry-After %q; want whole seconds, at least 1", retry)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(flooding)
	honestDone.Wait()
	total := map[int]int{}
	for _, c := range codes {
		for code, n := range c {
			total[code] += n
		}
	}
	t.Logf("the flood answered %v; the honest register served %d times meanwhile", total, served.Load())
	// Requests in flight together may each pass before the failures of
	// the others are counted: at most one per worker beyond those allowed.
	if total[http.StatusUnauthorized] < allowed || total[http.StatusUnauthorized] > allowed+workers ||
		total[http.StatusTooManyRequests] != flood-total[http.StatusUnauthorized] {
		t.Fatalf("the flood answered %v; want %d to %d 401s and 429s for the rest", total, allowed, allowed+workers)
	}
	if n := e.checked.Load(); n > int64(total[http.StatusUnauthorized])+served.Load()+refused.Load() {
		t.Fatalf("the engine checked %d tokens; want only the honest register's and the flood's %d refused", n, total[http.StatusUnauthorized])
	}
	if served.Load() == 0 || refused.Load() != 0 {
		t.Fatalf("the honest register was served %d times and refused %d; want served throughout", served.Load(), refused.Load())
	}
	// The flooding address waits, its right token too.
	if code, _, err := getFrom(attacker, schema(ids[0]), tokens[0]); err != nil || code != http.StatusTooManyRequests {
		t.Fatalf("the right token from the flooding address = %d, %v; want 429 while it waits", code, err)
	}
}

// The throttle keeps a bounded table whatever the number of addresses
// failing, and an address forgotten to make room is one that failed least.
func TestTheThrottleForgetsAddressesToStayBounded(t *testing.T) {
	t.Parallel()
	th := newThrottle(3, time.Hour)
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	th.now = func() time.Time { return now }
	// One address spends its failures.
	for range 3 {
		th.failed("attacker")
	}
	if d, _ := th.wait("attacker"); d <= 0 {
		t.Fatal("an address that spent its failures does not wait")
	}
	// Many others fail once each.
	for i := range 3 * maxThrottled {
		th.failed(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255))
		if n := len(th.addrs); n > maxThrottled {
			t.Fatalf("%d addresses kept; want at most %d", n, maxThrottled)
		}
	}
	if d, _ := th.wait("attacker"); d <= 0 {
		t.Fatal("the address that spent its failures was forgotten before those that failed once")
	}
	// An hour later every address earned its failures back.
	now = now.Add(3 * time.Hour)
	if d, _ := th.wait("attacker"); d != 0 {
		t.Fatalf("after three hours the address waits %v; want none", d)
	}
}

// An IPv6 address is known by its /64 prefix, which one network holds
// whole; an IPv4 address by itself, mapped or not.
func TestTheSourceAddressOfARequest(t *testing.T) {
	t.Parallel()
	for remote, want := range map[string]string{
		"192.0.2.7:5000":                "192.0.2.7",
		"[::ffff:192.0.2.7]:5000":       "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443":    "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:443":    "2001:db8:1:2::/64",
		"not an address":                "not an address",
		"[fe80::1%eth0]:80":             "fe80::/64",
		"127.0.0.1":                     "127.0.0.1",
		"[2001:db8:1:3:3:4:5:6]:443":    "2001:db8:1:3::/64",
		"[2001:db8:1:2:3:4:5:6%x]:1234": "2001:db8:1:2::/64",
	} {
		r := &http.Request{RemoteAddr: remote}
		if got := sourceAddress(r); got != want {
			t.Errorf("sourceAddress(%q) = %q; want %q", remote, got, want)
		}
	}
}
