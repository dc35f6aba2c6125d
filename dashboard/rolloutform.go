package dashboard

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/magicsync/magicsync/server"
)

// The rollout form (POST /rollouts): one value of a setting wished to many
// replicas in one call, through a [RolloutStarter]. The page is behind
// Authorize, whose credentials (Basic authentication, a session cookie) a
// browser sends with any request, another site's form's too: so a POST
// must also carry the form's token, which only a page this process served
// holds, and, when the browser says where it comes from (Sec-Fetch-Site,
// Origin), come from the dashboard's own page.

// maxFormBytes bounds a rollout form's body.
const maxFormBytes = 64 << 10

// Form fields: a setting's key columns and desired columns are named by
// these prefixes and the column's name.
const (
	keyField   = "key."
	valueField = "value."
)

// crossOrigin refuses requests another site's page sent.
var crossOrigin = http.NewCrossOriginProtection()

// formField is one column's input.
type formField struct {
	// ID names the input for its label; Name is the form field's name;
	// Column the column's.
	ID, Name, Column, Value string
}

// formTable is the form of one setting table.
type formTable struct {
	ID          string
	Name, Label string
	Key         []formField
	Desired     []formField
	// Scope is "all" or "group"; the other fields are as typed.
	Scope, Group, FirstStage, AbortAbove, AbortAfter, Note string
	// Err says why the rollout was not started; Open shows the form.
	Err  string
	Open bool
}

// formData is what the form shows.
type formData struct {
	Token  string
	Tables []formTable
	// Err says what is wrong with a form naming no setting table.
	Err string
}

// filledForm is a form as posted, refilled on the page with what was
// wrong.
type filledForm struct {
	table string
	form  map[string][]string
	err   string
}

// rolloutForm renders the form of every setting table of tables, one of
// them refilled as filled says.
func (h *handler) rolloutForm(tables []server.SettingTable, filled *filledForm) template.HTML {
	d := formData{Token: h.token}
	known := false
	for i, t := range tables {
		ft := formTable{ID: "roll-" + strconv.Itoa(i), Name: t.Name, Label: h.words.Label(t.Name), Scope: "all"}
		this := filled != nil && filled.table == t.Name
		value := func(name string) string {
			if !this || len(filled.form[name]) == 0 {
				return ""
			}
			return filled.form[name][0]
		}
		for j, c := range t.Key {
			ft.Key = append(ft.Key, formField{ID: ft.ID + "-k" + strconv.Itoa(j), Name: keyField + c, Column: c, Value: value(keyField + c)})
		}
		for j, c := range t.Desired {
			ft.Desired = append(ft.Desired, formField{ID: ft.ID + "-v" + strconv.Itoa(j), Name: valueField + c, Column: c, Value: value(valueField + c)})
		}
		if this {
			known = true
			ft.Open, ft.Err = true, filled.err
			if value("scope") == "group" {
				ft.Scope = "group"
			}
			ft.Group, ft.FirstStage, ft.AbortAbove, ft.AbortAfter, ft.Note = value("group"), value("first"), value("abort"), value("after"), value("note")
		}
		d.Tables = append(d.Tables, ft)
	}
	if filled != nil && !known {
		d.Err = filled.err
	}
	var buf bytes.Buffer
	if err := pageTemplate.ExecuteTemplate(&buf, "rollout-form", d); err != nil {
		h.log.Error("dashboard: rendering the rollout form", "err", err)
		return template.HTML(`<p class="failed">The form to roll out a new value could not be shown: ` + template.HTMLEscapeString(err.Error()) + `</p>`)
	}
	return template.HTML(buf.String())
}

// startRollout answers POST /rollouts: it starts the rollout the form
// describes and sends the browser to it (303), or shows the form again
// with what was wrong — 400 for the form, 503 when the database failed —
// or refuses a request another site sent (403).
func (h *handler) startRollout(w http.ResponseWriter, r *http.Request) {
	rs := h.src.(RolloutStarter)
	if err := crossOrigin.Check(r); err != nil {
		from := r.Header.Get("Origin")
		if from == "" {
			from = "another site (" + r.Header.Get("Sec-Fetch-Site") + ")"
		}
		h.forbid(w, "this rollout was sent from "+from+", not from the dashboard's own page: start rollouts from the dashboard's Rollouts page")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad request: the form could not be read: "+err.Error(), http.StatusBadRequest)
		return
	}
	if token := r.PostForm.Get("token"); token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(h.token)) != 1 {
		h.forbid(w, "this rollout's form is not one this dashboard served (or the dashboard was restarted since): load the Rollouts page again and send its form")
		return
	}
	filled := &filledForm{table: r.PostForm.Get("table"), form: r.PostForm}
	fail := func(code int, format string, args ...any) {
		filled.err = fmt.Sprintf(format, args...)
		h.servePage(w, h.rolloutsPage(r, filled), code)
	}
	var table *server.SettingTable
	tables := rs.SettingTables()
	for i := range tables {
		if tables[i].Name == filled.table {
			table = &tables[i]
		}
	}
	if table == nil {
		fail(http.StatusBadRequest, "“%s” is no setting table of this dashboard: choose one of the forms below.", filled.table)
		return
	}
	key, values := columns(r.PostForm, keyField, table.Key), columns(r.PostForm, valueField, table.Desired)
	scope, opts, err := rolloutOf(r.PostForm)
	if err != nil {
		fail(http.StatusBadRequest, "%s", err)
		return
	}
	ro, err := rs.RollValues(r.Context(), table.Name, key, values, scope, opts)
	if err != nil {
		if h.databaseDown(r.Context(), err) {
			h.noteFailure(r, "starting a rollout", err, h.now())
			w.Header().Set("Retry-After", strconv.Itoa(int(max(h.refresh.Seconds(), 1))))
			fail(http.StatusServiceUnavailable, "The rollout was not started: the database did not answer (%s). Send the form again once it does.", err)
			return
		}
		fail(http.StatusBadRequest, "The rollout was not started: %s", err)
		return
	}
	h.answered()
	// Relative, as the page's links are: it resolves against the address
	// the form was posted to, wherever the dashboard is mounted.
	w.Header().Set("Location", "rollouts#rollout-"+strconv.FormatInt(ro.ID, 10))
	w.WriteHeader(http.StatusSeeOther)
}

// forbid refuses a POST another site may have sent, saying why.
func (h *handler) forbid(w http.ResponseWriter, why string) {
	h.log.Warn("dashboard: refused a rollout", "why", why)
	http.Error(w, "forbidden: "+why, http.StatusForbidden)
}

// columns reads the form's values of cols, by column; a column the form
// lacks is left out (RollValues then says it is missing).
func columns(form map[string][]string, prefix string, cols []string) map[string]string {
	out := make(map[string]string, len(cols))
	for _, c := range cols {
		if v, ok := form[prefix+c]; ok && len(v) > 0 {
			out[c] = v[0]
		}
	}
	return out
}

// rolloutOf reads a rollout's scope and options from its form, saying in
// plain words what is wrong.
func rolloutOf(form map[string][]string) (server.RolloutScope, server.RolloutOptions, error) {
	get := func(name string) string {
		if v := form[name]; len(v) > 0 {
			return strings.TrimSpace(v[0])
		}
		return ""
	}
	var scope server.RolloutScope
	switch get("scope") {
	case "all":
		scope.All = true
	case "group":
		scope.Group = get("group")
		if scope.Group == "" {
			return scope, server.RolloutOptions{}, errors.New("name the group to roll the value out to, or choose every replica")
		}
	default:
		return scope, server.RolloutOptions{}, errors.New("choose to whom to roll the value out: every replica, or a group's")
	}
	opts := server.RolloutOptions{Note: get("note")}
	count := func(name, what string) (int, error) {
		s := get(name)
		if s == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s “%s” is no count: give a whole number, 0 or more, or leave it empty", what, s)
		}
		return n, nil
	}
	var err error
	if opts.FirstStage, err = count("first", "the first stage"); err != nil {
		return scope, opts, err
	}
	if opts.AbortAfter, err = count("after", "the answers to wait for"); err != nil {
		return scope, opts, err
	}
	if s := get("abort"); s != "" {
		p, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(s, "%")), 64)
		if err != nil || math.IsNaN(p) || p < 0 || p > 100 {
			return scope, opts, fmt.Errorf("the percentage to stop above, “%s”, is no percentage: give a number from 0 to 100, or leave it empty never to stop", s)
		}
		opts.AbortAbovePercent = p
	}
	return scope, opts, nil
}

// databaseDown says whether err, from starting a rollout, is the database
// failing rather than the form: a network error, or, with a [Pinger], the
// database not answering a ping.
func (h *handler) databaseDown(ctx context.Context, err error) bool {
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	p, ok := h.src.(Pinger)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	return p.Ping(ctx) != nil
}
