package dashboard

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/server"
)

// The wish list (GET /wishes) and a setting's page (GET /setting): what
// the server wished the replicas' settings, and where each wish stands.

// stateRank orders wishes as the wish list shows them: those needing
// attention first (refused, then waiting, then superseded), then those on
// their way, then those carried out.
func stateRank(s server.WishState) int {
	if i := slices.Index(wishStates, s); i >= 0 {
		return i
	}
	return len(wishStates)
}

// stateWords says a wish's state in plain words.
func stateWords(s server.WishState) string {
	switch s {
	case server.WishRefused:
		return "refused"
	case server.WishWaiting:
		return "waiting"
	case server.WishSuperseded:
		return "superseded"
	case server.WishPending:
		return "on its way"
	case server.WishApplied:
		return "carried out"
	case server.WishExpired:
		return "expired"
	}
	return s.String()
}

// wishEntry is one wish as the pages show it.
type wishEntry struct {
	ID      string
	Replica uuid.UUID
	// Name is the replica's display name.
	Name string
	// Table is the setting table's name; Label, its word.
	Table, Label string
	// Key is the row's key as text, less the replica's id (which the
	// page shows by its name); FullKey, all of it; KeyHex its bytes.
	Key, FullKey, KeyHex string
	// State is the state's name ("refused"); Words, in plain words ("carried out").
	State, Words string
	Reason, Note string
	// Wanted is the values wished; Reported, those the replica reported
	// (Known says whether the Source said).
	Wanted, Reported string
	Known            bool
	Number           uint64
	WishedAt         time.Time
	AnsweredAt       time.Time
}

// wishID names a setting row's entry on the page: the same row, the same
// element.
func wishID(replica uuid.UUID, table string, key magicsync.Key) string {
	s := sha256.Sum256([]byte(replica.String() + "\x00" + table + "\x00" + string(key)))
	return "w-" + hex.EncodeToString(s[:8])
}

// rowKey names a setting row within a page.
type rowKey struct {
	replica uuid.UUID
	table   string
	key     string
}

// nameOf is a replica's display name: Options.Names', else its id.
func (h *handler) nameOf(id uuid.UUID) string {
	if h.names != nil {
		if n := strings.TrimSpace(h.names(id)); n != "" {
			return n
		}
	}
	return id.String()
}

// entry turns a wish into what the pages show of it.
func (h *handler) entry(w server.WishSummary) wishEntry {
	return wishEntry{ID: wishID(w.Replica, w.Table, w.Key), Replica: w.Replica, Name: h.nameOf(w.Replica),
		Table: w.Table, Label: h.words.Label(w.Table), Key: keyWords(w.Replica, w.Key), FullKey: w.Key.String(), KeyHex: hex.EncodeToString([]byte(w.Key)),
		State: w.State.String(), Words: stateWords(w.State), Reason: w.Reason, Note: w.Note, Wanted: values(w.Wanted),
		Number: w.Number, WishedAt: w.WishedAt, AnsweredAt: w.AnsweredAt}
}

// reported reads what the replicas report of tables, when the Source can
// say: by setting row, the values as text. A table it fails to read is
// logged and left out: the page shows the values wished without them.
func (h *handler) reported(r *http.Request, tables []string) (map[rowKey]string, bool) {
	sr, ok := h.src.(SettingReader)
	if !ok {
		return nil, false
	}
	out := map[rowKey]string{}
	for _, t := range tables {
		rows, err := sr.Settings(r.Context(), t)
		if err != nil {
			h.log.Error("dashboard: reading the reported settings", "table", t, "err", err)
			continue
		}
		for _, s := range rows {
			out[rowKey{s.Replica, t, string(s.Key)}] = values(s.Values)
		}
	}
	return out, true
}

// sortWishes orders wishes as the wish list shows them: by state (those
// needing attention first), the oldest first within each (the one waiting
// longest first).
func sortWishes(ws []server.WishSummary) {
	slices.SortStableFunc(ws, func(a, b server.WishSummary) int {
		return cmp.Or(cmp.Compare(stateRank(a.State), stateRank(b.State)), a.WishedAt.Compare(b.WishedAt))
	})
}

// wishesHead is what the wish list's head shows.
type wishesHead struct {
	// Scope says in words whose wishes are listed: "of register 2".
	Scope  string
	Counts []WishCount
	// Refused, Waiting and Superseded count the wishes needing a word of
	// explanation.
	Refused, Waiting, Superseded int
	// Expired counts the wishes whose deadline passed before they were
	// carried out.
	Expired int
	Total   int
	Listed  int
	More    bool
	Empty   bool
}

// wishesView is the wish list: the wishes of a scope (the query's
// replica, table and group), those needing attention first.
func (h *handler) wishesView(r *http.Request) view {
	v := view{Title: "Wishes · " + h.title, Heading: "Wishes", At: h.now()}
	wl, ok := h.src.(WishLister)
	if !ok {
		v.Parts = []part{h.render("nowishes", true, "nowishes", nil)}
		return v
	}
	q := r.URL.Query()
	scope := server.WishScope{Table: q.Get("table"), Group: q.Get("group")}
	var scopeWords []string
	if s := q.Get("replica"); s != "" {
		id, err := uuid.Parse(s)
		if err != nil {
			v.Parts = []part{h.render("badscope", true, "badscope", s)}
			return v
		}
		scope.Replica = id
		scopeWords = append(scopeWords, "of "+h.nameOf(id))
	}
	if scope.Table != "" {
		scopeWords = append(scopeWords, "of the setting "+h.words.Label(scope.Table))
	}
	if scope.Group != "" {
		scopeWords = append(scopeWords, "in the group "+scope.Group)
	}
	list, err := wl.Wishes(r.Context(), scope)
	if scope.Table != "" && noSetting(err) {
		return h.noSettingView(v, scope.Table)
	}
	if err != nil {
		return h.failedView(v, fmt.Errorf("reading the wishes: %w", err), h.noteFailure(r, "reading the wishes", err, v.At))
	}
	h.answered()
	sortWishes(list.Wishes)
	var tables []string
	for _, w := range list.Wishes {
		if !slices.Contains(tables, w.Table) {
			tables = append(tables, w.Table)
		}
	}
	rep, known := h.reported(r, tables)
	head := wishesHead{Scope: strings.Join(scopeWords, ", "), Listed: len(list.Wishes), More: list.More}
	counts := map[string]int{}
	for st, n := range list.Counts {
		counts[st.String()] += n
		head.Total += n
	}
	head.Counts = wishCounts(counts)
	head.Refused, head.Waiting, head.Superseded = list.Counts[server.WishRefused], list.Counts[server.WishWaiting], list.Counts[server.WishSuperseded]
	head.Expired = list.Counts[server.WishExpired]
	head.Empty = len(list.Wishes) == 0
	v.Parts = append(v.Parts, h.render("wishes-head", true, "wishes-head", head))
	for _, w := range list.Wishes {
		e := h.entry(w)
		e.Reported, e.Known = rep[rowKey{w.Replica, w.Table, string(w.Key)}], known
		v.Parts = append(v.Parts, h.render(e.ID, true, "wish", struct {
			W   wishEntry
			Now time.Time
		}{e, v.At}))
	}
	return v
}

// settingRow is one row of a setting's page: what its replica reports
// beside what was wished.
type settingRow struct {
	Replica  uuid.UUID
	Name     string
	Key      string
	Reported string
	// Known: the replica reported the row.
	Known bool
	// Wish is the row's wish, if it has one.
	Wish *wishEntry
}

// settingData is what a setting's page shows.
type settingData struct {
	Table, Label string
	Rows         []settingRow
	// Reports: the Source says what replicas report.
	Reports bool
	More    bool
	Now     time.Time
}

// settingView is a setting's page (the query's table): per row, what its
// replica reports and what was wished, side by side.
func (h *handler) settingView(r *http.Request) view {
	table := r.URL.Query().Get("table")
	v := view{Title: h.words.Label(table) + " · " + h.title, Heading: "Setting: " + h.words.Label(table), At: h.now()}
	if table == "" {
		v.Title, v.Heading = "Settings · "+h.title, "Settings"
		v.Parts = []part{h.render("notable", true, "notable", nil)}
		return v
	}
	d := settingData{Table: table, Label: h.words.Label(table), Now: v.At}
	rows := map[rowKey]*settingRow{}
	row := func(replica uuid.UUID, key magicsync.Key) *settingRow {
		k := rowKey{replica, table, string(key)}
		if rows[k] == nil {
			rows[k] = &settingRow{Replica: replica, Name: h.nameOf(replica), Key: keyWords(replica, key)}
		}
		return rows[k]
	}
	if wl, ok := h.src.(WishLister); ok {
		list, err := wl.Wishes(r.Context(), server.WishScope{Table: table})
		if noSetting(err) {
			return h.noSettingView(v, table)
		}
		if err != nil {
			return h.failedView(v, fmt.Errorf("reading the wishes: %w", err), h.noteFailure(r, "reading the wishes", err, v.At))
		}
		h.answered()
		d.More = list.More
		for _, w := range list.Wishes {
			e := h.entry(w)
			row(w.Replica, w.Key).Wish = &e
		}
	}
	if sr, ok := h.src.(SettingReader); ok {
		d.Reports = true
		reported, err := sr.Settings(r.Context(), table)
		if noSetting(err) {
			return h.noSettingView(v, table)
		}
		if err != nil {
			return h.failedView(v, fmt.Errorf("reading what the replicas report of %s: %w", table, err), h.noteFailure(r, "reading the reported settings", err, v.At))
		}
		for _, s := range reported {
			sr := row(s.Replica, s.Key)
			sr.Reported, sr.Known = values(s.Values), true
		}
	}
	for _, sr := range rows {
		d.Rows = append(d.Rows, *sr)
	}
	slices.SortFunc(d.Rows, func(a, b settingRow) int {
		return cmp.Or(naturalCompare(a.Name, b.Name), strings.Compare(a.Replica.String(), b.Replica.String()), strings.Compare(a.Key, b.Key))
	})
	v.Parts = []part{h.render("setting", true, "setting", d)}
	return v
}

// noteFailure logs a failed read of the Source and notes it, unless the
// client went away; it returns since when reading has been failing.
func (h *handler) noteFailure(r *http.Request, what string, err error, now time.Time) time.Time {
	if r.Context().Err() != nil {
		return h.since()
	}
	h.log.Error("dashboard: "+what, "err", err)
	return h.failed(now)
}

// keyWords writes a setting row's key as the pages show it: without its
// replica's id, which the page names, and empty when that is all of it
// (a setting row per replica).
func keyWords(replica uuid.UUID, key magicsync.Key) string {
	k := key.String()
	for _, id := range []string{`"` + replica.String() + `"`, replica.String()} {
		if k == "("+id+")" {
			return ""
		}
		if s := strings.NewReplacer("("+id+", ", "(", ", "+id+")", ")").Replace(k); s != k {
			return s
		}
	}
	return k
}

// values writes a row's values in plain words: the value alone when there
// is one column, else "column: value" by column.
func values(m map[string]any) string {
	if len(m) == 0 {
		return ""
	}
	if len(m) == 1 {
		for _, v := range m {
			return value(v)
		}
	}
	cols := make([]string, 0, len(m))
	for c := range m {
		cols = append(cols, c)
	}
	slices.Sort(cols)
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c + ": " + value(m[c])
	}
	return strings.Join(parts, ", ")
}

// value writes one value in plain words: text quoted, nothing as
// "nothing".
func value(v any) string {
	switch v := v.(type) {
	case nil:
		return "nothing"
	case string:
		return "“" + v + "”"
	case []byte:
		return "0x" + hex.EncodeToString(v)
	case time.Time:
		return v.Format("2006-01-02 15:04:05 MST")
	case fmt.Stringer:
		return v.String()
	}
	return fmt.Sprint(v)
}
