package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/server"
)

// Source is where the dashboard reads the replicas' status: a
// [*server.Server], or anything that reads the same.
type Source interface {
	Status(ctx context.Context) ([]server.ReplicaStatus, error)
}

// WishLister is a Source that can list the wishes made of the replicas'
// settings; [*server.Server] is one. With it, the dashboard serves the
// wish list (GET /wishes) and the settings' pages (GET /setting).
type WishLister interface {
	Wishes(ctx context.Context, scope server.WishScope) (server.WishList, error)
}

// Setting is a setting row as its replica last reported it: the values of
// its desired columns, by column.
type Setting = server.SettingRow

// SettingReader is a Source that can say what the replicas report of a
// setting table: its rows as the replicas last filed them. With it, the
// wish list and the settings' pages show, beside each value wished, the
// value reported; without it, they show the value wished alone. It is
// asked once per setting table a page shows.
type SettingReader interface {
	Settings(ctx context.Context, table string) ([]Setting, error)
}

// Pinger is a Source that can say, cheaply, whether its database answers;
// [*server.Server] is one. GET /healthz asks it rather than reading the
// status.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Options configure the dashboard. The zero value serves nobody: set
// Authorize (or Public) for the dashboard to show anything.
type Options struct {
	// Authorize says whether a request may see the dashboard; a request it
	// refuses is answered 401 Unauthorized, with nothing read from the
	// Source. [BasicAuth] makes one that asks the browser for a user and a
	// password. If nil, every request is refused (with a page saying how
	// to configure the dashboard) unless Public is set. GET /healthz is
	// answered without asking it.
	Authorize func(*http.Request) bool
	// Public, with a nil Authorize, serves the dashboard to every request:
	// for a host that puts the handler behind its own authentication
	// (wrapping it in its own middleware) or serves it on a listener only
	// operators reach. Ignored when Authorize is set.
	Public bool
	// FormToken is the token the rollout form carries and a POST must send
	// back, so that another site's page cannot start a rollout. Set it to
	// a secret shared by every process serving one dashboard behind a load
	// balancer: a form one process served is then taken by the others, and
	// after a restart. Empty, New draws one at random, known to this
	// process only, until it stops.
	FormToken string
	// Title heads the page; "magicsync" if empty.
	Title string
	// Refresh is how often an open page's live updates read what it shows
	// (and send what changed), and how often a page without JavaScript
	// reloads; 2 s if zero, never if negative.
	Refresh time.Duration
	// Names, if set, gives replicas display names (e.g. "register 2");
	// a replica it names "" is shown by its id. It is called for every
	// replica on every request, so it should be quick (a map lookup, not a
	// query).
	Names func(uuid.UUID) string
	// TableLabels, if set, gives tables the words a shop owner knows
	// them by (e.g. "receipts" → "sales"); a table it does not name is
	// shown by its name.
	TableLabels map[string]string
	// ServerName is what the page calls the server in its sentences ("the
	// head office"); "the server" if empty.
	ServerName string
	// Logger receives the errors the dashboard meets (a failing Source, a
	// client gone mid-answer); slog.Default() if nil.
	Logger *slog.Logger
}

// DefaultRefresh is how often a page updates itself when Options.Refresh
// is zero.
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
		"; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'self'"
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

// BasicAuth returns an Options.Authorize that lets in the requests carrying
// user and password with HTTP Basic authentication, compared in constant
// time. The dashboard answers the others 401 with a Basic challenge
// (WWW-Authenticate), so that a browser asks for them. An empty password
// lets nobody in. Serve the dashboard over HTTPS (or on a listener only
// operators reach): Basic authentication sends the password in clear.
func BasicAuth(user, password string) func(*http.Request) bool {
	wantUser, wantPassword := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return func(r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		if !ok || password == "" {
			return false
		}
		gotUser, gotPassword := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		userOK := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
		passwordOK := subtle.ConstantTimeCompare(gotPassword[:], wantPassword[:])
		return userOK&passwordOK == 1
	}
}

// basicAuthCode is the code of the functions BasicAuth returns: a refusal
// by one of them asks the browser for credentials.
var basicAuthCode = reflect.ValueOf(BasicAuth("", "")).Pointer()

// healthTimeout bounds how long GET /healthz waits for the database.
const healthTimeout = 2 * time.Second

// New returns a handler serving the dashboard of the replicas src reports
// on: the page at "/", the same data at "/status.json", the wish list at
// "/wishes", a setting's page at "/setting", the rollouts at "/rollouts"
// (where, with a [RolloutStarter], a form POSTs a new one), the commands
// at "/commands" (with a [CommandLister]), and
// "/healthz".
// Mount it with [http.StripPrefix] to serve it under a path. It serves
// only the requests opts.Authorize lets in (or everyone, with opts.Public).
func New(src Source, opts Options) http.Handler {
	h := &handler{src: src, title: opts.Title, refresh: opts.Refresh, names: opts.Names, log: opts.Logger, now: time.Now,
		authorize: opts.Authorize, public: opts.Public, words: words{Server: opts.ServerName, labels: opts.TableLabels}}
	if h.words.Server == "" {
		h.words.Server = "the server"
	}
	h.challenge = opts.Authorize != nil && reflect.ValueOf(opts.Authorize).Pointer() == basicAuthCode
	if h.title == "" {
		h.title = "magicsync"
	}
	if h.refresh == 0 {
		h.refresh = DefaultRefresh
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	// The rollout form's token: only a page this dashboard served knows
	// it, and another site's page cannot read one.
	h.token = opts.FormToken
	if h.token == "" {
		h.token = rand.Text()
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
	// words are the page's words for tables and the server.
	words words

	authorize func(*http.Request) bool
	public    bool
	// challenge: a refusal asks for Basic credentials (Authorize is
	// BasicAuth's).
	challenge bool
	// token is the rollout form's token, drawn at random in New: a POST
	// must carry it (see startRollout).
	token string

	// mu guards downSince: when reading the Source first failed, since it
	// last answered; zero while it answers.
	mu        sync.Mutex
	downSince time.Time
}

// notConfigured is the answer to every request when Options set neither
// Authorize nor Public.
const notConfigured = `This dashboard lets nobody in yet: it shows operators where every replica stands, and is protected by default.

To let operators in, set dashboard.Options.Authorize, e.g. to
dashboard.BasicAuth(user, password), or to a function checking the host's own
session. If the host already authenticates every request to this handler
(its own middleware, or a listener only operators reach), set
dashboard.Options.Public instead.
`

// allowed answers a request the options do not let in, and says whether
// the request may go on.
func (h *handler) allowed(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case h.authorize != nil:
		if h.authorize(r) {
			return true
		}
	case h.public:
		return true
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusUnauthorized)
		h.write(w, []byte(notConfigured))
		return false
	}
	if h.challenge {
		w.Header().Set("WWW-Authenticate", `Basic realm=`+strconv.Quote(h.title)+`, charset="UTF-8"`)
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, "unauthorized: this dashboard is for operators", http.StatusUnauthorized)
	return false
}

// failed notes that reading the Source failed at now, and returns since
// when it has been failing.
func (h *handler) failed(now time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.downSince.IsZero() {
		h.downSince = now
	}
	return h.downSince
}

// answered notes that the Source answered.
func (h *handler) answered() {
	h.mu.Lock()
	h.downSince = time.Time{}
	h.mu.Unlock()
}

// since says since when reading the Source has been failing; zero if it
// last answered.
func (h *handler) since() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.downSince
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var serve func(http.ResponseWriter, *http.Request)
	// GET /healthz is answered to anyone (a load balancer's probe carries
	// no credentials): it reads nothing but whether the database answers,
	// and tells nothing else. Every other path, known or not, is for those
	// the options let in.
	if r.URL.Path != "/healthz" && !h.allowed(w, r) {
		return
	}
	switch r.URL.Path {
	case "/":
		serve = h.pageOf(h.overviewView)
	case "/wishes":
		serve = h.pageOf(h.wishesView)
	case "/setting":
		serve = h.pageOf(h.settingView)
	case "/rollouts":
		serve = h.pageOf(h.rolloutsView)
	case "/commands":
		serve = h.pageOf(h.commandsView)
	case "":
		// Mounted under a prefix and asked for the prefix itself: the
		// page's relative links need the trailing slash.
		p, _, _ := strings.Cut(r.RequestURI, "?")
		if p == "" || strings.HasSuffix(p, "/") || !strings.HasPrefix(p, "/") {
			serve = h.pageOf(h.overviewView)
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
	_, starts := h.src.(RolloutStarter)
	if r.URL.Path == "/rollouts" && starts && r.Method == http.MethodPost {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.startRollout(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		if r.URL.Path == "/rollouts" && starts {
			w.Header().Set("Allow", "GET, HEAD, POST")
		}
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	serve(w, r)
}

// read asks the Source and builds the overview; on failure it logs, notes
// since when reading has been failing, and returns the error to show.
func (h *handler) read(r *http.Request) (Overview, error) {
	now := h.now()
	st, err := h.src.Status(r.Context())
	if err != nil {
		return Overview{Title: h.title, At: now, UnreachableSince: h.noteFailure(r, "reading status", err, now)}, err
	}
	h.answered()
	return build(h.title, now, st, h.names), nil
}

func (h *handler) json(w http.ResponseWriter, r *http.Request) {
	ov, err := h.read(r)
	var v any = ov
	code := http.StatusOK
	if err != nil {
		v = struct {
			Error            string    `json:"error"`
			At               time.Time `json:"at"`
			UnreachableSince time.Time `json:"unreachableSince,omitzero"`
		}{"reading status: " + err.Error(), ov.At, ov.UnreachableSince}
		code = http.StatusServiceUnavailable
	}
	b, jerr := json.MarshalIndent(v, "", "  ")
	if jerr != nil {
		h.log.Error("dashboard: encoding status.json", "err", jerr)
		http.Error(w, "dashboard: encoding status.json: "+jerr.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(h.refresh.Seconds(), 1))))
	}
	w.WriteHeader(code)
	h.write(w, append(b, '\n'))
}

// healthz answers whether the database answers, cheaply: a ping when the
// Source is a [Pinger] (a [*server.Server] is), else whether the last
// reading of the status succeeded. It reads no status, and tells nothing
// but "ok" or since when the database has been unreachable.
func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var since time.Time
	if p, ok := h.src.(Pinger); ok {
		ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
		err := p.Ping(ctx)
		cancel()
		switch {
		case err == nil:
			h.answered()
		case r.Context().Err() != nil:
			return
		default:
			h.log.Error("dashboard: pinging the database", "err", err)
			since = h.failed(h.now())
		}
	} else {
		since = h.since()
	}
	if !since.IsZero() {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(h.refresh.Seconds(), 1))))
		w.WriteHeader(http.StatusServiceUnavailable)
		h.write(w, fmt.Appendf(nil, "unavailable: database unreachable since %s\n", since.Format(time.RFC3339)))
		return
	}
	h.write(w, []byte("ok\n"))
}

func (h *handler) write(w http.ResponseWriter, b []byte) {
	if _, err := w.Write(b); err != nil {
		h.log.Debug("dashboard: writing the answer", "err", err)
	}
}
