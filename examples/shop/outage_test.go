package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// runInProcess runs one of the shop's programs in a goroutine until the
// test ends or stop is called, printing into the program's output.
func runInProcess(t *testing.T, name string, main func(ctx context.Context, out *syncBuffer) error) (*program, context.CancelFunc) {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	p := &program{name: name, done: make(chan struct{})}
	go func() {
		p.err = main(ctx, &p.out)
		close(p.done)
	}()
	t.Cleanup(func() {
		stop()
		<-p.done
		if t.Failed() {
			t.Logf("%s printed:\n%s", name, p.out.String())
		}
	})
	return p, stop
}

// receiptsFiledIn lists the receipts of register 1 the head office filed,
// reading the database at pool.
func receiptsFiledIn(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	rows, err := pool.Query(ctx, "SELECT id::text FROM shop.receipts WHERE register_id = $1", registerID(0))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var filed []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		filed = append(filed, id)
	}
	return filed, rows.Err()
}

// TestHeadOfficeLivesThroughADatabaseOutage stops the head office's
// PostgreSQL under the running head office program and register 1: the
// head office says so once and keeps running, its sync endpoints answer
// 503 with Retry-After, the register keeps selling; once PostgreSQL is
// back the head office says so, and every sale rung up — before, during
// and after the outage — is filed. Nothing is lost, and both programs stop
// cleanly at the end.
func TestHeadOfficeLivesThroughADatabaseOutage(t *testing.T) {
	t.Parallel()
	cluster := pgtest.NewCluster(t)
	hoData, regData := t.TempDir(), t.TempDir()
	ho, stopHO := runInProcess(t, "the head office", func(ctx context.Context, out *syncBuffer) error {
		return runHeadOffice(ctx, config{data: hoData, addr: "127.0.0.1:0", poll: testPoll, out: out, databaseURL: cluster.URL()})
	})
	m, _ := ho.await(t, 0, `head office up; dashboard at (http://\S+)/`)
	url := m[1]
	m, _ = ho.await(t, 0, `register 1: its token is in (\S+)`)
	tokenFile := m[1]
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	reg, stopReg := runInProcess(t, "register 1", func(ctx context.Context, out *syncBuffer) error {
		return runRegister(ctx, registerConfig{n: 1, server: url, tokenFile: tokenFile, data: regData,
			every: 50 * time.Millisecond, poll: testPoll, out: out})
	})
	pool, err := pgxpool.New(t.Context(), cluster.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	m, _ = reg.await(t, 0, saleRE)
	waitFiled(t, pool, 0, m[3], centsOf(t, m[1], m[2]))

	start := time.Now()
	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	_, hoAt := ho.await(t, 0, `head office: its database is unreachable \(`)
	// The register sells on: three sales rung up after the stop.
	at := len(reg.out.String())
	for range 3 {
		_, at = reg.await(t, at, saleRE)
	}
	// The sync endpoints answer 503, with Retry-After: try again later.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, fmt.Sprintf("%s/sync/%s/next?wait=0", url, registerID(0)), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the head office does not answer while its database is away: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("while the database is away, GET next answers %s with Retry-After %q; want 503 with a Retry-After",
			resp.Status, resp.Header.Get("Retry-After"))
	}
	down := time.Since(start)

	if err := cluster.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	ho.await(t, hoAt, `head office: its database is back after `)
	_, at = reg.await(t, len(reg.out.String()), saleRE)

	// Every sale the register printed, before, during and after the
	// outage, is filed.
	var receipts []string
	for _, m := range regexp.MustCompile(saleRE).FindAllStringSubmatch(reg.out.String()[:at], -1) {
		receipts = append(receipts, m[3])
	}
	waitFor(t, fmt.Sprintf("the %d receipts rung up filed at the head office", len(receipts)), func() error {
		filed, err := receiptsFiledIn(t.Context(), pool)
		if err != nil {
			return err
		}
		var missing []string
		for _, p := range receipts {
			found := false
			for _, id := range filed {
				found = found || strings.HasPrefix(id, p)
			}
			if !found {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d of %d not filed: %v", len(missing), len(receipts), missing)
		}
		return nil
	})
	t.Logf("database away %v; %d receipts filed, all of them, %v after it came back", down.Round(time.Millisecond), len(receipts), time.Since(back).Round(time.Millisecond))
	if strings.Count(ho.out.String(), "its database is unreachable") != 1 {
		t.Errorf("the head office did not say once that its database was unreachable:\n%s", ho.out.String())
	}

	stopReg()
	<-reg.done
	stopHO()
	<-ho.done
	if reg.err != nil || ho.err != nil {
		t.Fatalf("the register ended with %v, the head office with %v; want both nil", reg.err, ho.err)
	}
}

// TestDemoLivesThroughADatabaseOutage stops PostgreSQL under the running
// demo: it says so once and goes on — its registers selling, its day's
// steps that need the database skipped — and once PostgreSQL is back it
// says so, reports on the day again, and stops cleanly at the end.
func TestDemoLivesThroughADatabaseOutage(t *testing.T) {
	t.Parallel()
	cluster := pgtest.NewCluster(t)
	data := t.TempDir()
	demo, stop := runInProcess(t, "the demo", func(ctx context.Context, out *syncBuffer) error {
		return run(ctx, config{data: data, addr: "127.0.0.1:0", every: 40 * time.Millisecond, poll: testPoll,
			offlineFor: 100 * time.Millisecond, out: out, databaseURL: cluster.URL()})
	})
	_, at := demo.await(t, 0, ` rang up `)
	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	_, at = demo.await(t, at, `head office: its database is unreachable \(`)
	for range 3 {
		_, at = demo.await(t, at, ` rang up `)
	}
	if err := cluster.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, at = demo.await(t, at, `head office: its database is back after `)
	demo.await(t, at, `head office has filed \d+ receipts`)
	stop()
	<-demo.done
	if demo.err != nil {
		t.Fatalf("the demo ended with %v; want nil", demo.err)
	}
	if n := strings.Count(demo.out.String(), "its database is unreachable"); n != 1 {
		t.Errorf("the demo said %d times that its database was unreachable; want once", n)
	}
}
