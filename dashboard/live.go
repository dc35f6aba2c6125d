package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// The page's live updates: the page's script opens an EventSource on the
// page's own address, and the dashboard answers it with server-sent
// events. Every Options.Refresh it reads what the page shows (as GET
// does: one Status, and for the wish list and settings' pages one Wishes)
// and renders it; when something changed since the last event, it sends
// one, carrying only the parts that changed and the order of them all.
// Nothing is sent while nothing changes, and a page left in a background
// tab closes its EventSource, so that it reads nothing.

// liveEvent is one event of the live updates.
type liveEvent struct {
	// Title is the document's title; At, when the data was read, as the
	// page shows it ("14:03"), and its full stamp.
	Title string `json:"title"`
	At    string `json:"at"`
	Stamp string `json:"stamp"`
	// Failed: the Source could not be read (the parts say so).
	Failed bool `json:"failed"`
	// Version names what the page now shows: the EventSource, opened
	// again, passes it to be sent only what changed since.
	Version string `json:"version"`
	// Order lists every part's id, in order; Parts holds the parts that
	// changed (the element, whole), by id. A part in Order and not in
	// Parts is unchanged: the page keeps it.
	Order []string          `json:"order"`
	Parts map[string]string `json:"parts"`
}

// live answers an EventSource with the page's changes, until the client
// goes away. The request's "live" parameter is the version of the page
// the client shows: when it is the current one, the first event waits for
// a change.
func (h *handler) live(w http.ResponseWriter, r *http.Request, build builder) {
	// The first look comes before the stream opens: a client that saw it
	// open knows that what it shows was compared with what follows (a
	// change from then on is sent as that change alone).
	v := build(r)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // the stream lasts as long as the page
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no") // a proxy must not hold events back
	w.WriteHeader(http.StatusOK)
	// retry: how long the EventSource waits before connecting again.
	if _, err := fmt.Fprintf(w, "retry: %d\n\n", max(h.refresh.Milliseconds(), 1000)); err != nil || rc.Flush() != nil {
		return
	}
	sent := map[string]string{} // part id → the HTML the client has
	var lastVersion string
	first := true
	tick := time.NewTicker(h.refresh)
	defer tick.Stop()
	for {
		if !first {
			v = build(r)
		}
		if r.Context().Err() != nil {
			return
		}
		version := v.version()
		if first && version == r.URL.Query().Get("live") {
			// The client shows this very page: it has every part.
			for _, p := range v.Parts {
				sent[p.ID] = outer(p)
			}
			lastVersion = version
		}
		first = false
		if version != lastVersion {
			ev := liveEvent{Title: v.Title, At: v.At.Format("15:04"), Stamp: v.At.Format("2006-01-02 15:04:05 MST"),
				Failed: v.Failed, Version: version, Order: make([]string, 0, len(v.Parts)), Parts: map[string]string{}}
			now := make(map[string]string, len(v.Parts))
			for _, p := range v.Parts {
				html := outer(p)
				now[p.ID] = html
				ev.Order = append(ev.Order, p.ID)
				if sent[p.ID] != html {
					ev.Parts[p.ID] = html
				}
			}
			sent = now
			lastVersion = version
			b, err := json.Marshal(ev)
			if err != nil {
				h.log.Error("dashboard: encoding a live update", "err", err)
				return
			}
			if _, err := fmt.Fprintf(w, "event: change\ndata: %s\n\n", b); err != nil || rc.Flush() != nil {
				h.log.Debug("dashboard: writing a live update", "err", err)
				return
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// outer is a part's element, whole, as the page holds it.
func outer(p part) string {
	class := "part"
	if p.Wide {
		class += " wide"
	}
	return `<div class="` + class + `" id="` + p.ID + `">` + string(p.HTML) + `</div>`
}
