package dashboard

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/server"
)

// wishSource is a fake Source that also lists wishes and, with reported
// set, says what the replicas report: it records the scopes it was asked.
type wishSource struct {
	fakeSource
	list     server.WishList
	wishErr  error
	reported map[string][]Setting

	mu     sync.Mutex
	scopes []server.WishScope
	tables []string
}

func (w *wishSource) Wishes(_ context.Context, scope server.WishScope) (server.WishList, error) {
	w.mu.Lock()
	w.scopes = append(w.scopes, scope)
	w.mu.Unlock()
	out := server.WishList{Counts: w.list.Counts, More: w.list.More}
	for _, s := range w.list.Wishes {
		if (scope.Replica == uuid.Nil || s.Replica == scope.Replica) && (scope.Table == "" || s.Table == scope.Table) {
			out.Wishes = append(out.Wishes, s)
		}
	}
	return out, w.wishErr
}

// reportingSource is a wishSource that is a SettingReader too.
type reportingSource struct{ *wishSource }

func (r reportingSource) Settings(_ context.Context, table string) ([]Setting, error) {
	r.mu.Lock()
	r.tables = append(r.tables, table)
	r.mu.Unlock()
	return r.reported[table], nil
}

// footerKey is the key of a register's footer row: its register's id.
func footerKey(replica uuid.UUID) magicsync.Key {
	return magicsync.Key(codec.KeyOfValues(wire.TextValue(replica.String())))
}

// fleetWishes are wishes in every state, listed in an order the wish list
// must change: of the footers of registers 1 to 4 and kiosk 6, and of
// register 1's brightness.
func fleetWishes() server.WishList {
	w := func(n int, table string, key magicsync.Key, state server.WishState, wanted map[string]any, reason string, wishedAgo time.Duration) server.WishSummary {
		s := server.WishSummary{Replica: id(n), Table: table, Key: key, Wanted: wanted, Number: uint64(n), State: state, Reason: reason,
			Note: "the head office's operator", WishedAt: testNow.Add(-wishedAgo)}
		if state != server.WishPending {
			s.AnsweredAt = s.WishedAt.Add(time.Minute)
		}
		return s
	}
	text := func(s string) map[string]any { return map[string]any{"text": s} }
	return server.WishList{
		Wishes: []server.WishSummary{
			w(1, "register_settings", textKey("brightness"), server.WishApplied, map[string]any{"name": "brightness", "value": "7"}, "", 3*time.Hour),
			w(3, "footers", footerKey(id(3)), server.WishWaiting, text("Open on Sundays"), "the printer is off", 5*time.Minute),
			w(2, "footers", footerKey(id(2)), server.WishPending, text("Open on Sundays"), "", time.Minute),
			w(4, "footers", footerKey(id(4)), server.WishWaiting, text("Open on Sundays"), "the printer is off", 50*time.Minute),
			w(6, "footers", footerKey(id(6)), server.WishSuperseded, text("Open on Sundays"), "", 20*time.Minute),
			w(1, "footers", footerKey(id(1)), server.WishRefused, text("Thank you for shopping at the corner shop, see you soon!"),
				`"Thank you for shopping at the corner shop, see you soon!" is longer than the printer's 40 characters`, 10*time.Minute),
		},
		Counts: map[server.WishState]int{server.WishApplied: 1, server.WishWaiting: 2, server.WishPending: 1, server.WishSuperseded: 1, server.WishRefused: 1},
	}
}

// footersReported is what the registers report of their footers.
func footersReported() map[string][]Setting {
	return map[string][]Setting{"footers": {
		{Replica: id(1), Key: footerKey(id(1)), Values: map[string]any{"text": "Fresh bread every morning"}},
		{Replica: id(3), Key: footerKey(id(3)), Values: map[string]any{"text": "Try our new lemon tart"}},
		{Replica: id(6), Key: footerKey(id(6)), Values: map[string]any{"text": "Ask us about the loyalty card"}},
		{Replica: id(10), Key: footerKey(id(10)), Values: map[string]any{"text": "Closed on Monday"}},
	}}
}

var shopLabels = map[string]string{"footers": "receipt footer", "receipts": "sales", "register_settings": "register setting"}

// wishPage serves GET target from src with the shop's labels, and returns
// the page's body.
func wishPage(t *testing.T, src Source, target string) string {
	t.Helper()
	h, _ := newTest(t, src, Options{Title: "Shop registers", Names: fleetNames, TableLabels: shopLabels, ServerName: "the head office"})
	rec := get(t, h, target)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", target, rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// entries cuts the wish list's entries out of a page, in order.
func entries(body string) []string {
	var out []string
	for _, part := range strings.Split(body, `<article class="wish-entry`)[1:] {
		out = append(out, text(`<article class="wish-entry`+part[:strings.Index(part, "</article>")]))
	}
	return out
}

// The wish list shows those needing attention first — refused, then
// waiting (the one waiting longest first), then superseded — then those
// on their way and carried out; each with the value wished, the value
// reported, where it stands and why, who asked, and when.
func TestWishListShowsThoseNeedingAttentionFirst(t *testing.T) {
	t.Parallel()
	src := reportingSource{&wishSource{fakeSource: fakeSource{st: fleet()}, list: fleetWishes(), reported: footersReported()}}
	body := wishPage(t, src, "/wishes")
	got := entries(body)
	want := []string{"register 1: receipt footer refused", "register 4: receipt footer waiting", "register 3: receipt footer waiting",
		"kiosk <i>6</i>: receipt footer superseded", "register 2: receipt footer on its way", `register 1: register setting ("brightness") carried out`}
	if len(got) != len(want) {
		t.Fatalf("%d wishes listed, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], template_escape(want[i])) {
			t.Errorf("wish %d reads %q, want it to begin %q", i, got[i], want[i])
		}
	}
	refused := got[0]
	for _, s := range []string{
		"Wished “Thank you for shopping at the corner shop, see you soon!”",
		"Reported “Fresh bread every morning”",
		"Why &#34;Thank you for shopping at the corner shop, see you soon!&#34; is longer than the printer&#39;s 40 characters",
		"Asked by the head office&#39;s operator",
		"Wished at 14:59 (10 min ago)", "Answered at 15:00",
	} {
		if !strings.Contains(refused, s) {
			t.Errorf("the refused wish lacks %q:\n%s", s, refused)
		}
	}
	if waiting := got[2]; !strings.Contains(waiting, "Why the printer is off") || !strings.Contains(waiting, "Reported “Try our new lemon tart”") {
		t.Errorf("the waiting wish: %s", waiting)
	}
	if pending := got[4]; !strings.Contains(pending, "Reported not reported yet") || !strings.Contains(pending, "Answered at not yet") {
		t.Errorf("the wish on its way: %s", pending)
	}
	if applied := got[5]; !strings.Contains(applied, "Wished name: “brightness”, value: “7”") {
		t.Errorf("the wish carried out: %s", applied)
	}
	head := text(body[strings.Index(body, `class="wishes-head"`):strings.Index(body, `<article class="wish-entry`)])
	for _, s := range []string{
		"1 refused, 2 waiting, 1 superseded, 1 on its way, 1 carried out. Those needing attention come first.",
		"Refused: the replica will not carry the wish out, and the reason says why. Wish a value it takes, or withdraw the wish.",
		"Waiting: the replica will carry the wish out once what the reason names is back",
		"Superseded: the setting was changed on the replica itself first, and that value stands. Wish again if yours should win.",
	} {
		if !strings.Contains(head, s) {
			t.Errorf("the wish list's head lacks %q:\n%s", s, head)
		}
	}
	// One Wishes read of the whole fleet; one read of what is reported per
	// setting table listed.
	if !slices.Equal(src.scopes, []server.WishScope{{}}) {
		t.Errorf("scopes asked: %+v", src.scopes)
	}
	if slices.Sort(src.tables); !slices.Equal(src.tables, []string{"footers", "register_settings"}) {
		t.Errorf("tables asked what is reported: %q", src.tables)
	}
	// The engineer's detail is one click away.
	if !regexp.MustCompile(`(?s)<details><summary>Details</summary>.*<dt>Table</dt><dd><code>footers</code>.*#1, refused`).MatchString(body) {
		t.Error("a wish's details do not name its table and number")
	}
}

// The wish list's scope comes from the query; one that names no replica
// is said so, and nothing is read.
func TestWishListScopeFromTheQuery(t *testing.T) {
	t.Parallel()
	src := &wishSource{fakeSource: fakeSource{st: fleet()}, list: server.WishList{Counts: map[server.WishState]int{}}}
	body := text(wishPage(t, src, "/wishes?replica="+id(2).String()+"&table=footers"))
	if !strings.Contains(body, "Wishes of register 2, of the setting receipt footer") || !strings.Contains(body, "No wishes of register 2, of the setting receipt footer yet.") {
		t.Errorf("scoped wish list: %s", body)
	}
	if !slices.Equal(src.scopes, []server.WishScope{{Replica: id(2), Table: "footers"}}) {
		t.Errorf("scopes asked: %+v", src.scopes)
	}
	body = text(wishPage(t, src, "/wishes?replica=%3Cb%3Enope"))
	if !strings.Contains(body, "“&lt;b&gt;nope” is no replica id") || len(src.scopes) != 1 {
		t.Errorf("a bad replica id: %s (scopes asked %+v)", body, src.scopes)
	}
	// A card links to its replica's wishes.
	if c := card(t, wishPage(t, fakeSourceWithWishes(), "/"), id(4)); !strings.Contains(c, `href="wishes?replica=`+id(4).String()+`"`) {
		t.Errorf("register 4's card does not link to its wishes:\n%s", c)
	}
}

func fakeSourceWithWishes() Source {
	return &wishSource{fakeSource: fakeSource{st: fleet()}, list: fleetWishes()}
}

// A Source that lists no wishes: the wish list says so, and cards link
// nowhere.
func TestWishListOfASourceWithoutWishes(t *testing.T) {
	t.Parallel()
	body := wishPage(t, fakeSource{st: fleet()}, "/wishes")
	if !strings.Contains(text(body), "This dashboard is not told of wishes") {
		t.Errorf("wish list: %s", text(body))
	}
	if c := card(t, wishPage(t, fakeSource{st: fleet()}, "/"), id(4)); strings.Contains(c, "wishes?replica") || !strings.Contains(text(c), "Wishes: 1 refused · 1 waiting · 3 carried out.") {
		t.Errorf("register 4's card: %s", text(c))
	}
}

// A wish list the Source fails to read answers 503 and says why.
func TestWishListUnavailable(t *testing.T) {
	t.Parallel()
	src := &wishSource{fakeSource: fakeSource{st: fleet()}, wishErr: errors.New("magicsync/server: wishes: connection refused")}
	h, logs := newTest(t, src, Options{})
	rec := get(t, h, "/wishes")
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "reading the wishes: magicsync/server: wishes: connection refused") {
		t.Errorf("GET /wishes: %d\n%s", rec.Code, text(rec.Body.String()))
	}
	if !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("not logged: %s", logs)
	}
}

// settingRows cuts a setting page's rows out, as text.
func settingRows(body string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?s)<tr class="[^"]*"><th scope="row">.*?</tr>`).FindAllString(body, -1) {
		out = append(out, text(m))
	}
	return out
}

// A setting's page shows, side by side, what every replica reports and
// what was wished of it, and where the wish stands.
func TestSettingPageShowsReportedBesideWished(t *testing.T) {
	t.Parallel()
	src := reportingSource{&wishSource{fakeSource: fakeSource{st: fleet()}, list: fleetWishes(), reported: footersReported()}}
	body := wishPage(t, src, "/setting?table=footers")
	if !strings.Contains(text(body), "receipt footer: what each replica reports, and what was wished") {
		t.Errorf("setting page: %s", text(body))
	}
	rows := settingRows(body)
	want := []string{
		"kiosk &lt;i&gt;6&lt;/i&gt;", "register 1", "register 2", "register 3", "register 4", "register 10",
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(want), strings.Join(rows, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(rows[i], w+" “") && !strings.HasPrefix(rows[i], w+" not") {
			t.Errorf("row %d: %q, want it to begin %q", i, rows[i], w)
		}
	}
	for i, s := range map[int]string{
		0: "Ask us about the loyalty card” “Open on Sundays” superseded",
		1: "“Fresh bread every morning” “Thank you for shopping at the corner shop, see you soon!” refused &#34;Thank you",
		2: "not reported yet “Open on Sundays” on its way (asked by the head office&#39;s operator)",
		3: "“Try our new lemon tart” “Open on Sundays” waiting the printer is off",
		5: "“Closed on Monday” nothing wished —",
	} {
		if !strings.Contains(rows[i], s) {
			t.Errorf("row %d lacks %q: %s", i, s, rows[i])
		}
	}
	if !slices.Equal(src.scopes, []server.WishScope{{Table: "footers"}}) || !slices.Equal(src.tables, []string{"footers"}) {
		t.Errorf("asked %+v and %q", src.scopes, src.tables)
	}
	// The cells say what they are on a phone, where the table's head is
	// hidden.
	if !strings.Contains(body, `<td data-label="Reports">`) {
		t.Error("no labelled cells")
	}

	// Without a SettingReader, only what was wished, and a word why.
	plain := &wishSource{fakeSource: fakeSource{st: fleet()}, list: fleetWishes()}
	body = wishPage(t, plain, "/setting?table=footers")
	if rows := settingRows(body); len(rows) != 5 || !strings.HasPrefix(rows[1], "register 1 not known here “Thank you") {
		t.Errorf("rows without a SettingReader:\n%s", strings.Join(rows, "\n"))
	}
	if !strings.Contains(text(body), "The dashboard is not told what the replicas report") {
		t.Error("the page does not say why nothing reported is shown")
	}
	// A setting table's row on a card links to its page.
	st := fleet()[:1]
	st[0].Tables = append(st[0].Tables, server.TableStatus{Table: "footers", Mirror: magicsync.Setting, Filed: 1})
	c := card(t, wishPage(t, &wishSource{fakeSource: fakeSource{st: st}}, "/"), id(1))
	if !strings.Contains(c, `<a class="to-setting" href="setting?table=footers">reported and wished</a>`) || !strings.Contains(text(c), "receipt footer") {
		t.Errorf("card: %s", c)
	}
}

// Everything the wish pages show of the Source is escaped.
func TestWishPagesEscapeWhatTheyShow(t *testing.T) {
	t.Parallel()
	evil := `<script>alert(1)</script>`
	list := server.WishList{Wishes: []server.WishSummary{{Replica: id(1), Table: evilTable, Key: textKey(evil), Wanted: map[string]any{evil: evil},
		State: server.WishRefused, Reason: evilReason, Note: evil, WishedAt: testNow}}, Counts: map[server.WishState]int{server.WishRefused: 1}}
	src := reportingSource{&wishSource{fakeSource: fakeSource{st: fleet()}, list: list,
		reported: map[string][]Setting{evilTable: {{Replica: id(1), Key: textKey(evil), Values: map[string]any{"x": evil}}}}}}
	for _, target := range []string{"/wishes", "/setting?table=" + evilTable, "/wishes?table=" + evil} {
		body := wishPage(t, src, target)
		for _, raw := range []string{evilTable, evilReason, evil, `<img`} {
			if strings.Contains(body, raw) {
				t.Errorf("GET %s carries %q unescaped", target, raw)
			}
		}
		if n := strings.Count(body, "<script"); n != 1 {
			t.Errorf("GET %s: %d <script elements, want only the page's own", target, n)
		}
	}
}

// Build names are shown short, the full one in the details; tables by
// their labels, their names in the details.
func TestPlainWordsForBuildsAndTables(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"github.com/acme/shop@v1.4.2+1a2b3c4d5e6f": "shop v1.4.2 1a2b3c4",
		"github.com/acme/shop@(devel)":             "shop (devel)",
		"shop 1.4.2 (a1b2c3d)":                     "shop 1.4.2 (a1b2c3d)",
		"unknown":                                  "unknown",
	} {
		if got := shortBuild(in); got != want {
			t.Errorf("shortBuild(%q) = %q, want %q", in, got, want)
		}
	}
	st := fleet()[:2]
	st[0].Build = "github.com/acme/shop@v1.4.2+1a2b3c4d5e6f"
	st[0].ReportedAt = testNow.Add(-6 * time.Minute)
	st[1].ReportedAt = testNow.Add(-6 * time.Minute)
	body := wishPage(t, fakeSource{st: st}, "/")
	c := text(card(t, body, id(1)))
	for _, s := range []string{"Software: shop v1.4.2 1a2b3c4.", "Build github.com/acme/shop@v1.4.2&#43;1a2b3c4d5e6f",
		"sales waiting to reach the head office: 0, as of 15:03 · received: 1,204", "sales table receipts (undeclared)"} {
		if !strings.Contains(c, s) {
			t.Errorf("card lacks %q: %s", s, c)
		}
	}
	if !strings.Contains(text(body), "sales waiting to reach the head office: 3, as of 15:03.") {
		t.Errorf("summary: %s", text(body))
	}
	if strings.Contains(c, "#1042") && !strings.Contains(c, "Details") {
		t.Error("the message number is shown outside the details")
	}
}

// A wish whose deadline passed shows expired, with what that asks of the
// operator, and its deadline.
func TestWishListShowsAWishExpired(t *testing.T) {
	t.Parallel()
	reg := uuid.MustParse("00000000-0000-4000-8000-000000000002")
	src := &wishSource{fakeSource: fakeSource{st: fleet()}, list: server.WishList{
		Counts: map[server.WishState]int{server.WishExpired: 1},
		Wishes: []server.WishSummary{{Replica: reg, Table: "footers", Key: magicsync.Key("k"), Number: 1, State: server.WishExpired,
			Reason: "its deadline passed before the replica carried it out", Wanted: map[string]any{"text": "Closed Monday"},
			WishedAt: testNow.Add(-time.Hour), AnsweredAt: testNow, Deadline: testNow}}}}
	got := text(wishPage(t, src, "/wishes"))
	for _, s := range []string{"1 expired", "Expired: the wish's deadline passed before the replica carried it out", "Why its deadline passed"} {
		if !strings.Contains(got, s) {
			t.Errorf("the page does not say %q:\n%s", s, got)
		}
	}
}
