package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magicsync/magicsync/server"
)

// changingSource is a Source whose statuses change as the test says.
type changingSource struct {
	mu  sync.Mutex
	st  []server.ReplicaStatus
	err error
}

func (c *changingSource) Status(context.Context) ([]server.ReplicaStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.st), c.err
}

func (c *changingSource) change(f func(st []server.ReplicaStatus) error) {
	c.mu.Lock()
	c.err = f(c.st)
	c.mu.Unlock()
}

var partRE = regexp.MustCompile(`<div class="part[^"]*" id="([^"]+)">`)

// events opens the live updates of target, as the page's EventSource
// does, and returns the events as they come.
func events(t *testing.T, srv *httptest.Server, target string) <-chan liveEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+target, nil)
	req.Header.Set("Accept", "text/event-stream")
	res, err := srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if ct := res.Header.Get("Content-Type"); res.StatusCode != http.StatusOK || ct != "text/event-stream" {
		cancel()
		res.Body.Close()
		t.Fatalf("GET %s as an EventSource: %d %q", target, res.StatusCode, ct)
	}
	out := make(chan liveEvent, 16)
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		res.Body.Close()
		<-done
	})
	go func() {
		defer close(done)
		defer close(out)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<20)
		name := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && name == "change":
				var ev liveEvent
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
					t.Errorf("an event's data: %v: %s", err, line)
					return
				}
				out <- ev
			}
		}
	}()
	return out
}

func next(t *testing.T, evs <-chan liveEvent, what string) liveEvent {
	t.Helper()
	select {
	case ev, ok := <-evs:
		if !ok {
			t.Fatalf("the live updates ended before %s", what)
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("no live update for %s within 10 s", what)
	}
	panic("unreachable")
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// The page's live updates send, when something changes, only the parts
// that changed (and the order of all); nothing while nothing changes; the
// page's own version tells the first connection what the page shows.
func TestLiveUpdatesSendOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	src := &changingSource{st: fleet()}
	h, _ := newTest(t, src, Options{Names: fleetNames, Refresh: 10 * time.Millisecond})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close) // after the live updates end: Close waits for them

	body := get(t, h, "/").Body.String()
	version := regexp.MustCompile(`data-version="([0-9a-f]+)"`).FindStringSubmatch(body)
	if version == nil {
		t.Fatal("the page carries no version")
	}
	var ids []string
	for _, m := range partRE.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	if len(ids) != 1+2+len(fleet()) {
		t.Fatalf("the page's parts: %q", ids)
	}

	evs := events(t, srv, "/?live="+version[1])
	// Register 2 is sent a message more: its card and the summary change,
	// and they alone are sent. (Had anything been sent before the change,
	// it would be read first, with every part.)
	src.change(func(st []server.ReplicaStatus) error {
		st[1].Queued++
		return nil
	})
	ev := next(t, evs, "register 2's queue")
	if !slices.Equal(ev.Order, ids) {
		t.Errorf("order %q, want %q", ev.Order, ids)
	}
	if got := keys(ev.Parts); !slices.Equal(got, []string{"r-" + id(2).String(), "summary"}) {
		t.Errorf("parts sent: %q", got)
	}
	if c := text(ev.Parts["r-"+id(2).String()]); !strings.Contains(c, "Updates waiting to reach it: 3.") || !strings.HasPrefix(ev.Parts["r-"+id(2).String()], `<div class="part" id="r-`) {
		t.Errorf("register 2's card as sent: %s", c)
	}
	if ev.Version == version[1] || ev.Title != "(6) magicsync" || ev.At != "15:09" || ev.Failed {
		t.Errorf("event: %+v", ev)
	}

	// The database goes away: the page says so, in place of the replicas.
	src.change(func([]server.ReplicaStatus) error { return errors.New("server: status: connection refused") })
	ev = next(t, evs, "the failure")
	if !ev.Failed || !slices.Equal(ev.Order, []string{"failed"}) || !strings.Contains(ev.Parts["failed"], "connection refused") {
		t.Errorf("failure: %+v", ev)
	}
	src.change(func([]server.ReplicaStatus) error { return nil })
	if ev = next(t, evs, "the recovery"); ev.Failed || !slices.Equal(ev.Order, ids) || len(ev.Parts) != len(ids) {
		t.Errorf("recovery: failed %v, order %q, %d parts sent", ev.Failed, ev.Order, len(ev.Parts))
	}

	// A page of another version is sent every part at once.
	ev = next(t, events(t, srv, "/?live=stale"), "a stale page")
	if len(ev.Parts) != len(ev.Order) || len(ev.Order) != len(ids) {
		t.Errorf("a stale page was sent %d of %d parts", len(ev.Parts), len(ev.Order))
	}
}

// The wish list is live too: a wish answered moves, and is sent.
func TestLiveWishList(t *testing.T) {
	t.Parallel()
	src := &liveWishes{}
	src.list = fleetWishes()
	h, _ := newTest(t, src, Options{Names: fleetNames, Refresh: 10 * time.Millisecond})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close) // after the live updates end: Close waits for them
	version := regexp.MustCompile(`data-version="([0-9a-f]+)"`).FindStringSubmatch(get(t, h, "/wishes").Body.String())
	evs := events(t, srv, "/wishes?live="+version[1])
	src.mu.Lock()
	src.list.Wishes[1].State, src.list.Wishes[1].Reason = server.WishApplied, ""
	src.mu.Unlock()
	ev := next(t, evs, "register 3's wish carried out")
	w3 := wishID(id(3), "footers", footerKey(id(3)))
	if !strings.Contains(text(ev.Parts[w3]), "carried out") || ev.Order[len(ev.Order)-1] != w3 || len(ev.Parts) != 1 {
		t.Errorf("event: order %q, parts %q", ev.Order, keys(ev.Parts))
	}
}

// liveWishes lists wishes the test changes.
type liveWishes struct {
	mu   sync.Mutex
	list server.WishList
}

func (l *liveWishes) Status(context.Context) ([]server.ReplicaStatus, error) { return fleet(), nil }

func (l *liveWishes) Wishes(context.Context, server.WishScope) (server.WishList, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return server.WishList{Wishes: slices.Clone(l.list.Wishes), Counts: l.list.Counts}, nil
}

// Without JavaScript the page is whole as served, reloads itself with a
// meta refresh, and offers a reload link; its only script is its own.
func TestPageWorksWithoutJavaScript(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"/", "/wishes", "/setting?table=footers"} {
		body := wishPage(t, fakeSourceWithWishes(), target)
		if !strings.Contains(body, `<noscript><meta http-equiv="refresh" content="2"></noscript>`) || !strings.Contains(body, `<a href="" class="reload">reload</a>`) {
			t.Errorf("GET %s: no reload without JavaScript", target)
		}
		if !strings.Contains(body, `<main id="main">`) || len(partRE.FindAllString(body, -1)) == 0 {
			t.Errorf("GET %s: the content is not in the page as served", target)
		}
		if n := strings.Count(body, "<script"); n != 1 {
			t.Errorf("GET %s: %d scripts", target, n)
		}
	}
	c := card(t, wishPage(t, fakeSourceWithWishes(), "/"), id(4))
	if !strings.Contains(text(c), "register 4 online") {
		t.Errorf("card: %s", text(c))
	}
	// Asked as an EventSource with updates off, the page is served whole.
	h, _ := newTest(t, fakeSource{st: fleet()}, Options{Refresh: -1})
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Accept", "text/event-stream")
	if rec := serve(h, req); !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Errorf("with updates off, an EventSource got %q", rec.Header().Get("Content-Type"))
	}
}
