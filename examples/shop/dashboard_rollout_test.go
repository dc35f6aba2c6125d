package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// rolloutView is what the rollouts' page in the browser shows of the
// rollout its address points at (rollouts#rollout-<id>).
type rolloutView struct {
	// Hash is the address's fragment; Found, whether an element has its
	// id; Text, what that rollout reads; State, its class's state.
	Hash  string
	Found bool
	Text  string
	State string
	// Live is what the page says of its live updates; Kept is whether a
	// mark the test left on the page is still there (a reload loses it).
	Live string
	Kept bool
	Page string
	// Width is the viewport's; ScrollWidth, the page's.
	Width, ScrollWidth float64
}

// readRollout reads the rollout the page's address points at, as the
// page shows it now, without loading it again.
func readRollout(ctx context.Context) (rolloutView, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[rolloutView](`(() => {
		const a = location.hash.length > 1 ? document.getElementById(location.hash.slice(1)) : null;
		return {
			Hash: location.hash,
			Found: a !== null,
			Text: a ? a.innerText : "",
			State: a ? ((a.className.match(/\brollout-(running|done|aborted)\b/) || ["", ""])[1]) : "",
			Live: (document.getElementById("live") || {}).innerText || "",
			Kept: window.testMark === true,
			Page: document.body.innerText,
			Width: window.innerWidth,
			ScrollWidth: document.documentElement.scrollWidth,
		};
	})()`))
}

// TestDashboardRolloutInBrowser runs the demo, as main does, with a day
// too slow for any of its own events to happen (no printer switched off,
// no footer wished), and rolls a footer out to every register from the
// head office's rollouts' page in headless Chromium on a phone's screen:
// it fills the form of the receipt footer, to every register, the first
// one before the others, sends it, lands on the new rollout, and watches
// its counts move live, the page never reloaded, from the first register
// wished to all three having carried it out. Screenshots go to $MAGICSYNC_ARTIFACTS, or a
// temporary folder.
func TestDashboardRolloutInBrowser(t *testing.T) {
	t.Parallel()
	path := chromium(t)
	demo := startDemo(t, config{every: time.Hour, poll: testPoll, offlineFor: 4 * time.Second})
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
		chromedp.Navigate(demo.url+"/"),
	); err != nil {
		t.Fatalf("loading %s/: %v", demo.url, err)
	}
	// "Every register" is those the head office knows when the rollout
	// starts: wait for all three.
	watchPage(t, bctx, "the three registers known to the head office", func(v pageView) error {
		_, err := cardsOf(v)
		return err
	})

	const footer = "Rolled out from the dashboard"
	form := `form[data-table="footers"]`
	ctx, cancel = context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(demo.url+"/rollouts"),
		chromedp.WaitVisible(chromedp.CSS(`section.roll-form`)),
		chromedp.Click(chromedp.CSS(`details.roll:has(`+form+`) > summary`)),
		chromedp.WaitVisible(chromedp.CSS(form+` input[name="value.text"]`)),
		chromedp.SendKeys(chromedp.CSS(form+` input[name="value.text"]`), footer),
		chromedp.Click(chromedp.CSS(form+` input[name="scope"][value="all"]`)),
		chromedp.SendKeys(chromedp.CSS(form+` input[name="first"]`), "1"),
		chromedp.SendKeys(chromedp.CSS(form+` input[name="abort"]`), "50"),
		chromedp.SendKeys(chromedp.CSS(form+` input[name="after"]`), "2"),
		chromedp.SendKeys(chromedp.CSS(form+` input[name="note"]`), "the phone's operator"),
	); err != nil {
		t.Fatalf("filling the receipt footer's rollout form: %v", err)
	}
	screenshot(t, bctx, dir, "rollout-form-phone.png")
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(form+` button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`article[id^="rollout-"]`)),
	); err != nil {
		t.Fatalf("sending the rollout form: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.testMark = true`)); err != nil {
		t.Fatal(err)
	}

	// The first register is wished first, the other two once it answered
	// (the head office moves rollouts on every second at most): the page
	// shows the rollout under way, then its counts move, in place.
	var last rolloutView
	var underWay bool
	waitFor(t, "the rollout's counts reading all three registers carried it out", func() error {
		ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		v, err := readRollout(ctx)
		if err != nil {
			return err
		}
		last = v
		text := flat(v.Text)
		if v.State == "running" && strings.Contains(text, "wished to 1 of 3 replicas") {
			underWay = true
		}
		switch {
		case !strings.HasPrefix(v.Hash, "#rollout-") || !v.Found:
			return fmt.Errorf("the form did not lead to its rollout (address #%q); the page reads:\n%s", v.Hash, v.Page)
		case v.Width != 390:
			return fmt.Errorf("the viewport is %v pixels wide, want 390", v.Width)
		case v.ScrollWidth > v.Width:
			return fmt.Errorf("the page is %v pixels wide on a %v-pixel screen: it overflows sideways", v.ScrollWidth, v.Width)
		case !strings.Contains(v.Text, "“"+footer+"”") || !strings.Contains(text, "to every replica") || !strings.Contains(v.Text, "Asked by the phone's operator."):
			return fmt.Errorf("the rollout does not say what was wished, to whom, by whom: %s", v.Text)
		case !strings.Contains(text, "wished to 3 of 3 replicas") || !strings.Contains(text, "3 carried out"):
			return fmt.Errorf("the rollout's counts do not read all three carried out: %s", v.Text)
		case v.State != "done":
			return errors.New("the rollout is not done")
		}
		return nil
	})
	if !underWay {
		t.Error("the rollout was never shown under way, its first register wished before the others: its counts did not move live")
	}
	if !last.Kept || last.Live != "live" {
		t.Errorf("the page was loaded again, or is not live (%q): it should update in place", last.Live)
	}
	screenshot(t, bctx, dir, "rollout-done-phone.png")
}
