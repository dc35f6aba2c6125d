package dashboard

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"html/template"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/server"
)

// Overview is everything the dashboard shows, as GET /status.json answers
// it: the fleet's totals and every replica, those needing attention first.
type Overview struct {
	Title string `json:"title"`
	// At is when the status was read.
	At time.Time `json:"at"`
	// UnreachableSince, when reading the status failed, is when it first
	// failed since it last succeeded: since when the database has been
	// unreachable. Absent when it answers.
	UnreachableSince time.Time `json:"unreachableSince,omitzero"`
	Summary          Summary   `json:"summary"`
	Replicas         []Replica `json:"replicas"`
}

// Summary totals the fleet.
type Summary struct {
	Replicas int `json:"replicas"`
	Online   int `json:"online"`
	// Attention counts the replicas needing attention.
	Attention    int `json:"attention"`
	Provisioning int `json:"provisioning"`
	// Queued counts the messages waiting for replicas.
	Queued int `json:"queued"`
	// Unsent counts the rows written on replicas and not yet sent: rows on
	// their way up, as each replica last reported.
	Unsent int `json:"unsent"`
	// UnsentStale counts those of Unsent reported by replicas now offline:
	// the counts may have changed since.
	UnsentStale int `json:"unsentStale"`
	// Filed counts the rows filed from replicas.
	Filed int `json:"filed"`
	// Rejected counts the rows one side could not take.
	Rejected int `json:"rejected"`
	// Backlog counts the rows replicas set aside after a permanent refusal.
	Backlog int `json:"backlog"`
	// Wishes counts the fleet's wishes by where they stand ("pending",
	// "waiting", "applied", "refused", "superseded"); absent when none.
	Wishes map[string]int `json:"wishes,omitempty"`
}

// Replica is where one replica stands: a [server.ReplicaStatus] with its
// display name and what needs attention.
type Replica struct {
	ID uuid.UUID `json:"id"`
	// Name is the display name Options.Names gave it, or its id.
	Name   string `json:"name"`
	Online bool   `json:"online"`
	// LastSeen is when it last called; absent if never.
	LastSeen time.Time `json:"lastSeen,omitzero"`
	// ReportedAt is when it last reported on itself: its tables' Unsent
	// and its Backlog are as of then, and stale while it is offline.
	// Absent if never.
	ReportedAt      time.Time `json:"reportedAt,omitzero"`
	Provisioning    bool      `json:"provisioning"`
	ProvisionReason string    `json:"provisionReason,omitempty"`
	Queued          int       `json:"queued"`
	LastApplied     uint64    `json:"lastApplied"`
	Backlog         int       `json:"backlog"`
	Build           string    `json:"build"`
	// Attention says, one phrase each, why the replica needs attention;
	// empty when it does not.
	Attention []string `json:"attention"`
	Tables    []Table  `json:"tables"`
	// Rejected lists rows one side could not take, as the Source lists
	// them (a [server.Server]: the most recent [server.StatusRejected]);
	// RejectedTotal counts them all.
	Rejected      []Rejected `json:"rejected"`
	RejectedTotal int        `json:"rejectedTotal"`
	// Wishes counts the replica's wishes by where they stand, as
	// Summary.Wishes does; absent when it has none.
	Wishes map[string]int `json:"wishes,omitempty"`
}

// wishStates are the states of a wish in the order the page shows them.
var wishStates = []server.WishState{server.WishRefused, server.WishExpired, server.WishWaiting, server.WishSuperseded, server.WishPending, server.WishApplied, server.WishWithdrawn}

// WishCount is one state's count of a replica's wishes, as the page shows
// it.
type WishCount struct {
	State string
	N     int
}

// wishCounts lists a replica's wish counts in the page's order.
func wishCounts(m map[string]int) []WishCount {
	var out []WishCount
	for _, st := range wishStates {
		if n := m[st.String()]; n > 0 {
			out = append(out, WishCount{State: st.String(), N: n})
		}
	}
	return out
}

// Table is where one table of one replica stands; see [server.TableStatus].
type Table struct {
	Table string `json:"table"`
	// Kind is the table's kind as the server's declarations say:
	// "catalog" (it shows Holds and Should), "record" or "setting" (it
	// shows Unsent and Filed); "" for a table they do not declare.
	Kind string `json:"kind"`
	// Holds is the rows the replica's last digest counted; Should, the
	// rows the server means it to hold.
	Holds  int `json:"holds"`
	Should int `json:"should"`
	// Unsent counts rows written on the replica and not yet sent.
	Unsent int `json:"unsent"`
	// Filed counts rows filed from the replica.
	Filed int `json:"filed"`
}

// Rejected is a row one side could not take; see [server.RejectedRow].
type Rejected struct {
	Table string `json:"table"`
	// Key is the row's key as text, e.g. `("a1", 3)`; KeyHex its canonical
	// bytes, exactly.
	Key    string `json:"key"`
	KeyHex string `json:"keyHex"`
	Reason string `json:"reason"`
	// Side is "replica" (it could not apply the row) or "server" (it
	// refused to file it).
	Side server.Side `json:"side"`
	At   time.Time   `json:"at"`
}

// MaxRejectedShown is how many rejected rows of one replica the page lists;
// it counts them all, and status.json lists those the Source lists.
const MaxRejectedShown = 20

// build turns the Source's answer into the overview.
func build(title string, now time.Time, st []server.ReplicaStatus, names func(uuid.UUID) string) Overview {
	ov := Overview{Title: title, At: now, Replicas: make([]Replica, 0, len(st))}
	for _, s := range st {
		r := Replica{
			ID: s.ID, Online: s.Online, LastSeen: s.LastSeen,
			ReportedAt:   s.ReportedAt,
			Provisioning: s.Provisioning, ProvisionReason: s.ProvisionReason,
			Queued: s.Queued, LastApplied: s.LastApplied, Backlog: s.Backlog, Build: s.Build,
			Attention: []string{}, Tables: make([]Table, 0, len(s.Tables)), Rejected: make([]Rejected, 0, len(s.Rejected)),
		}
		if names != nil {
			r.Name = strings.TrimSpace(names(s.ID))
		}
		for st, n := range s.Wishes {
			if n == 0 {
				continue
			}
			if r.Wishes == nil {
				r.Wishes = map[string]int{}
			}
			if ov.Summary.Wishes == nil {
				ov.Summary.Wishes = map[string]int{}
			}
			r.Wishes[st.String()] += n
			ov.Summary.Wishes[st.String()] += n
		}
		if r.Name == "" {
			r.Name = s.ID.String()
		}
		for _, t := range s.Tables {
			r.Tables = append(r.Tables, Table{Table: t.Table, Kind: kindOf(t.Mirror), Holds: t.Holds, Should: t.Should, Unsent: t.Unsent, Filed: t.Filed})
			ov.Summary.Unsent += t.Unsent
			if !s.Online {
				ov.Summary.UnsentStale += t.Unsent
			}
			ov.Summary.Filed += t.Filed
		}
		for _, j := range s.Rejected {
			r.Rejected = append(r.Rejected, Rejected{Table: j.Table, Key: j.Key.String(), KeyHex: hex.EncodeToString([]byte(j.Key)),
				Reason: j.Reason, Side: j.Side, At: j.At})
		}
		r.RejectedTotal = max(s.RejectedTotal, len(r.Rejected))
		r.Attention = attention(r)
		ov.Summary.Replicas++
		if r.Online {
			ov.Summary.Online++
		}
		if len(r.Attention) > 0 {
			ov.Summary.Attention++
		}
		if r.Provisioning {
			ov.Summary.Provisioning++
		}
		ov.Summary.Queued += r.Queued
		ov.Summary.Rejected += r.RejectedTotal
		ov.Summary.Backlog += r.Backlog
		ov.Replicas = append(ov.Replicas, r)
	}
	slices.SortStableFunc(ov.Replicas, func(a, b Replica) int {
		if c := cmpBool(len(a.Attention) > 0, len(b.Attention) > 0); c != 0 {
			return c
		}
		if c := naturalCompare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.ID.String(), b.ID.String())
	})
	return ov
}

// cmpBool orders true before false.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// attention says why r needs attention, most pressing first.
func attention(r Replica) []string {
	out := []string{}
	switch {
	case r.LastSeen.IsZero() && !r.Online:
		out = append(out, "never seen")
	case !r.Online:
		out = append(out, "offline")
	}
	if r.Provisioning {
		if r.ProvisionReason != "" {
			out = append(out, "provisioning: "+r.ProvisionReason)
		} else {
			out = append(out, "provisioning")
		}
	}
	if n := r.RejectedTotal; n > 0 {
		out = append(out, count(n, "rejected row", "rejected rows"))
	}
	if r.Backlog > 0 {
		out = append(out, "backlog of "+count(r.Backlog, "row", "rows"))
	}
	if n := r.Wishes[server.WishRefused.String()]; n > 0 {
		out = append(out, count(n, "wish", "wishes")+" refused")
	}
	for _, t := range r.Tables {
		if catalog(t) && t.Holds != t.Should {
			out = append(out, fmt.Sprintf("holds %s of %s %s", number(t.Holds), number(t.Should), t.Table))
		}
	}
	return out
}

// kindOf names a declared table's kind; "" for an undeclared one.
func kindOf(m magicsync.Mirror) string {
	switch m {
	case magicsync.Catalog, magicsync.Record, magicsync.Setting:
		return m.String()
	}
	return ""
}

// catalog says whether the page shows what the replica holds of t: a
// declared catalog, or a table the declarations do not name with rows to
// hold or nothing sent up.
func catalog(t Table) bool {
	switch t.Kind {
	case "catalog":
		return true
	case "record", "setting":
		return false
	}
	return t.Should != 0 || t.Holds != 0 || (t.Unsent == 0 && t.Filed == 0)
}

// record says whether the page shows the rows of t sent up and filed: a
// declared record or setting, or a table the declarations do not name
// with rows sent up.
func record(t Table) bool {
	switch t.Kind {
	case "catalog":
		return false
	case "record", "setting":
		return true
	}
	return t.Unsent != 0 || t.Filed != 0
}

// naturalCompare compares display names case-insensitively, runs of digits
// as numbers: "register 2" < "register 10".
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		ra, sa := utf8.DecodeRuneInString(a)
		rb, sb := utf8.DecodeRuneInString(b)
		if c := cmp.Compare(unicode.ToLower(ra), unicode.ToLower(rb)); c != 0 {
			return c
		}
		a, b = a[sa:], b[sb:]
	}
	return cmp.Compare(len(a), len(b))
}

func digits(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// Template helpers.

// cardData is what the card template shows: a replica, and the time its
// status was read.
type cardData struct {
	Now     time.Time
	Replica Replica
	W       words
	// Wishes: the Source lists wishes, so the card links to them.
	Wishes bool
}

var funcs = template.FuncMap{
	"number": number,
	"wishes": wishCounts,
	"outer":  func(p part) template.HTML { return template.HTML(outer(p)) },
	"build":  shortBuild,
	"words":  func(state string) string { return stateWords(stateNamed(state)) },
	"hm":     func(t time.Time) string { return t.Format("15:04") },
	"count":  count,
	"ago":    ago,
	"clock":  func(t time.Time) string { return t.Format("15:04:05") },
	"stamp":  func(t time.Time) string { return t.Format("2006-01-02 15:04:05 MST") },
	"iso":    func(t time.Time) string { return t.Format(time.RFC3339) },
	"short":  func(id uuid.UUID) string { return id.String()[:8] },
	"first": func(rs []Rejected) []Rejected {
		return rs[:min(len(rs), MaxRejectedShown)]
	},
	// more is how many rejected rows of r the page does not list.
	"more": func(r Replica) int { return max(r.RejectedTotal-min(len(r.Rejected), MaxRejectedShown), 0) },
	// unlisted says whether status.json does not list every rejected row
	// of r either.
	"unlisted": func(r Replica) bool { return r.RejectedTotal > len(r.Rejected) },
	"named":    func(r Replica) bool { return r.Name != r.ID.String() },
	"catalog":  catalog,
	"record":   record,
	"side": func(s server.Side) string {
		switch s {
		case server.SideReplica:
			return "replica could not apply"
		case server.SideServer:
			return "server refused"
		}
		return string(s)
	},
}

// stateNamed is the wish state of a name ("refused").
func stateNamed(name string) server.WishState {
	for _, s := range wishStates {
		if s.String() == name {
			return s
		}
	}
	return 0
}

// shortBuild names a build briefly: "shop (devel) 1a2b3c4" for the
// module path, version and revision "github.com/acme/shop@(devel)+1a2b3c4d…"
// a replica reports by default; a build named otherwise is shown as it is.
func shortBuild(b string) string {
	path, rest, ok := strings.Cut(b, "@")
	if !ok || !strings.Contains(path, "/") || strings.ContainsAny(path, " \t") {
		return b
	}
	name := path[strings.LastIndexByte(path, '/')+1:]
	version, rev, _ := strings.Cut(rest, "+")
	out := name
	if version != "" {
		out += " " + version
	}
	if rev != "" {
		out += " " + rev[:min(len(rev), 7)]
	}
	return out
}

// number writes n with thousands separators: 12,345.
func number(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// count writes n and the noun in the right number: "1 row", "2 rows".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return number(n) + " " + many
}

// ago writes how long before now t was: "3 min ago", "never" for zero.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	// Counted in minutes at least: the page's live updates send a part
	// again only when what it shows changes, which a count of seconds
	// would every time.
	switch {
	case d < time.Minute:
		return "less than a minute ago"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%d days ago", int(d/(24*time.Hour)))
}
