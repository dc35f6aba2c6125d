package dashboard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/server"
)

// Source is where the dashboard reads the replicas' status: a
// [*server.Server], or anything that reads the same.
type Source interface {
	Status(ctx context.Context) ([]server.ReplicaStatus, error)
}

// Options configure the dashboard. The zero value is usable.
type Options struct {
	// Title heads the page; "magicsync" if empty.
	Title string
	// Refresh is how often the page refreshes itself; 2 s if zero, never
	// if negative.
	Refresh time.Duration
	// Names, if set, gives replicas display names (e.g. "register 2");
	// a replica it names "" is shown by its id. It is called for every
	// replica on every request, so it should be quick (a map lookup, not a
	// query).
	Names func(uuid.UUID) string
	// Logger receives the errors the dashboard meets (a failing Source, a
	// client gone mid-answer); slog.Default() if nil.
	Logger *slog.Logger
}

// DefaultRefresh is how often the page refreshes itself when
// Options.Refresh is zero.
const DefaultRefresh = 2 * time.Second

//go:embed assets
var assets embed.FS

var (
	pageTemplate = template.Must(template.New("page.html").Funcs(funcs).ParseFS(assets, "assets/page.html"))
	styleSheet   = mustRead("assets/style.css")
	refreshJS    = mustRead("assets/refresh.js")
	// contentPolicy allows the page its own inline style and script, by
	// hash, and nothing else: no other script runs even if a table name or
	// a reason carried markup past the escaping.
	contentPolicy = "default-src 'none'; style-src " + hashSource(styleSheet) + "; script-src " + hashSource(refreshJS) +
		"; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'"
)

func mustRead(name string) string {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func hashSource(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// New returns a handler serving the dashboard of the replicas src reports
// on: the page at "/", the same data at "/status.json", and "/healthz".
// Mount it with [http.StripPrefix] to serve it under a path.
func New(src Source, opts Options) http.Handler {
	h := &handler{src: src, title: opts.Title, refresh: opts.Refresh, names: opts.Names, log: opts.Logger, now: time.Now}
	if h.title == "" {
		h.title = "magicsync"
	}
	if h.refresh == 0 {
		h.refresh = DefaultRefresh
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	return h
}

type handler struct {
	src     Source
	title   string
	refresh time.Duration
	names   func(uuid.UUID) string
	log     *slog.Logger
	now     func() time.Time
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var serve func(http.ResponseWriter, *http.Request)
	switch r.URL.Path {
	case "/":
		serve = h.page
	case "":
		// Mounted under a prefix and asked for the prefix itself: the
		// page's relative links need the trailing slash.
		p, _, _ := strings.Cut(r.RequestURI, "?")
		if p == "" || strings.HasSuffix(p, "/") || !strings.HasPrefix(p, "/") {
			serve = h.page
			break
		}
		// http.Redirect would resolve a relative target against the
		// stripped path; the request's own URI is the one to extend.
		to := p + "/"
		if r.URL.RawQuery != "" {
			to += "?" + r.URL.RawQuery
		}
		w.Header().Set("Location", to)
		w.WriteHeader(http.StatusMovedPermanently)
		return
	case "/status.json":
		serve = h.json
	case "/healthz":
		serve = h.healthz
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	serve(w, r)
}

// read asks the Source and builds the overview; on failure it logs, and
// returns the error to show.
func (h *handler) read(r *http.Request) (Overview, error) {
	now := h.now()
	st, err := h.src.Status(r.Context())
	if err != nil {
		if r.Context().Err() == nil {
			h.log.Error("dashboard: reading status", "err", err)
		}
		return Overview{Title: h.title, At: now}, err
	}
	return build(h.title, now, st, h.names), nil
}

type pageData struct {
	Overview
	// Attention and Calm split Replicas: those needing attention, and the
	// others.
	Attention, Calm []Replica
	Err             string
	RefreshMillis   int64
	RefreshSecs     string
	Style           template.CSS
	Script          template.JS
}

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	ov, err := h.read(r)
	d := pageData{Overview: ov, Style: template.CSS(styleSheet), Script: template.JS(refreshJS)}
	if err != nil {
		d.Err = err.Error()
	}
	i := 0
	for i < len(ov.Replicas) && len(ov.Replicas[i].Attention) > 0 {
		i++
	}
	d.Attention, d.Calm = ov.Replicas[:i], ov.Replicas[i:]
	if h.refresh > 0 {
		d.RefreshMillis = h.refresh.Milliseconds()
		d.RefreshSecs = strconv.FormatFloat(max(h.refresh.Seconds(), 1), 'f', -1, 64)
	}
	var buf bytes.Buffer
	if terr := pageTemplate.Execute(&buf, d); terr != nil {
		h.log.Error("dashboard: rendering the page", "err", terr)
		http.Error(w, "dashboard: rendering the page: "+terr.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", contentPolicy)
	w.Header().Set("Referrer-Policy", "no-referrer")
	if err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(h.refresh.Seconds(), 1))))
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	h.write(w, buf.Bytes())
}

func (h *handler) json(w http.ResponseWriter, r *http.Request) {
	ov, err := h.read(r)
	var v any = ov
	code := http.StatusOK
	if err != nil {
		v = struct {
			Error string    `json:"error"`
			At    time.Time `json:"at"`
		}{"reading status: " + err.Error(), ov.At}
		code = http.StatusServiceUnavailable
	}
	b, jerr := json.MarshalIndent(v, "", "  ")
	if jerr != nil {
		h.log.Error("dashboard: encoding status.json", "err", jerr)
		http.Error(w, "dashboard: encoding status.json: "+jerr.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	h.write(w, append(b, '\n'))
}

func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	st, err := h.src.Status(r.Context())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		if r.Context().Err() == nil {
			h.log.Error("dashboard: reading status", "err", err)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		h.write(w, []byte("unavailable: reading status: "+err.Error()+"\n"))
		return
	}
	h.write(w, fmt.Appendf(nil, "ok: %d replicas\n", len(st)))
}

func (h *handler) write(w http.ResponseWriter, b []byte) {
	if _, err := w.Write(b); err != nil {
		h.log.Debug("dashboard: writing the answer", "err", err)
	}
}
