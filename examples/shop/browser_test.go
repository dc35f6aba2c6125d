package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/testenv"
)

// chromium finds a Chromium or Chrome to drive. Without one it skips the
// test, saying what to install, but under CI (the environment variable CI
// set, as CI services set it) it fails instead: CI must never skip the
// browser test silently.
func chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	testenv.Missing(t, "no chromium, chromium-browser or google-chrome in $PATH: the browser test needs one (apt-get install chromium)", "the browser test")
	return ""
}

// TestChromiumMissingFailsUnderCIAndSkipsOtherwise looks for chromium in an
// empty $PATH: with CI set it must fail the test, never skip it; without,
// it skips, saying what to install.
func TestChromiumMissingFailsUnderCIAndSkipsOtherwise(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, tc := range []struct {
		ci   string
		fail bool
	}{{"true", true}, {"1", true}, {"yes", true}, {"", false}, {"false", false}, {"0", false}} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			var path string
			fake := testenv.Ends(t, func(tb testing.TB) { path = chromium(tb) })
			if path != "" {
				t.Fatalf("chromium found %q in an empty $PATH", path)
			}
			switch {
			case tc.fail && fake.FatalMsg == "":
				t.Errorf("under CI=%q, chromium did not fail the test (skip: %q)", tc.ci, fake.SkipMsg)
			case tc.fail && !strings.Contains(fake.FatalMsg, "under CI the browser test must run"):
				t.Errorf("under CI=%q, the failure does not say why: %q", tc.ci, fake.FatalMsg)
			case !tc.fail && fake.SkipMsg == "":
				t.Errorf("with CI=%q, chromium did not skip the test (fatal: %q)", tc.ci, fake.FatalMsg)
			case !tc.fail && !strings.Contains(fake.SkipMsg, "apt-get install chromium"):
				t.Errorf("the skip does not say what to install: %q", fake.SkipMsg)
			}
			if msg := fake.FatalMsg + fake.SkipMsg; !strings.Contains(msg, "no chromium") {
				t.Errorf("the message does not say chromium is missing: %q", msg)
			}
		})
	}
	t.Run("CI unset", func(t *testing.T) {
		t.Setenv("CI", "")
		os.Unsetenv("CI")
		fake := testenv.Ends(t, func(tb testing.TB) { chromium(tb) })
		if fake.SkipMsg == "" || fake.FatalMsg != "" {
			t.Errorf("with CI unset, chromium did not skip: skip %q, fatal %q", fake.SkipMsg, fake.FatalMsg)
		}
	})
}

// browser starts the headless Chromium at path for the test, closed when
// it ends.
func browser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox, // as root, Chromium runs only without its sandbox
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, stopAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, stopBrowser := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		stopBrowser()
		stopAlloc()
	})
	// Start it now, so that a browser that cannot start says so at once.
	// (On bctx itself: ending the context of the first run would close the
	// tab. Starting is bounded by the allocator's wait for the browser's
	// DevTools address, 20 s.)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return bctx
}

// card is what the dashboard's page shows of one register.
type card struct {
	Name, Text string
	Attention  bool
	// Why lists why it needs attention.
	Why []string
	// Online and Offline say which badge it shows.
	Online, Offline bool
	// Left and Right are where the card's box starts and ends, in CSS
	// pixels from the viewport's left.
	Left, Right float64
}

// pageView is what the page shows, read from the browser.
type pageView struct {
	Text  string
	Cards []card
	// Width is the viewport's; ScrollWidth, the page's, wider when
	// something overflows it horizontally.
	Width, ScrollWidth float64
}

// products is what a card's products row says: "holds N of M".
func (c card) products() (holds, should int, ok bool) {
	m := holdsRE.FindStringSubmatch(c.Text)
	if m == nil {
		return 0, 0, false
	}
	holds, _ = strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
	should, _ = strconv.Atoi(strings.ReplaceAll(m[2], ",", ""))
	return holds, should, true
}

var holdsRE = regexp.MustCompile(`(?m)^products\s+holds ([\d,]+) of ([\d,]+)`)

// readPage reads what the page in the browser shows now, without loading
// it again: the page refreshes itself.
func readPage(ctx context.Context) (pageView, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[pageView](`({
		Text: document.body.innerText,
		Cards: Array.from(document.querySelectorAll("article.card")).map(a => {
			const box = a.getBoundingClientRect();
			return {
				Name: a.querySelector("h3").innerText,
				Text: a.innerText,
				Attention: a.classList.contains("attn"),
				Why: Array.from(a.querySelectorAll(".why li")).map(li => li.innerText),
				Online: a.querySelector(".badge.on") !== null,
				Offline: a.querySelector(".badge.off") !== null,
				Left: box.left, Right: box.right,
			};
		}),
		Width: window.innerWidth,
		ScrollWidth: document.documentElement.scrollWidth,
	})`))
}

// watchPage reads the page in the browser until check accepts what it
// shows, failing the test with check's last complaint after settle.
func watchPage(t *testing.T, bctx context.Context, what string, check func(pageView) error) pageView {
	t.Helper()
	var last pageView
	waitFor(t, what, func() error {
		ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		v, err := readPage(ctx)
		if err != nil {
			return err
		}
		last = v
		if err := check(v); err != nil {
			return fmt.Errorf("%w; the page reads:\n%s", err, v.Text)
		}
		return nil
	})
	return last
}

// artifacts is the folder the browser tests save their screenshots in:
// $MAGICSYNC_ARTIFACTS (made if need be, for CI to keep), else a temporary
// folder of the test's.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MAGICSYNC_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("making the artifacts' folder: %v", err)
	}
	return dir
}

// screenshot saves a screenshot of the whole page as name in dir.
func screenshot(t *testing.T, bctx context.Context, dir, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the dashboard: %s", path)
}

// runningDemo is the demo, run as main runs it, by the test.
type runningDemo struct {
	out syncBuffer
	url string // the dashboard's, as the demo printed it
	// user and password log into the dashboard, as the demo printed them.
	user, password string
}

// startDemo runs the demo's run with c until the test ends, over a fresh
// database, a free port and a temporary folder, and returns once it
// printed the dashboard's address. The test fails if run fails, or does
// not return promptly once stopped.
func startDemo(t *testing.T, c config) *runningDemo {
	t.Helper()
	d := &runningDemo{}
	c.data, c.addr, c.out, c.databaseURL = t.TempDir(), "127.0.0.1:0", &d.out, pgtest.NewDatabase(t)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- run(ctx, c) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-ran:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(settle):
			t.Errorf("run did not return within %v of being stopped", settle)
		}
		t.Logf("the demo printed:\n%s", d.out.String())
	})
	address := regexp.MustCompile(`dashboard at (http://\S+)/\n`)
	login := regexp.MustCompile(`dashboard login: user (\S+), password (\S+)\n`)
	waitFor(t, "the demo printing the dashboard's address and login", func() error {
		select {
		case err := <-ran:
			t.Fatalf("run returned before printing the dashboard's address: %v\n%s", err, d.out.String())
		default:
		}
		m, l := address.FindStringSubmatch(d.out.String()), login.FindStringSubmatch(d.out.String())
		if m == nil || l == nil {
			return errors.New("not printed yet")
		}
		d.url, d.user, d.password = m[1], l[1], l[2]
		return nil
	})
	return d
}

// cardsOf checks the page shows the three registers, each with its
// products held of those it should hold, and returns their cards by name.
func cardsOf(v pageView) (map[string]card, error) {
	if len(v.Cards) != len(registerNames) {
		return nil, fmt.Errorf("%d registers shown, want %d", len(v.Cards), len(registerNames))
	}
	byName := map[string]card{}
	for _, c := range v.Cards {
		if !slices.Contains(registerNames, c.Name) {
			return nil, fmt.Errorf("a register %q shown", c.Name)
		}
		if _, _, ok := c.products(); !ok {
			return nil, fmt.Errorf("%s: no \"products holds N of M\" row:\n%s", c.Name, c.Text)
		}
		byName[c.Name] = c
	}
	return byName, nil
}

// TestDashboardInBrowser runs the demo, as main does, with a fast day, and
// watches its dashboard in headless Chromium as the page refreshes itself:
// it shows the three registers and the products each holds of those it
// should; register 3 offline, needing attention and lagging behind once
// unplugged; online again once plugged back in. On a phone's screen it
// shows the three registers without overflowing sideways. Screenshots of
// each go to $MAGICSYNC_ARTIFACTS, or a temporary folder.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	path := chromium(t)
	demo := startDemo(t, config{every: 250 * time.Millisecond, poll: testPoll, offlineFor: 4 * time.Second})
	// Started after the demo, the browser is closed before it: its page
	// polls the head office until then.
	bctx := browser(t, path)
	dir := artifacts(t)
	// The browser logs in as an operator would: every request it sends the
	// head office carries the user and password the demo printed.
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(demo.user+":"+demo.password))
	if _, err := chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}}); err != nil {
		t.Fatal(err)
	}
	load := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, chromedp.Navigate(demo.url+"/"), chromedp.WaitVisible(chromedp.CSS("article.card"))); err != nil {
			t.Fatalf("loading %s/: %v", demo.url, err)
		}
	}
	load()

	watchPage(t, bctx, "the three registers, with the products they hold", func(v pageView) error {
		if !strings.Contains(flat(v.Text), "corner shop — head office") {
			return errors.New("no title")
		}
		_, err := cardsOf(v)
		return err
	})
	screenshot(t, bctx, dir, "dashboard.png")

	// Register 3 is unplugged at the day's sixth event, and a product
	// added at the eighth: the page shows it offline, needing attention,
	// and holding fewer products than it should.
	watchPage(t, bctx, "register 3 shown offline, lagging behind", func(v pageView) error {
		cards, err := cardsOf(v)
		if err != nil {
			return err
		}
		c := cards[registerNames[2]]
		holds, should, _ := c.products()
		switch {
		case c.Online || !c.Offline:
			return errors.New("register 3 is not shown offline")
		case !c.Attention || !slices.Contains(c.Why, "offline"):
			return fmt.Errorf("register 3 is not shown needing attention for being offline: %q", c.Why)
		case holds >= should:
			return fmt.Errorf("register 3 holds %d of %d products", holds, should)
		case !slices.Contains(c.Why, fmt.Sprintf("holds %d of %d products", holds, should)):
			return fmt.Errorf("register 3's attention does not say what it lacks: %q", c.Why)
		case !strings.Contains(flat(v.Text), "3 replicas, 2 online"):
			return errors.New("the summary does not count two registers online")
		}
		return nil
	})
	screenshot(t, bctx, dir, "dashboard-unplugged.png")

	// Plugged back in: online again, as the other two.
	watchPage(t, bctx, "register 3 online again", func(v pageView) error {
		if !strings.Contains(demo.out.String(), "register 3 plugged back in") {
			return errors.New("the demo has not plugged register 3 back in yet")
		}
		cards, err := cardsOf(v)
		if err != nil {
			return err
		}
		for _, name := range registerNames {
			if c := cards[name]; !c.Online || c.Offline || slices.Contains(c.Why, "offline") {
				return fmt.Errorf("%s is not shown online", name)
			}
		}
		if !strings.Contains(flat(v.Text), "3 replicas, 3 online") {
			return errors.New("the summary does not count three registers online")
		}
		return nil
	})
	screenshot(t, bctx, dir, "dashboard-plugged-back.png")

	// On a phone: every register shown, the page as wide as the screen.
	ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile, chromedp.EmulatePortrait)); err != nil {
		t.Fatal(err)
	}
	load()
	watchPage(t, bctx, "the three registers on a phone's screen", func(v pageView) error {
		if v.Width != 390 {
			return fmt.Errorf("the viewport is %v pixels wide, want 390", v.Width)
		}
		if _, err := cardsOf(v); err != nil {
			return err
		}
		if v.ScrollWidth > v.Width {
			return fmt.Errorf("the page is %v pixels wide on a %v-pixel screen: it overflows sideways", v.ScrollWidth, v.Width)
		}
		for _, c := range v.Cards {
			if c.Left < 0 || c.Right > v.Width {
				return fmt.Errorf("%s spans %v to %v pixels, off the %v-pixel screen", c.Name, c.Left, c.Right, v.Width)
			}
		}
		return nil
	})
	screenshot(t, bctx, dir, "dashboard-phone.png")
}

// flat is a page's text with its white space collapsed, in lower case (the
// page's style capitalises some headings).
func flat(text string) string {
	return strings.ToLower(strings.Join(strings.Fields(text), " "))
}
