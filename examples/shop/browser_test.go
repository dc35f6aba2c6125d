package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
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
	const missing = "no chromium, chromium-browser or google-chrome in $PATH: the browser test needs one (apt-get install chromium)"
	if ci, ok := inCI(); ok {
		t.Fatalf("%s; CI=%q is set, and under CI the browser test must run, not skip", missing, ci)
	}
	t.Skip(missing + "; skipped, as CI is not set (under CI it fails)")
	return ""
}

// inCI says whether the environment variable CI is set to anything but
// empty, "0" or "false", and to what.
func inCI() (string, bool) {
	v := os.Getenv("CI")
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "0", "false":
		return v, false
	}
	return v, true
}

// stopTB is a testing.TB that records Fatalf and Skip, each of which ends
// the goroutine calling it, as the real ones do.
type stopTB struct {
	testing.TB
	fatal, skip string
}

func (s *stopTB) Helper() {}
func (s *stopTB) Fatalf(format string, args ...any) {
	s.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (s *stopTB) Skip(args ...any) {
	s.skip = fmt.Sprint(args...)
	runtime.Goexit()
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
			fake := &stopTB{TB: t}
			done := make(chan string)
			go func() {
				defer close(done)
				done <- chromium(fake)
			}()
			if path, ok := <-done; ok {
				t.Fatalf("chromium found %q in an empty $PATH", path)
			}
			switch {
			case tc.fail && fake.fatal == "":
				t.Errorf("under CI=%q, chromium did not fail the test (skip: %q)", tc.ci, fake.skip)
			case tc.fail && !strings.Contains(fake.fatal, "under CI the browser test must run"):
				t.Errorf("under CI=%q, the failure does not say why: %q", tc.ci, fake.fatal)
			case !tc.fail && fake.skip == "":
				t.Errorf("with CI=%q, chromium did not skip the test (fatal: %q)", tc.ci, fake.fatal)
			case !tc.fail && !strings.Contains(fake.skip, "apt-get install chromium"):
				t.Errorf("the skip does not say what to install: %q", fake.skip)
			}
			if msg := fake.fatal + fake.skip; !strings.Contains(msg, "no chromium") {
				t.Errorf("the message does not say chromium is missing: %q", msg)
			}
		})
	}
	t.Run("CI unset", func(t *testing.T) {
		t.Setenv("CI", "")
		os.Unsetenv("CI")
		fake := &stopTB{TB: t}
		done := make(chan struct{})
		go func() { defer close(done); chromium(fake) }()
		<-done
		if fake.skip == "" || fake.fatal != "" {
			t.Errorf("with CI unset, chromium did not skip: skip %q, fatal %q", fake.skip, fake.fatal)
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
}

// readPage loads the dashboard in the browser and returns its text and its
// cards, and a screenshot of the whole page saved as name in dir.
func readPage(t *testing.T, bctx context.Context, url, dir, name string) (string, []card) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("section.replicas"))); err != nil {
		t.Fatalf("loading %s: %v", url, err)
	}
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	cards, err := chromedp.Run(ctx, chromedp.Evaluate[[]card](`Array.from(document.querySelectorAll("article.card")).map(a => ({
		Name: a.querySelector("h3").innerText,
		Text: a.innerText,
		Attention: a.classList.contains("attn"),
	}))`))
	if err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the dashboard: %s", path)
	return text, cards
}

// TestDashboardInBrowser runs the demo's head office and registers, and
// loads the dashboard in headless Chromium: it shows the three registers,
// each holding every product, and, once one is unplugged and products are
// added, the one that lags behind, needing attention.
func TestDashboardInBrowser(t *testing.T) {
	path := chromium(t)
	s := startShop(t, true)
	// Started after the shop, the browser is closed before it: its page
	// polls the head office until then.
	bctx := browser(t, path)
	n := len(productNames)
	s.waitHoldings(all(n, n))
	dir := t.TempDir()

	text, cards := readPage(t, bctx, s.ho.url+"/", dir, "dashboard.png")
	if text := flat(text); !strings.Contains(text, "corner shop — head office") || !strings.Contains(text, "3 replicas 3 online 0 need attention") {
		t.Errorf("the page does not show the shop's three registers online:\n%s", text)
	}
	checkCards(t, cards, map[string]string{
		registerNames[0]: fmt.Sprintf("holds %d of %d", n, n),
		registerNames[1]: fmt.Sprintf("holds %d of %d", n, n),
		registerNames[2]: fmt.Sprintf("holds %d of %d", n, n),
	}, "")

	// Unplug register 3 and add two products: it lags behind, and the page
	// says so.
	s.regs[2].online.Store(false)
	for _, p := range []string{"lemon tart", "eclair"} {
		if err := s.ho.addProduct(s.ctx, p, 300); err != nil {
			t.Fatal(err)
		}
	}
	s.waitHoldings(map[string][2]int{
		registerNames[0]: {n + 2, n + 2},
		registerNames[1]: {n + 2, n + 2},
		registerNames[2]: {n, n + 2},
	})
	text, cards = readPage(t, bctx, s.ho.url+"/", dir, "dashboard-unplugged.png")
	if text := flat(text); !strings.Contains(text, "3 replicas 3 online 1 needs attention") || !strings.Contains(text, "needs attention 1 register 3") {
		t.Errorf("the page does not say a register needs attention:\n%s", text)
	}
	checkCards(t, cards, map[string]string{
		registerNames[0]: fmt.Sprintf("holds %d of %d", n+2, n+2),
		registerNames[1]: fmt.Sprintf("holds %d of %d", n+2, n+2),
		registerNames[2]: fmt.Sprintf("holds %d of %d", n, n+2),
	}, registerNames[2])
	if t.Failed() {
		t.Logf("the page's text:\n%s", text)
	}
}

// flat is a page's text with its white space collapsed, in lower case (the
// page's style capitalises some headings).
func flat(text string) string {
	return strings.ToLower(strings.Join(strings.Fields(text), " "))
}

// checkCards checks there is one card per register, showing its products
// held as want says, and needing attention only for the one named.
func checkCards(t *testing.T, cards []card, want map[string]string, attention string) {
	t.Helper()
	if len(cards) != len(want) {
		t.Errorf("the page shows %d registers, want %d: %+v", len(cards), len(want), cards)
	}
	for _, c := range cards {
		holds, ok := want[c.Name]
		if !ok {
			t.Errorf("the page shows a register %q", c.Name)
			continue
		}
		delete(want, c.Name)
		products := ""
		for line := range strings.SplitSeq(c.Text, "\n") {
			if strings.HasPrefix(line, "products") {
				products = line
			}
		}
		if !strings.Contains(products, holds) {
			t.Errorf("%s: its products row reads %q, want %q", c.Name, products, holds)
		}
		if c.Attention != (c.Name == attention) {
			t.Errorf("%s: needs attention %v, text:\n%s", c.Name, c.Attention, c.Text)
		}
		if c.Name == attention && !strings.Contains(c.Text, holds+" products") {
			t.Errorf("%s: does not say why it needs attention (%q):\n%s", c.Name, holds+" products", c.Text)
		}
	}
	for name := range want {
		t.Errorf("the page does not show %s", name)
	}
}
