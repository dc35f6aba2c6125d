package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// wishEntry is what the wish list in the browser shows of one wish.
type wishEntry struct {
	// Title is "register 2: footers" (or the table's label); Table, the
	// setting's table; State the state its class names ("waiting"); Text
	// all it reads.
	Title, Table, State, Text string
}

// wishListView is what the wish list in the browser shows.
type wishListView struct {
	Entries []wishEntry
	// Live is what the page says of its live updates; Kept is whether a
	// mark the test left on the page is still there (a reload loses it).
	Live string
	Kept bool
	Text string
	// Width is the viewport's; ScrollWidth, the page's.
	Width, ScrollWidth float64
}

// readWishList reads what the wish list in the browser shows now, without
// loading it again: it updates itself.
func readWishList(ctx context.Context) (wishListView, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[wishListView](`({
		Entries: Array.from(document.querySelectorAll("article.wish-entry")).map(a => ({
			Title: a.querySelector("h3").innerText,
			Table: a.dataset.table || "",
			State: (a.className.match(/\bwish-(refused|waiting|superseded|pending|applied)\b/) || ["", ""])[1],
			Text: a.innerText,
		})),
		Live: (document.getElementById("live") || {}).innerText || "",
		Kept: window.testMark === true,
		Text: document.body.innerText,
		Width: window.innerWidth,
		ScrollWidth: document.documentElement.scrollWidth,
	})`))
}

// watchWishList reads the wish list until check accepts it (and it fits
// the phone's screen), failing the test with check's last complaint after
// settle.
func watchWishList(t *testing.T, bctx context.Context, what string, check func(wishListView) error) wishListView {
	t.Helper()
	var last wishListView
	waitFor(t, what, func() error {
		ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		v, err := readWishList(ctx)
		if err != nil {
			return err
		}
		last = v
		switch {
		case v.Width != 390:
			return fmt.Errorf("the viewport is %v pixels wide, want 390", v.Width)
		case v.ScrollWidth > v.Width:
			return fmt.Errorf("the page is %v pixels wide on a %v-pixel screen: it overflows sideways", v.ScrollWidth, v.Width)
		}
		if err := check(v); err != nil {
			return fmt.Errorf("%w; the page reads:\n%s", err, v.Text)
		}
		return nil
	})
	return last
}

// footerOf finds the wish list's entry of a register's footer.
func (v wishListView) footerOf(register string) (wishEntry, int, bool) {
	for i, e := range v.Entries {
		if strings.HasPrefix(e.Title, register+": ") && e.Table == "footers" {
			return e, i, true
		}
	}
	return wishEntry{}, -1, false
}

// TestDashboardWishesInBrowser runs the demo, as main does, and follows
// its head office's wish list in headless Chromium on a phone's screen, as
// the page updates itself (never reloaded): register 2's new footer
// waiting, because "the printer is off"; carried out once the printer is
// back on; then register 1 refusing a footer too long for its printer,
// with its reason, listed first. Screenshots of each go to
// $MAGICSYNC_ARTIFACTS, or a temporary folder; their paths are logged.
func TestDashboardWishesInBrowser(t *testing.T) {
	t.Parallel()
	path := chromium(t)
	// A day slow enough that register 2's wish waits for a few seconds
	// (its printer is switched back on four events after the wish), more
	// than the page's 2 s between updates.
	demo := startDemo(t, config{every: 1500 * time.Millisecond, poll: testPoll, offlineFor: 4 * time.Second})
	bctx := browser(t, path)
	dir := artifacts(t)
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(demo.user+":"+demo.password))
	ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile, chromedp.EmulatePortrait),
		chromedp.Navigate(demo.url+"/wishes"),
		chromedp.WaitVisible(chromedp.CSS("section.wishes-head")),
	); err != nil {
		t.Fatalf("loading %s/wishes: %v", demo.url, err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.testMark = true`)); err != nil {
		t.Fatal(err)
	}

	// (The page's style capitalises the labels, and innerText with them.)
	footer := regexp.MustCompile(`(?is)wished\s+“[^”]+”`)
	watchWishList(t, bctx, "register 2's footer waiting while its printer is off", func(v wishListView) error {
		e, _, ok := v.footerOf("register 2")
		switch {
		case !ok:
			return errors.New("no wish of register 2's footer listed")
		case e.State != "waiting":
			return fmt.Errorf("register 2's footer is %q", e.State)
		case !strings.Contains(e.Text, "the printer is off"):
			return fmt.Errorf("register 2's waiting footer does not say why: %s", e.Text)
		case !footer.MatchString(e.Text) || !strings.Contains(e.Text, "the head office's operator"):
			return fmt.Errorf("register 2's waiting footer does not say what was wished, and by whom: %s", e.Text)
		}
		return nil
	})
	screenshot(t, bctx, dir, "wishes-waiting-phone.png")

	v := watchWishList(t, bctx, "register 2's footer carried out once its printer is back on", func(v wishListView) error {
		if !strings.Contains(demo.out.String(), "register 2's printer is back on") {
			return errors.New("the demo has not switched register 2's printer back on yet")
		}
		e, _, ok := v.footerOf("register 2")
		switch {
		case !ok:
			return errors.New("no wish of register 2's footer listed")
		case e.State != "applied" || !strings.Contains(strings.ToLower(e.Text), "carried out"):
			return fmt.Errorf("register 2's footer is %q", e.State)
		}
		return nil
	})
	if !v.Kept {
		t.Error("the page was loaded again: it should update in place")
	}
	screenshot(t, bctx, dir, "wishes-applied-phone.png")

	v = watchWishList(t, bctx, "register 1 refusing a footer too long for its printer, listed first", func(v wishListView) error {
		e, i, ok := v.footerOf("register 1")
		switch {
		case !ok:
			return errors.New("no wish of register 1's footer listed")
		case e.State != "refused":
			return fmt.Errorf("register 1's footer is %q", e.State)
		case !strings.Contains(e.Text, tooLongFooter) || !strings.Contains(e.Text, "is longer than the printer's 40 characters"):
			return fmt.Errorf("register 1's refused footer does not say what was wished and why it was refused: %s", e.Text)
		case i != 0:
			return fmt.Errorf("register 1's refused footer is listed %d-th, not first", i+1)
		case !strings.Contains(v.Text, "Refused: the replica will not carry the wish out"):
			return errors.New("the wish list does not explain a refusal")
		}
		return nil
	})
	if !v.Kept || v.Live != "live" {
		t.Errorf("the page was loaded again, or is not live (%q)", v.Live)
	}
	screenshot(t, bctx, dir, "wishes-refused-phone.png")
}
