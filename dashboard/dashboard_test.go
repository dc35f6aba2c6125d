package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/server"
)

// newTest serves src with opts; with no Authorize, to everyone (Public):
// the tests of what the dashboard shows are not about who may see it.
func newTest(t *testing.T, src Source, opts Options) (http.Handler, *bytes.Buffer) {
	t.Helper()
	if opts.Authorize == nil {
		opts.Public = true
	}
	var logs bytes.Buffer
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}
	h := New(src, opts)
	h.(*handler).now = func() time.Time { return testNow }
	return h, &logs
}

func get(t *testing.T, h http.Handler, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec
}

func page(t *testing.T, st []server.ReplicaStatus) string {
	t.Helper()
	h, _ := newTest(t, fakeSource{st: st}, Options{Title: "Shop registers", Names: fleetNames})
	rec := get(t, h, "/")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	return rec.Body.String()
}

// card cuts the card of replica u out of the page.
func card(t *testing.T, body string, u uuid.UUID) string {
	t.Helper()
	i := strings.Index(body, `id="r-`+u.String()+`"`)
	if i < 0 {
		t.Fatalf("no card for %s", u)
	}
	j := strings.Index(body[i:], "</article>")
	return body[i : i+j]
}

var (
	tagRE    = regexp.MustCompile(`<[^>]*>`)
	inlineRE = regexp.MustCompile(`</?(a|b|code|i|span|time)(\s[^>]*)?>`)
)

// text is what a reader sees of some HTML, spaces collapsed: inline
// elements run on with their neighbours, the others stand apart.
func text(html string) string {
	return strings.Join(strings.Fields(tagRE.ReplaceAllString(inlineRE.ReplaceAllString(html, ""), " ")), " ")
}

func TestPageListsEveryReplica(t *testing.T) {
	body := page(t, fleet())
	for _, st := range fleet() {
		c := card(t, body, st.ID)
		name := fleetNames(st.ID)
		if name == "" {
			name = st.ID.String()
		}
		if !strings.Contains(c, template_escape(name)) {
			t.Errorf("card of %s lacks its name %q", st.ID, name)
		}
		for _, ts := range st.Tables {
			if ts.Holds != 0 || ts.Should != 0 {
				want := "holds " + number(ts.Holds) + " of " + number(ts.Should)
				if !strings.Contains(text(c), want) {
					t.Errorf("card of %s lacks %q", name, want)
				}
			}
		}
		if st.Build != "" && !strings.Contains(c, st.Build) {
			t.Errorf("card of %s lacks its build", name)
		}
	}
	c := text(card(t, body, id(2)))
	for _, want := range []string{"register 2", "holds 5 of 7", "receipts waiting to reach the server: 3", "received: 988", "Updates waiting to reach it: 2",
		"Last message applied #1040", "Online, last in touch at 15:09", "online"} {
		if !strings.Contains(c, want) {
			t.Errorf("card of register 2 lacks %q: %s", want, c)
		}
	}
	if !strings.Contains(card(t, body, id(2)), `class="holds off"`) {
		t.Error("holds 5 of 7 is not highlighted")
	}
	if strings.Contains(card(t, body, id(1)), `class="holds off"`) {
		t.Error("holds 7 of 7 is highlighted")
	}
	summary := text(body[strings.Index(body, `class="summary"`):strings.Index(body, `id="h-attn"`)])
	for _, want := range []string{"7 replicas, 5 online; 6 need attention, shown first.",
		"receipts waiting to reach the server: 15 (12 of them on offline replicas, as they last said).",
		"Updates waiting to be sent to replicas: 7.", "Wishes: 1 refused, 1 waiting, 3 carried out.",
		"3 rows could not be taken.", "fix what the reason names", "2 rows are held back on replicas (their backlog)", "update that replica's software",
		"Messages queued 7", "Rows filed 4,757"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q: %s", want, summary)
		}
	}
	if !strings.Contains(body, `content="width=device-width, initial-scale=1"`) {
		t.Error("no viewport meta")
	}
	for _, ext := range []string{"http://", "https://", "//cdn", "@import", "url("} {
		if strings.Contains(body, ext) {
			t.Errorf("page refers to %q: it must load nothing from the network", ext)
		}
	}
}

func template_escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}

func TestOfflineReplica(t *testing.T) {
	body := page(t, fleet())
	c := card(t, body, id(10))
	if !strings.Contains(c, `<span class="badge off">offline</span>`) {
		t.Errorf("offline replica shows no offline badge:\n%s", c)
	}
	if strings.Contains(c, "badge on") {
		t.Error("offline replica shows online")
	}
	if !strings.Contains(text(c), "Offline since 13:04 (2 h ago). It keeps working on its own") || !strings.Contains(text(c), "waiting to reach the server: 12 (stale: offline)") {
		t.Errorf("offline replica: %s", text(c))
	}
	if c := text(card(t, body, id(5))); !strings.Contains(c, "offline") || !strings.Contains(c, "never seen") || !strings.Contains(c, "Never seen: it has not been in touch with the server yet.") || !strings.Contains(c, "Last seen never") {
		t.Errorf("never-seen replica: %s", c)
	}
	if c := card(t, body, id(1)); !strings.Contains(c, `<span class="badge on">online</span>`) || strings.Contains(c, "offline") {
		t.Errorf("online replica: %s", text(c))
	}
}

func TestProvisioningShowsReason(t *testing.T) {
	c := text(card(t, page(t, fleet()), id(3)))
	for _, want := range []string{"provisioning", "digest of products disagrees: replica holds 5 rows, server expects 7"} {
		if !strings.Contains(c, want) {
			t.Errorf("provisioning replica lacks %q: %s", want, c)
		}
	}
}

func TestRejectedRowsShowReason(t *testing.T) {
	c := text(card(t, page(t, fleet()), id(4)))
	for _, want := range []string{
		"2 rejected rows",
		`receipts ("R-4-0017")`, "row belongs to another replica (register_id 00000000-0000-4000-8000-000000000002)", "server refused", "4 min ago",
		`products ("SKU-991")`, "UNIQUE constraint failed: products.barcode", "replica could not apply",
		"Rows held back on it (backlog): 2.", "backlog of 2 rows", "The rest went on without them.",
	} {
		if !strings.Contains(c, template_escape(want)) {
			t.Errorf("card of register 4 lacks %q:\n%s", want, c)
		}
	}
}

// A replica's wishes are counted by where they stand, those needing
// attention first, and a refused wish needs attention.
func TestWishesAreCountedByStateAndARefusalNeedsAttention(t *testing.T) {
	c := text(card(t, page(t, fleet()), id(4)))
	for _, want := range []string{"Wishes: 1 refused · 1 waiting · 3 carried out.", "1 wish refused"} {
		if !strings.Contains(c, template_escape(want)) {
			t.Errorf("card of register 4 lacks %q:\n%s", want, c)
		}
	}
	if c := text(card(t, page(t, fleet()), id(1))); strings.Contains(c, "Wishes") {
		t.Errorf("card of register 1, which has no wishes, shows some:\n%s", c)
	}
}

func TestRejectedRowsBeyondTheCapAreCounted(t *testing.T) {
	st := fleet()[:1]
	for i := range MaxRejectedShown + 5 {
		st[0].Rejected = append(st[0].Rejected, server.RejectedRow{Table: "receipts", Key: textKey(string(rune('a' + i))), Reason: "no", Side: "server", At: testNow})
	}
	c := text(card(t, page(t, st), id(1)))
	if !strings.Contains(c, "25 rejected rows") || !strings.Contains(c, "and 5 more, listed in status.json") {
		t.Errorf("capped list: %s", c)
	}
	if n := strings.Count(c, "server refused"); n != MaxRejectedShown {
		t.Errorf("%d rejected rows listed, want %d", n, MaxRejectedShown)
	}
}

func TestEscapesWhatItShows(t *testing.T) {
	body := page(t, fleet())
	for _, raw := range []string{evilTable, evilReason, `<img`, `<b>key</b>`, `<i>6</i>`, `</pre>`} {
		if strings.Contains(body, raw) {
			t.Errorf("page carries %q unescaped", raw)
		}
	}
	c := card(t, body, id(6))
	for _, want := range []string{
		`&lt;script&gt;alert(&#34;t&#34;)&lt;/script&gt;`,
		`&#34;&gt;&lt;img src=x onerror=alert(1)&gt; &amp; &lt;/pre&gt;`,
		`kiosk &lt;i&gt;6&lt;/i&gt;`,
	} {
		if !strings.Contains(c, want) {
			t.Errorf("card lacks escaped %q:\n%s", want, c)
		}
	}
	if n := strings.Count(body, "<script"); n != 1 {
		t.Errorf("%d <script elements, want only the page's own", n)
	}
}

func TestContentSecurityPolicyAllowsOnlyThePagesOwn(t *testing.T) {
	h, _ := newTest(t, fakeSource{st: fleet()}, Options{})
	rec := get(t, h, "/")
	csp := rec.Header().Get("Content-Security-Policy")
	body := rec.Body.String()
	for _, el := range []string{"style", "script"} {
		m := regexp.MustCompile(`(?s)<`+el+`>(.*?)</`+el+`>`).FindAllStringSubmatch(body, -1)
		if len(m) != 1 {
			t.Fatalf("%d <%s> elements", len(m), el)
		}
		if want := el + "-src " + hashSource(m[0][1]); !strings.Contains(csp, want) {
			t.Errorf("policy %q lacks %q: the %s as served differs from its hash", csp, want, el)
		}
	}
	if !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("policy %q", csp)
	}
	if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q", cc)
	}
}

func TestStatusJSON(t *testing.T) {
	h, _ := newTest(t, fakeSource{st: fleet()}, Options{Title: "Shop registers", Names: fleetNames})
	rec := get(t, h, "/status.json")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /status.json: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var ov Overview
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ov); err != nil {
		t.Fatal(err)
	}
	if ov.Title != "Shop registers" || !ov.At.Equal(testNow) {
		t.Errorf("title %q at %v", ov.Title, ov.At)
	}
	// Register 10, offline, reported 12 of the 15 rows on their way up.
	want := Summary{Replicas: 7, Online: 5, Attention: 6, Provisioning: 1, Queued: 7, Unsent: 15, UnsentStale: 12, Filed: 4757, Rejected: 3, Backlog: 2,
		Wishes: map[string]int{"applied": 3, "waiting": 1, "refused": 1}}
	if !reflect.DeepEqual(ov.Summary, want) {
		t.Errorf("summary\n got %+v\nwant %+v", ov.Summary, want)
	}
	byID := map[uuid.UUID]Replica{}
	for _, r := range ov.Replicas {
		byID[r.ID] = r
	}
	for _, st := range fleet() {
		r, ok := byID[st.ID]
		if !ok {
			t.Errorf("replica %s missing", st.ID)
			continue
		}
		if r.Online != st.Online || !r.LastSeen.Equal(st.LastSeen) || r.Provisioning != st.Provisioning || r.ProvisionReason != st.ProvisionReason ||
			r.Queued != st.Queued || r.LastApplied != st.LastApplied || r.Backlog != st.Backlog || r.Build != st.Build {
			t.Errorf("replica %s: got %+v, from %+v", st.ID, r, st)
		}
		if len(r.Tables) != len(st.Tables) {
			t.Errorf("replica %s: %d tables, want %d", st.ID, len(r.Tables), len(st.Tables))
		}
		for i, ts := range st.Tables {
			if i < len(r.Tables) && r.Tables[i] != (Table{Table: ts.Table, Holds: ts.Holds, Should: ts.Should, Unsent: ts.Unsent, Filed: ts.Filed}) {
				t.Errorf("replica %s table %d: got %+v, from %+v", st.ID, i, r.Tables[i], ts)
			}
		}
		if len(r.Rejected) != len(st.Rejected) {
			t.Errorf("replica %s: %d rejected, want %d", st.ID, len(r.Rejected), len(st.Rejected))
		}
		for i, j := range st.Rejected {
			if i >= len(r.Rejected) {
				break
			}
			got := r.Rejected[i]
			if got.Table != j.Table || got.Key != j.Key.String() || got.Reason != j.Reason || got.Side != j.Side || !got.At.Equal(j.At) {
				t.Errorf("replica %s rejected %d: got %+v, from %+v", st.ID, i, got, j)
			}
			if k, err := hexKey(got.KeyHex); err != nil || k != j.Key {
				t.Errorf("replica %s rejected %d: keyHex %q does not give the key back", st.ID, i, got.KeyHex)
			}
		}
		if (len(r.Attention) > 0) != (st.ID != id(1)) {
			t.Errorf("replica %s: attention %q", st.ID, r.Attention)
		}
	}
	if r := byID[id(2)]; !slices.Equal(r.Attention, []string{"holds 5 of 7 products"}) || r.Name != "register 2" {
		t.Errorf("register 2: %q %q", r.Name, r.Attention)
	}
	if r := byID[id(5)]; r.Name != id(5).String() || !r.LastSeen.IsZero() {
		t.Errorf("unnamed replica: %+v", r)
	}

	// Empty lists are [], not null, and a never-seen replica has no lastSeen.
	rec = get(t, h, "/status.json")
	var raw struct {
		Replicas []map[string]json.RawMessage `json:"replicas"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, r := range raw.Replicas {
		for _, k := range []string{"tables", "rejected", "attention"} {
			if string(r[k]) == "null" {
				t.Errorf("%s is null in %s", k, r["id"])
			}
		}
		if string(r["id"]) == `"`+id(5).String()+`"` {
			if _, ok := r["lastSeen"]; ok {
				t.Error("never-seen replica has a lastSeen")
			}
		}
	}
}

func TestSourceErrorIs503(t *testing.T) {
	h, logs := newTest(t, fakeSource{err: errors.New("server: status: connection refused <at> db:5432")}, Options{})
	rec := get(t, h, "/")
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("GET /: %d, want 503", rec.Code)
	}
	body := rec.Body.String()
	if !strings.Contains(body, "could not read where the replicas stand") || !strings.Contains(body, "connection refused &lt;at&gt; db:5432") {
		t.Errorf("503 page does not say what failed:\n%s", body)
	}
	if !strings.Contains(body, "data-refresh=") || rec.Header().Get("Retry-After") == "" {
		t.Error("503 page does not keep refreshing")
	}
	if !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("error not logged: %q", logs)
	}

	rec = get(t, h, "/status.json")
	var e struct{ Error string }
	if rec.Code != http.StatusServiceUnavailable || json.Unmarshal(rec.Body.Bytes(), &e) != nil || !strings.Contains(e.Error, "connection refused") {
		t.Errorf("GET /status.json: %d %s", rec.Code, rec.Body)
	}

	// GET /healthz reads no status: it answers what the last reading found
	// (a Source that can be pinged is pinged instead), and gives no detail.
	rec = get(t, h, "/healthz")
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "database unreachable since") ||
		strings.Contains(rec.Body.String(), "connection refused") {
		t.Errorf("GET /healthz: %d %s", rec.Code, rec.Body)
	}
}

func TestHealthz(t *testing.T) {
	h, _ := newTest(t, fakeSource{st: fleet()}, Options{})
	rec := get(t, h, "/healthz")
	if rec.Code != http.StatusOK || rec.Body.String() != "ok\n" {
		t.Errorf("GET /healthz: %d %q", rec.Code, rec.Body)
	}
}

func TestAttentionFirstThenByName(t *testing.T) {
	wantOrder := []uuid.UUID{id(5), id(6), id(2), id(3), id(4), id(10), id(1)}

	h, _ := newTest(t, fakeSource{st: fleet()}, Options{Names: fleetNames})
	var ov Overview
	if err := json.Unmarshal(get(t, h, "/status.json").Body.Bytes(), &ov); err != nil {
		t.Fatal(err)
	}
	var got []uuid.UUID
	for _, r := range ov.Replicas {
		got = append(got, r.ID)
	}
	if !slices.Equal(got, wantOrder) {
		t.Errorf("status.json order\n got %v\nwant %v", got, wantOrder)
	}

	body := get(t, h, "/").Body.String()
	got = nil
	for _, m := range regexp.MustCompile(`id="r-([0-9a-f-]{36})"`).FindAllStringSubmatch(body, -1) {
		got = append(got, uuid.MustParse(m[1]))
	}
	if !slices.Equal(got, wantOrder) {
		t.Errorf("page order\n got %v\nwant %v", got, wantOrder)
	}

	// Healthy replicas alone: by name, numbers as numbers.
	healthy := func(n int, name string) server.ReplicaStatus {
		return server.ReplicaStatus{ID: id(n), Online: true, LastSeen: testNow, Build: name}
	}
	st := []server.ReplicaStatus{healthy(1, "Register 10"), healthy(2, "register 9"), healthy(3, "kiosk"), healthy(4, "register 09"), healthy(5, "")} // 9 and 09 tie: by id
	names := func(u uuid.UUID) string {
		for _, s := range st {
			if s.ID == u {
				return s.Build
			}
		}
		return ""
	}
	ov = build("", testNow, st, names)
	got = nil
	for _, r := range ov.Replicas {
		got = append(got, r.ID)
	}
	if want := []uuid.UUID{id(5), id(3), id(2), id(4), id(1)}; !slices.Equal(got, want) {
		t.Errorf("order by name\n got %v\nwant %v", got, want)
	}
}

func TestNaturalCompare(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"register 2", "register 10", -1},
		{"register 10", "register 2", 1},
		{"Register 2", "register 2", 0},
		{"register 02", "register 2", 0},
		{"a", "ab", -1},
		{"register 2a", "register 2b", -1},
		{"x99999999999999999999999", "x100000000000000000000000", -1},
		{"é", "f", 1},
	} {
		if got := naturalCompare(c.a, c.b); got != c.want {
			t.Errorf("naturalCompare(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 4757: "4,757", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := number(n); got != want {
			t.Errorf("number(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{
		-time.Second: "less than a minute ago", 0: "less than a minute ago", 59 * time.Second: "less than a minute ago", 90 * time.Second: "1 min ago",
		2*time.Hour + 5*time.Minute: "2 h ago", 72 * time.Hour: "3 days ago",
	} {
		if got := ago(testNow, testNow.Add(-d)); got != want {
			t.Errorf("ago(%v) = %q, want %q", d, got, want)
		}
	}
	if got := ago(testNow, time.Time{}); got != "never" {
		t.Errorf("ago(zero) = %q", got)
	}
	if got := count(1, "row", "rows") + ", " + count(2000, "row", "rows"); got != "1 row, 2,000 rows" {
		t.Errorf("count: %q", got)
	}
}

func TestRefreshOptions(t *testing.T) {
	h, _ := newTest(t, fakeSource{st: fleet()}, Options{})
	body := get(t, h, "/").Body.String()
	if !strings.Contains(body, `data-refresh="2000"`) || !strings.Contains(body, `<meta http-equiv="refresh" content="2">`) || !strings.Contains(body, "<script>") {
		t.Error("default page does not refresh every 2 s")
	}
	h, _ = newTest(t, fakeSource{st: fleet()}, Options{Refresh: 15 * time.Second})
	if body := get(t, h, "/").Body.String(); !strings.Contains(body, `data-refresh="15000"`) || !strings.Contains(body, `content="15"`) {
		t.Error("page does not refresh every 15 s")
	}
	h, _ = newTest(t, fakeSource{st: fleet()}, Options{Refresh: -1})
	if body := get(t, h, "/").Body.String(); strings.Contains(body, "data-refresh") || strings.Contains(body, "http-equiv") || strings.Contains(body, "<script") {
		t.Error("page refreshes though told never to")
	}
	if body := get(t, h, "/").Body.String(); !strings.Contains(body, "<title>(6) magicsync</title>") {
		t.Errorf("title: %s", body[:strings.Index(body, "</title>")])
	}
}

func TestRoutes(t *testing.T) {
	h, _ := newTest(t, fakeSource{st: fleet()}, Options{})
	if rec := get(t, h, "/nope"); rec.Code != http.StatusNotFound {
		t.Errorf("GET /nope: %d", rec.Code)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/status.json", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /status.json: %d %q", rec.Code, rec.Header().Get("Allow"))
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("HEAD /: %d", rec.Code)
	}

	// Mounted under a path: the bare prefix redirects to the page with its
	// trailing slash, so that its relative links resolve.
	mux := http.NewServeMux()
	mux.Handle("/admin/sync/", http.StripPrefix("/admin/sync", h))
	mux.Handle("/admin/sync", http.StripPrefix("/admin/sync", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL + "/admin/sync?x=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Request.URL.Path != "/admin/sync/" || res.Request.URL.RawQuery != "x=1" || !strings.Contains(string(b), `href="status.json"`) {
		t.Errorf("GET /admin/sync: %d at %s", res.StatusCode, res.Request.URL)
	}
	res, err = srv.Client().Get(srv.URL + "/admin/sync/status.json")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("GET /admin/sync/status.json: %d", res.StatusCode)
	}
}

func TestNoReplicas(t *testing.T) {
	body := page(t, nil)
	if !strings.Contains(text(body), "0 replicas") || !strings.Contains(body, "No replicas yet") {
		t.Errorf("empty fleet: %s", text(body))
	}
	h, _ := newTest(t, fakeSource{}, Options{})
	if b := get(t, h, "/status.json").Body.String(); !strings.Contains(b, `"replicas": []`) {
		t.Errorf("empty fleet status.json: %s", b)
	}
}
