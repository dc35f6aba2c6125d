package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/server"
)

// countingSource counts the statuses read from it.
type countingSource struct {
	mu    sync.Mutex
	reads int
	err   error
}

func (c *countingSource) Status(context.Context) ([]server.ReplicaStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	if c.err != nil {
		return nil, c.err
	}
	return fleet(), nil
}

func (c *countingSource) setErr(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

func (c *countingSource) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

func withBasic(target, user, password string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.SetBasicAuth(user, password)
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// Options that neither authorize nor declare the dashboard public refuse
// every request but /healthz, with 401 and a page saying how to configure
// it, and read nothing.
func TestUnconfiguredDashboardRefusesEveryone(t *testing.T) {
	t.Parallel()
	src := &countingSource{}
	h := New(src, Options{})
	for _, path := range []string{"/", "/status.json", "/nowhere"} {
		rec := serve(h, withBasic(path, "admin", "admin"))
		if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "Options.Authorize") ||
			!strings.Contains(rec.Body.String(), "BasicAuth") || strings.Contains(rec.Body.String(), "register") {
			t.Errorf("GET %q: %d\n%s", path, rec.Code, rec.Body)
		}
	}
	if n := src.count(); n != 0 {
		t.Errorf("the status was read %d times for refused requests", n)
	}
	if rec := get(t, h, "/healthz"); rec.Code != http.StatusOK || rec.Body.String() != "ok\n" {
		t.Errorf("GET /healthz: %d %q", rec.Code, rec.Body)
	}
	if n := src.count(); n != 0 {
		t.Errorf("GET /healthz read the status (%d times)", n)
	}
}

// BasicAuth lets in the right user and password only; the others are
// refused 401 with a Basic challenge (so a browser asks), and nothing is
// read for them.
func TestBasicAuthAcceptsOnlyItsPassword(t *testing.T) {
	t.Parallel()
	src := &countingSource{}
	h := New(src, Options{Title: "Shop registers", Authorize: BasicAuth("operator", "s3cret horse")})
	for _, c := range []struct {
		name string
		req  *http.Request
	}{
		{"no credentials", httptest.NewRequest(http.MethodGet, "/", nil)},
		{"a wrong password", withBasic("/", "operator", "s3cret hors")},
		{"a longer password", withBasic("/", "operator", "s3cret horse!")},
		{"a wrong user", withBasic("/status.json", "admin", "s3cret horse")},
		{"an empty password", withBasic("/", "operator", "")},
	} {
		rec := serve(h, c.req)
		if rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), `Basic realm="Shop registers"`) {
			t.Errorf("%s: %d, WWW-Authenticate %q", c.name, rec.Code, rec.Header().Get("WWW-Authenticate"))
		}
	}
	if n := src.count(); n != 0 {
		t.Errorf("the status was read %d times for refused requests", n)
	}
	for _, path := range []string{"/", "/status.json"} {
		if rec := serve(h, withBasic(path, "operator", "s3cret horse")); rec.Code != http.StatusOK {
			t.Errorf("GET %s with the password: %d", path, rec.Code)
		}
	}
	// An empty password lets nobody in, not even with an empty password.
	if !New(src, Options{Authorize: BasicAuth("operator", "")}).(*handler).challenge {
		t.Error("BasicAuth's refusals do not ask for credentials")
	}
	if rec := serve(New(src, Options{Authorize: BasicAuth("operator", "")}), withBasic("/", "operator", "")); rec.Code != http.StatusUnauthorized {
		t.Errorf("BasicAuth with an empty password let in: %d", rec.Code)
	}
	// Another Authorize refuses without asking for a password.
	rec := serve(New(src, Options{Authorize: func(*http.Request) bool { return false }}), httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusUnauthorized || rec.Header().Get("WWW-Authenticate") != "" {
		t.Errorf("a host's Authorize refusing: %d, WWW-Authenticate %q", rec.Code, rec.Header().Get("WWW-Authenticate"))
	}
}

// The rows on their way up are the replica's last report: the page says
// as of when, and marks them stale while the replica is offline.
func TestUnsentShownAsOfTheReportAndStaleWhileOffline(t *testing.T) {
	t.Parallel()
	st := fleet()
	reported := testNow.Add(-2*time.Hour - 10*time.Minute)
	for i := range st {
		st[i].ReportedAt = reported
	}
	body := page(t, st)
	online := text(card(t, body, id(2)))
	if !strings.Contains(online, "receipts waiting to reach the server: 3, as of "+reported.Format("15:04")) || strings.Contains(online, "stale") {
		t.Errorf("online register 2: %s", online)
	}
	offline := text(card(t, body, id(10)))
	if !strings.Contains(offline, "receipts waiting to reach the server: 12, as of "+reported.Format("15:04")+" (stale: offline)") {
		t.Errorf("offline register 10: %s", offline)
	}
	if !strings.Contains(text(body), "receipts waiting to reach the server: 15, as of "+reported.Format("15:04")+" (12 of them on offline replicas, as they last said).") {
		t.Errorf("summary: %s", text(body))
	}
}

// The page reads a table's kind from the declarations: a record with
// nothing filed shows its rows sent up and filed, not "holds 0 of 0"; a
// catalog shows what is held even with nothing yet.
func TestTablesShownByTheirDeclaredKind(t *testing.T) {
	t.Parallel()
	st := []server.ReplicaStatus{{ID: id(1), Online: true, LastSeen: testNow, Tables: []server.TableStatus{
		{Table: "products", Mirror: magicsync.Catalog},
		{Table: "receipts", Mirror: magicsync.Record},
		{Table: "drawer", Mirror: magicsync.Setting},
	}}}
	c := text(card(t, page(t, st), id(1)))
	if strings.Count(c, "holds 0 of 0") != 1 || strings.Count(c, "waiting to reach the server: 0") != 2 || strings.Count(c, "received: 0") != 2 {
		t.Errorf("card: %s", c)
	}
	if !strings.Contains(c, "products holds 0 of 0") || !strings.Contains(c, "receipts waiting to reach the server: 0") {
		t.Errorf("card: %s", c)
	}
}

// A Source that lists only the latest rejected rows (a server.Server) gives
// their total: the page counts them all and says how many more there are.
func TestRejectedTotalBeyondTheListing(t *testing.T) {
	t.Parallel()
	st := fleet()[:1]
	for i := range 30 {
		st[0].Rejected = append(st[0].Rejected, server.RejectedRow{Table: "receipts", Key: textKey(string(rune('a' + i))), Reason: "no", Side: "server", At: testNow})
	}
	st[0].RejectedTotal = 5000
	c := text(card(t, page(t, st), id(1)))
	if !strings.Contains(c, "5,000 rejected rows") || !strings.Contains(c, "and 4,980 more") || !strings.Contains(c, "status.json lists the latest 30") {
		t.Errorf("card: %s", c)
	}
	h, _ := newTest(t, fakeSource{st: st}, Options{})
	if rec := get(t, h, "/status.json"); !strings.Contains(rec.Body.String(), `"rejectedTotal": 5000`) ||
		!strings.Contains(rec.Body.String(), `"rejected": 5000`) {
		t.Errorf("status.json does not give the total")
	}
}

// When the status cannot be read, the page says since when the database
// has been unreachable — the first failure's time, kept across failures —
// with 503; once it answers again, the next failure starts anew.
func TestDatabaseUnreachableSinceTheFirstFailure(t *testing.T) {
	t.Parallel()
	src := &countingSource{err: errors.New("server: status: dial tcp 127.0.0.1:5432: connect: connection refused")}
	h, _ := newTest(t, src, Options{})
	now := testNow
	h.(*handler).now = func() time.Time { return now }
	first := get(t, h, "/")
	if first.Code != http.StatusServiceUnavailable || !strings.Contains(text(first.Body.String()), "Database unreachable since "+testNow.Format("15:04:05")+" (less than a minute ago)") {
		t.Fatalf("GET /: %d\n%s", first.Code, text(first.Body.String()))
	}
	now = testNow.Add(90 * time.Second)
	later := text(get(t, h, "/").Body.String())
	if !strings.Contains(later, "Database unreachable since "+testNow.Format("15:04:05")+" (1 min ago)") {
		t.Errorf("90 s later: %s", later)
	}
	if rec := get(t, h, "/healthz"); rec.Code != http.StatusServiceUnavailable ||
		rec.Body.String() != "unavailable: database unreachable since "+testNow.Format(time.RFC3339)+"\n" {
		t.Errorf("GET /healthz: %d %q", rec.Code, rec.Body)
	}
	src.setErr(nil)
	if rec := get(t, h, "/"); rec.Code != http.StatusOK {
		t.Fatalf("GET / once it answers: %d", rec.Code)
	}
	if rec := get(t, h, "/healthz"); rec.Code != http.StatusOK {
		t.Errorf("GET /healthz once it answers: %d %q", rec.Code, rec.Body)
	}
	src.setErr(errors.New("server: status: closed pool"))
	now = testNow.Add(time.Hour)
	if again := text(get(t, h, "/").Body.String()); !strings.Contains(again, "Database unreachable since "+now.Format("15:04:05")) {
		t.Errorf("failing again an hour later: %s", again)
	}
}
