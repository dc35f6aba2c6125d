package dashboard

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// A page is a title and a sequence of parts, each an element with an id:
// the overview's summary and one card per replica, the wish list's head
// and one entry per wish. The page is served whole; its live updates
// (live.go) send only the parts that changed.

// part is one element of a page's main content, rendered.
type part struct {
	ID string
	// Wide parts span the page's width; the others (cards) sit in its
	// grid.
	Wide bool
	HTML template.HTML
}

// view is a page, rendered: what GET serves whole, and what the live
// updates compare.
type view struct {
	// Title is the document's title; Heading names the page under the
	// dashboard's title ("Wishes"), empty for the overview.
	Title, Heading string
	// At is when the page's data was read.
	At time.Time
	// Failed: reading the Source failed, and Parts says so.
	Failed bool
	// Code, when set, is the status the page is answered with in place
	// of 200: 404 for a page of something that does not exist.
	Code  int
	Parts []part
	// Form is served whole above the parts, and neither counts in the
	// version nor is sent by the live updates: a form being filled in
	// must not be replaced under the operator's fingers.
	Form template.HTML
}

// version names what a view shows: equal views have equal versions. The
// time it was read counts to the minute, as the page shows it.
func (v view) version() string {
	s := sha256.New()
	s.Write([]byte(v.Title + "\x00" + v.At.Format("15:04") + "\x00"))
	for _, p := range v.Parts {
		s.Write([]byte(p.ID + "\x00" + string(p.HTML) + "\x00"))
	}
	return hex.EncodeToString(s.Sum(nil)[:12])
}

// builder builds a page's view for a request.
type builder func(*http.Request) view

// render renders one part with the named template of the page's set.
func (h *handler) render(id string, wide bool, name string, data any) part {
	var buf bytes.Buffer
	if err := pageTemplate.ExecuteTemplate(&buf, name, data); err != nil {
		// A template failing on data it was given is a bug; say it in
		// the part rather than lose the page.
		h.log.Error("dashboard: rendering the page", "part", id, "err", err)
		buf.Reset()
		buf.WriteString(`<p class="failed">This part of the page could not be shown: ` + template.HTMLEscapeString(err.Error()) + `</p>`)
	}
	return part{ID: id, Wide: wide, HTML: template.HTML(buf.String())}
}

// failedView is the page when reading the Source failed.
func (h *handler) failedView(v view, err error, since time.Time) view {
	v.Failed = true
	v.Title = "Unavailable · " + h.title
	v.Parts = []part{h.render("failed", true, "failed", struct {
		At, UnreachableSince time.Time
		Err                  string
		Refreshing           bool
	}{v.At, since, err.Error(), h.refresh > 0})}
	return v
}

// pageData is what the page's layout shows.
type pageData struct {
	view
	Dashboard     string
	Version       string
	RefreshMillis int64
	RefreshSecs   string
	Style         template.CSS
	Script        template.JS
}

// pageOf serves the page build builds: whole, or, to an EventSource (a
// request accepting text/event-stream), as live updates.
func (h *handler) pageOf(build builder) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.refresh > 0 && strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			h.live(w, r, build)
			return
		}
		v := build(r)
		h.servePage(w, v, cmp.Or(v.Code, http.StatusOK))
	}
}

// servePage serves the page of v, whole, with code; with 503 (and
// Retry-After) when reading the Source failed.
func (h *handler) servePage(w http.ResponseWriter, v view, code int) {
	d := pageData{view: v, Dashboard: h.title, Version: v.version(), Style: template.CSS(styleSheet), Script: template.JS(refreshJS)}
	if h.refresh > 0 {
		d.RefreshMillis = h.refresh.Milliseconds()
		d.RefreshSecs = strconv.FormatFloat(max(h.refresh.Seconds(), 1), 'f', -1, 64)
	}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, d); err != nil {
		h.log.Error("dashboard: rendering the page", "err", err)
		http.Error(w, "dashboard: rendering the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", contentPolicy)
	// same-origin, not no-referrer: a form posted with no-referrer
	// carries "Origin: null", which the check against cross-site
	// requests cannot tell from another site's. Other sites are sent no
	// referrer either way.
	w.Header().Set("Referrer-Policy", "same-origin")
	if v.Failed {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(h.refresh.Seconds(), 1))))
		code = http.StatusServiceUnavailable
	}
	if code != http.StatusOK {
		w.WriteHeader(code)
	}
	h.write(w, buf.Bytes())
}

// overviewView is the overview: the fleet's summary, then one card per
// replica, those needing attention first.
func (h *handler) overviewView(r *http.Request) view {
	ov, err := h.read(r)
	v := view{Title: h.title, At: ov.At}
	if err != nil {
		return h.failedView(v, err, ov.UnreachableSince)
	}
	if ov.Summary.Attention > 0 {
		v.Title = "(" + strconv.Itoa(ov.Summary.Attention) + ") " + h.title
	}
	_, wishes := h.src.(WishLister)
	v.Parts = append(v.Parts, h.render("summary", true, "summary", summaryData{Overview: ov, W: h.words, Wishes: wishes, Waiting: h.waiting(ov)}))
	if len(ov.Replicas) == 0 {
		v.Parts = append(v.Parts, h.render("empty", true, "empty", nil))
	}
	i := 0
	for i < len(ov.Replicas) && len(ov.Replicas[i].Attention) > 0 {
		i++
	}
	for g, group := range [][]Replica{ov.Replicas[:i], ov.Replicas[i:]} {
		if len(group) == 0 {
			continue
		}
		id, heading := "h-attn", "Needs attention"
		if g == 1 {
			id, heading = "h-calm", "All well"
		}
		v.Parts = append(v.Parts, h.render(id, true, "group", struct {
			Heading string
			N       int
		}{heading, len(group)}))
		for _, rep := range group {
			v.Parts = append(v.Parts, h.render("r-"+rep.ID.String(), false, "card", cardData{Now: ov.At, Replica: rep, W: h.words, Wishes: wishes}))
		}
	}
	return v
}

// summaryData is what the summary shows.
type summaryData struct {
	Overview
	W words
	// Wishes: the Source lists wishes, so the page links to them.
	Wishes bool
	// Waiting totals, per table, the rows written on replicas and not yet
	// sent.
	Waiting []waitingRows
}

// waitingRows is how many rows of one table wait on the replicas to be
// sent: "sales waiting to reach the head office: 2, as of 14:03".
type waitingRows struct {
	Label string
	N     int
	// Stale counts those of N on replicas now offline.
	Stale int
	// AsOf is the oldest of the reports counted.
	AsOf time.Time
}

// waiting totals the rows waiting on the replicas to be sent, per table:
// every record table, and the other tables with rows waiting.
func (h *handler) waiting(ov Overview) []waitingRows {
	var out []waitingRows
	at := map[string]int{}
	for _, r := range ov.Replicas {
		for _, t := range r.Tables {
			if !record(t) || (t.Kind == "setting" && t.Unsent == 0) {
				continue
			}
			i, ok := at[t.Table]
			if !ok {
				i = len(out)
				at[t.Table] = i
				out = append(out, waitingRows{Label: h.words.Label(t.Table)})
			}
			w := &out[i]
			w.N += t.Unsent
			if !r.Online {
				w.Stale += t.Unsent
			}
			if !r.ReportedAt.IsZero() && (w.AsOf.IsZero() || r.ReportedAt.Before(w.AsOf)) {
				w.AsOf = r.ReportedAt
			}
		}
	}
	return out
}

// words are the page's words for the server and the tables.
type words struct {
	// Server is what the page calls the server: "the head office".
	Server string
	labels map[string]string
}

// Label is the word for a table: Options.TableLabels', else its name.
func (w words) Label(table string) string {
	if l := strings.TrimSpace(w.labels[table]); l != "" {
		return l
	}
	return table
}

// Labelled says whether a table has a label of its own.
func (w words) Labelled(table string) bool {
	return strings.TrimSpace(w.labels[table]) != ""
}
