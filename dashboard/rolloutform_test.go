package dashboard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/magicsync/magicsync/server"
)

// rollCall is one call of RollValues.
type rollCall struct {
	table       string
	key, values map[string]string
	scope       server.RolloutScope
	opts        server.RolloutOptions
}

// startingSource is a RolloutStarter recording the rollouts started; err,
// if set, is what RollValues answers, and pingErr what Ping does.
type startingSource struct {
	rolloutSource
	tables  []server.SettingTable
	err     error
	pingErr error

	mu    sync.Mutex
	calls []rollCall
}

func (s *startingSource) SettingTables() []server.SettingTable { return s.tables }

func (s *startingSource) RollValues(_ context.Context, table string, key, values map[string]string, scope server.RolloutScope, opts server.RolloutOptions) (server.Rollout, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, rollCall{table, key, values, scope, opts})
	if s.err != nil {
		return server.Rollout{}, s.err
	}
	return server.Rollout{ID: 41 + int64(len(s.calls)), Table: table, Replicas: 3, Wished: 3}, nil
}

func (s *startingSource) Ping(context.Context) error { return s.pingErr }

func (s *startingSource) started() []rollCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]rollCall(nil), s.calls...)
}

// shopSettings are the shop's setting tables: its footers, one per
// register, and its register settings, by name.
func shopSettings() []server.SettingTable {
	return []server.SettingTable{
		{Name: "footers", Desired: []string{"text"}},
		{Name: "register_settings", Key: []string{"name"}, Desired: []string{"value"}},
	}
}

func newStarting(t *testing.T, src Source) http.Handler {
	t.Helper()
	h, _ := newTest(t, src, Options{Title: "Shop registers", Names: fleetNames, TableLabels: shopLabels, ServerName: "the head office"})
	return h
}

var tokenRE = regexp.MustCompile(`name="token" value="([^"]+)"`)

// formToken reads the rollout form's token off the rollouts' page.
func formToken(t *testing.T, h http.Handler) string {
	t.Helper()
	m := tokenRE.FindStringSubmatch(get(t, h, "/rollouts").Body.String())
	if m == nil {
		t.Fatal("the rollouts' page has no form token")
	}
	return m[1]
}

// post sends form to POST /rollouts as the dashboard's own page would
// (Sec-Fetch-Site: same-origin, and its Origin), with headers changing
// that.
func post(h http.Handler, form url.Values, headers map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "http://dash.example/rollouts", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Origin", "http://dash.example")
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range headers {
		if v == "" {
			r.Header.Del(k)
		} else {
			r.Header.Set(k, v)
		}
	}
	return serve(h, r)
}

// footerForm is the form rolling out a footer to every register.
func footerForm(token string) url.Values {
	return url.Values{"token": {token}, "table": {"footers"}, "value.text": {"Open on Sundays"}, "scope": {"all"}, "note": {"Ann at the head office"}}
}

// The rollouts' page has a form per setting table, with an input for each
// of its key columns (but the replica's own) and desired columns, the
// scope, the stages and the threshold; without a RolloutStarter, none,
// and POST is not allowed.
func TestRolloutFormShowsEverySettingTable(t *testing.T) {
	t.Parallel()
	src := &startingSource{rolloutSource: rolloutSource{fakeSource: fakeSource{st: fleet()}}, tables: shopSettings()}
	h := newStarting(t, src)
	rec := get(t, h, "/rollouts")
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /rollouts: %d", rec.Code)
	}
	forms := regexp.MustCompile(`(?s)<form method="post" action="rollouts" data-table="([^"]+)">(.*?)</form>`).FindAllStringSubmatch(body, -1)
	if len(forms) != 2 || forms[0][1] != "footers" || forms[1][1] != "register_settings" {
		t.Fatalf("%d forms, want footers' and register_settings':\n%s", len(forms), body)
	}
	names := func(form string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`<input[^>]* name="([^"]+)"`).FindAllStringSubmatch(form, -1) {
			out = append(out, m[1])
		}
		return out
	}
	if got, want := names(forms[0][2]), []string{"token", "table", "value.text", "scope", "scope", "group", "first", "abort", "after", "note"}; !reflect.DeepEqual(got, want) {
		t.Errorf("the footers' form's inputs: %q, want %q", got, want)
	}
	if got, want := names(forms[1][2]), []string{"token", "table", "key.name", "value.value", "scope", "scope", "group", "first", "abort", "after", "note"}; !reflect.DeepEqual(got, want) {
		t.Errorf("the register settings' form's inputs: %q, want %q", got, want)
	}
	got := text(body)
	for _, s := range []string{"Roll out a new value", "receipt footer", "register setting", "Which register setting name", "The new value text",
		"every replica", "the replicas of the group", "Roll out"} {
		if !strings.Contains(got, s) {
			t.Errorf("the form lacks %q:\n%s", s, got)
		}
	}
	if !strings.Contains(forms[0][2], `value="all" checked`) {
		t.Error("every replica is not the scope chosen by default")
	}
	if !strings.Contains(rec.Header().Get("Content-Security-Policy"), "form-action 'self'") {
		t.Errorf("the policy does not let the form be sent: %q", rec.Header().Get("Content-Security-Policy"))
	}
	// The form sits outside the parts the live updates replace.
	if i, j := strings.Index(body, `class="roll-form"`), strings.Index(body, `<main id="main">`); i < 0 || j < i {
		t.Error("the form is inside the live parts of the page")
	}

	plain := rolloutSource{fakeSource: fakeSource{st: fleet()}}
	h2 := newStarting(t, plain)
	if body := get(t, h2, "/rollouts").Body.String(); strings.Contains(body, "<form") {
		t.Error("a Source that starts no rollout has a form")
	}
	if rec := post(h2, footerForm("x"), nil); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /rollouts without a RolloutStarter: %d, Allow %q", rec.Code, rec.Header().Get("Allow"))
	}
	if rec := serve(h, httptest.NewRequest(http.MethodPut, "/rollouts", nil)); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD, POST" {
		t.Errorf("PUT /rollouts: %d, Allow %q", rec.Code, rec.Header().Get("Allow"))
	}
}

// A form carrying the page's token starts the rollout it describes — the
// values, key, scope and options as typed — and sends the browser to it.
func TestRolloutFormStartsTheRollout(t *testing.T) {
	t.Parallel()
	src := &startingSource{rolloutSource: rolloutSource{fakeSource: fakeSource{st: fleet()}}, tables: shopSettings()}
	h := newStarting(t, src)
	token := formToken(t, h)
	rec := post(h, footerForm(token), nil)
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "rollouts#rollout-42" {
		t.Fatalf("POST /rollouts: %d, Location %q\n%s", rec.Code, rec.Header().Get("Location"), rec.Body)
	}
	form := url.Values{"token": {token}, "table": {"register_settings"}, "key.name": {"brightness"}, "value.value": {"7"},
		"scope": {"group"}, "group": {" shop 1 "}, "first": {"1"}, "abort": {"12.5 %"}, "after": {"2"}, "note": {""}}
	if rec := post(h, form, nil); rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "rollouts#rollout-43" {
		t.Fatalf("POST /rollouts: %d, Location %q\n%s", rec.Code, rec.Header().Get("Location"), rec.Body)
	}
	want := []rollCall{
		{"footers", map[string]string{}, map[string]string{"text": "Open on Sundays"}, server.RolloutScope{All: true},
			server.RolloutOptions{Note: "Ann at the head office"}},
		{"register_settings", map[string]string{"name": "brightness"}, map[string]string{"value": "7"}, server.RolloutScope{Group: "shop 1"},
			server.RolloutOptions{FirstStage: 1, AbortAbovePercent: 12.5, AbortAfter: 2}},
	}
	if got := src.started(); !reflect.DeepEqual(got, want) {
		t.Errorf("rollouts started:\n%+v\nwant\n%+v", got, want)
	}
	// The rollout is where the browser is sent.
	src.rollouts = []server.RolloutStatus{{ID: 42, Table: "footers", Wanted: map[string]any{"text": "Open on Sundays"}, Scope: server.RolloutScope{All: true},
		State: server.RolloutRunning, Replicas: 3, Wished: 3, Counts: map[server.WishState]int{server.WishPending: 3}, CreatedAt: testNow}}
	if body := get(t, h, "/rollouts").Body.String(); !strings.Contains(body, `id="rollout-42"`) {
		t.Error("no element rollout-42 on the rollouts' page")
	}
}

// Behind a load balancer, a form one process's dashboard served is posted
// to another: with the same FormToken, the other starts the rollout; with
// a token of its own, it refuses the form.
func TestRolloutFormServedByOneProcessIsTakenByAnotherSharingItsToken(t *testing.T) {
	t.Parallel()
	src := &startingSource{rolloutSource: rolloutSource{fakeSource: fakeSource{st: fleet()}}, tables: shopSettings()}
	opts := Options{Title: "Shop registers", Names: fleetNames, TableLabels: shopLabels, FormToken: "a secret the processes share"}
	served, _ := newTest(t, src, opts)
	other, _ := newTest(t, src, opts)
	token := formToken(t, served)
	if rec := post(other, footerForm(token), nil); rec.Code != http.StatusSeeOther {
		t.Fatalf("POST /rollouts to another process with the same FormToken: %d\n%s", rec.Code, rec.Body)
	}
	if len(src.started()) != 1 {
		t.Errorf("rollouts started: %+v; want one", src.started())
	}
	opts.FormToken = ""
	alone, _ := newTest(t, src, opts)
	if rec := post(alone, footerForm(token), nil); rec.Code != http.StatusForbidden {
		t.Errorf("POST /rollouts to a process with a token of its own: %d; want 403", rec.Code)
	}
}

// A POST another site's page could have sent is refused 403, saying why,
// and starts nothing: without the page's token, with another's, or sent
// from another origin (as the browser says).
func TestRolloutFormRefusesCrossSiteRequests(t *testing.T) {
	t.Parallel()
	src := &startingSource{rolloutSource: rolloutSource{fakeSource: fakeSource{st: fleet()}}, tables: shopSettings()}
	h := newStarting(t, src)
	token := formToken(t, h)
	if other := formToken(t, newStarting(t, src)); other == token {
		t.Fatal("two dashboards have the same form token")
	}
	noToken := footerForm(token)
	noToken.Del("token")
	for _, c := range []struct {
		name    string
		form    url.Values
		headers map[string]string
		says    string
	}{
		{"no token", noToken, nil, "not one this dashboard served"},
		{"another dashboard's token", footerForm(formToken(t, newStarting(t, src))), nil, "not one this dashboard served"},
		{"a cross-site request", footerForm(token), map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, "sent from https://evil.example"},
		{"a same-site request", footerForm(token), map[string]string{"Sec-Fetch-Site": "same-site", "Origin": ""}, "sent from another site"},
		{"another origin, from an older browser", footerForm(token), map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"}, "sent from https://evil.example"},
	} {
		rec := post(h, c.form, c.headers)
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), c.says) {
			t.Errorf("%s: %d %q", c.name, rec.Code, rec.Body)
		}
	}
	if got := src.started(); len(got) != 0 {
		t.Errorf("refused requests started %d rollouts", len(got))
	}
	// A client saying nothing of where it comes from (a script, curl),
	// with the token, is let through.
	if rec := post(h, footerForm(token), map[string]string{"Sec-Fetch-Site": "", "Origin": ""}); rec.Code != http.StatusSeeOther {
		t.Errorf("without Origin nor Sec-Fetch-Site: %d %q", rec.Code, rec.Body)
	}
}

// A form the dashboard cannot read, or the Source refuses, is shown again
// as filled in, saying what is wrong, with 400; a database failing, with
// 503. What the form and the error hold is escaped.
func TestRolloutFormSaysWhatIsWrong(t *testing.T) {
	t.Parallel()
	src := &startingSource{rolloutSource: rolloutSource{fakeSource: fakeSource{st: fleet()}}, tables: shopSettings()}
	h := newStarting(t, src)
	token := formToken(t, h)
	with := func(change func(url.Values)) url.Values {
		f := footerForm(token)
		change(f)
		return f
	}
	for _, c := range []struct {
		name string
		form url.Values
		says string
	}{
		{"a first stage not a number", with(func(f url.Values) { f.Set("first", "two") }), "the first stage “two” is no count: give a whole number"},
		{"a negative count", with(func(f url.Values) { f.Set("after", "-1") }), "the answers to wait for “-1” is no count"},
		{"a percentage above 100", with(func(f url.Values) { f.Set("abort", "150") }), "“150”, is no percentage: give a number from 0 to 100"},
		{"a group not named", with(func(f url.Values) { f.Set("scope", "group") }), "name the group to roll the value out to"},
		{"no scope", with(func(f url.Values) { f.Del("scope") }), "choose to whom to roll the value out"},
		{"a table unknown", with(func(f url.Values) { f.Set("table", "drawer") }), "“drawer” is no setting table"},
	} {
		rec := post(h, c.form, nil)
		body := rec.Body.String()
		if rec.Code != http.StatusBadRequest || !strings.Contains(text(body), template_escape(c.says)) {
			t.Errorf("%s: %d\n%s", c.name, rec.Code, text(body))
			continue
		}
		if c.form.Get("table") == "footers" && (!strings.Contains(body, `value="Open on Sundays"`) || !strings.Contains(body, `value="Ann at the head office"`) ||
			!strings.Contains(body, `<details class="roll" id="roll-0" open>`)) {
			t.Errorf("%s: the form is not shown again as filled in:\n%s", c.name, body)
		}
	}
	if got := src.started(); len(got) != 0 {
		t.Errorf("bad forms started %d rollouts", len(got))
	}

	// The Source's refusal, escaped, with what was typed.
	src.err = errors.New(`magicsync/server: roll: footers: "<b>x</b>" is too long`)
	rec := post(h, with(func(f url.Values) { f.Set("value.text", `<script>alert(1)</script>`) }), nil)
	body := rec.Body.String()
	if rec.Code != http.StatusBadRequest || !strings.Contains(text(body), "The rollout was not started: magicsync/server: roll: footers: &#34;&lt;b&gt;x&lt;/b&gt;&#34; is too long") {
		t.Errorf("the Source refusing: %d\n%s", rec.Code, text(body))
	}
	if strings.Contains(body, "<b>x") || strings.Contains(body, "<script>alert") || !strings.Contains(body, `value="&lt;script&gt;alert(1)&lt;/script&gt;"`) {
		t.Errorf("what the form and the error hold is not escaped:\n%s", body)
	}

	// The database failing: 503, saying so.
	src.pingErr = errors.New("connection refused")
	src.err = errors.New("magicsync/server: roll: closed pool")
	rec = post(h, footerForm(token), nil)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(text(rec.Body.String()), "the database did not answer (magicsync/server: roll: closed pool)") ||
		rec.Header().Get("Retry-After") == "" {
		t.Errorf("the database failing: %d\n%s", rec.Code, text(rec.Body.String()))
	}
	src.pingErr = nil
	src.err = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	if rec := post(h, footerForm(token), nil); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a network error: %d", rec.Code)
	}
}
