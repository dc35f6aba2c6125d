package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/replica"
)

const inspectDoc = "Inspect shows a replica's state from its SQLite file: its identity, the last\n" +
	"message applied, the rows waiting to go up per table and per lane, the\n" +
	"backlog, the rows it could not take, the server's wishes with its\n" +
	"answers (the first 100), and its commands with what became of them (the\n" +
	"100 issued last). It opens the file read-only and reads it in one\n" +
	"read transaction: safe on the file of a running replica. Which table goes\n" +
	"in which lane, and a lane's current problem, live in the running process\n" +
	"(replica.Status).\n\n" +
	"With -wishes it lists a page of the wishes alone, from the cursor -after\n" +
	"names (TABLE:KEY in hex, as the page before ends with), -limit at a time."

// inspectFlags is magicsync inspect.
func inspectFlags(fs *flag.FlagSet) body {
	asJSON := jsonFlag(fs, "write JSON, for scripts")
	wishes := fs.Bool("wishes", false, "list a page of the wishes alone")
	after := fs.String("after", "", "with -wishes: the cursor the page starts after, TABLE:KEY in hex (empty: the first page)")
	limit := fs.Int("limit", replica.InspectRows, "with -wishes: the wishes of a page")
	return func(ctx context.Context, file string, out io.Writer) error {
		if !*wishes && (*after != "" || *limit != replica.InspectRows) {
			return usagef("-after and -limit page the wishes: add -wishes")
		}
		if *limit <= 0 {
			return usagef("-limit %d: give a number of wishes above zero", *limit)
		}
		from, err := parseCursor(*after)
		if err != nil {
			return usagef("-after %q: %v", *after, err)
		}
		return withReplicaFile(ctx, file, true, func(db *sql.DB) error {
			if *wishes {
				return inspectWishes(ctx, db, file, from, *limit, *asJSON, out)
			}
			return inspect(ctx, db, *asJSON, out)
		})
	}
}

// inspect writes the replica's state.
func inspect(ctx context.Context, db *sql.DB, asJSON bool, out io.Writer) error {
	in, err := replica.Inspect(ctx, db)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(out, inspectionJSON(in))
	}
	writeInspection(out, in)
	return nil
}

// inspectWishes writes a page of the replica's wishes, from the cursor from.
func inspectWishes(ctx context.Context, db *sql.DB, file string, from replica.WishCursor, limit int, asJSON bool, out io.Writer) error {
	page, err := replica.InspectWishes(ctx, db, from, limit)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(out, wishPageJSON(page))
	}
	writeWishes(out, page.Wishes)
	if page.More {
		fmt.Fprintf(out, "\nMore follow: magicsync inspect -wishes -after %s %s\n", cursorText(page.Next), file)
	}
	return nil
}

// inspection is an Inspection as JSON: keys as text, times RFC 3339 (null
// when never).
type inspection struct {
	ID              string         `json:"id"`
	Known           bool           `json:"known"`
	SchemaVersion   int            `json:"schema_version"`
	LastApplied     uint64         `json:"last_applied"`
	ReportedApplied uint64         `json:"reported_applied"`
	Build           string         `json:"build"`
	DigestsAt       *time.Time     `json:"digests_at"`
	Staged          int            `json:"staged"`
	Lanes           []laneJSON     `json:"lanes"`
	Tables          []tableJSON    `json:"tables"`
	Backlog         int            `json:"backlog"`
	BacklogRows     []backlogJSON  `json:"backlog_rows"`
	HeldReports     int            `json:"held_reports"`
	HeldAnswers     int            `json:"held_answers"`
	Unreadable      int            `json:"unreadable"`
	RejectedTotal   int            `json:"rejected_total"`
	Rejected        []rejectedJSON `json:"rejected"`
	Wishes          map[string]int `json:"wishes"`
	WishList        []wishJSON     `json:"wish_list"`
	Commands        map[string]int `json:"commands"`
	CommandList     []commandJSON  `json:"command_list"`
	Retained        map[string]int `json:"retained"`
	// WishesNext is the cursor of the wishes' next page (-wishes -after),
	// null when WishList lists them all.
	WishesNext *string `json:"wishes_next"`
}

type laneJSON struct {
	Name        string `json:"name"`
	Sent        uint64 `json:"sent"`
	Unconfirmed int    `json:"unconfirmed"`
}

type tableJSON struct {
	Table       string `json:"table"`
	Unsent      int    `json:"unsent"`
	Unconfirmed int    `json:"unconfirmed"`
	Backlog     int    `json:"backlog"`
	Unreadable  int    `json:"unreadable"`
}

type backlogJSON struct {
	Table  string `json:"table"`
	Key    string `json:"key"`
	Build  string `json:"build"`
	Reason string `json:"reason"`
}

type rejectedJSON struct {
	Table    string    `json:"table"`
	Key      string    `json:"key"`
	Reason   string    `json:"reason"`
	Message  uint64    `json:"message"`
	At       time.Time `json:"at"`
	Reported bool      `json:"reported"`
}

type wishJSON struct {
	Table      string     `json:"table"`
	Key        string     `json:"key"`
	Wish       uint64     `json:"wish"`
	Note       string     `json:"note"`
	Columns    []string   `json:"columns"`
	WishedAt   time.Time  `json:"wished_at"`
	State      string     `json:"state"`
	Reason     string     `json:"reason"`
	AnsweredAt *time.Time `json:"answered_at"`
	Filed      bool       `json:"filed"`
	Held       bool       `json:"held"`
}

type commandJSON struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Note       string     `json:"note"`
	IssuedAt   time.Time  `json:"issued_at"`
	Deadline   *time.Time `json:"deadline"`
	State      string     `json:"state"`
	Reason     string     `json:"reason"`
	AnsweredAt *time.Time `json:"answered_at"`
	Filed      bool       `json:"filed"`
	Withdrawn  bool       `json:"withdrawn"`
	Held       bool       `json:"held"`
}

// inspectionJSON converts an Inspection for JSON.
func inspectionJSON(in replica.Inspection) inspection {
	j := inspection{ID: in.ID.String(), Known: in.Known, SchemaVersion: in.SchemaVersion, LastApplied: in.LastApplied,
		ReportedApplied: in.ReportedApplied, Build: in.Build, DigestsAt: timeOrNil(in.DigestsAt), Staged: in.Staged,
		Lanes: []laneJSON{}, Tables: []tableJSON{}, Backlog: in.Backlog, BacklogRows: []backlogJSON{},
		HeldReports: in.HeldReports, HeldAnswers: in.HeldAnswers, Unreadable: in.Unreadable,
		RejectedTotal: in.RejectedTotal, Rejected: []rejectedJSON{}, WishList: []wishJSON{}, Retained: in.Retained,
		Wishes: map[string]int{"pending": in.Wishes.Pending, "waiting": in.Wishes.Waiting, "applied": in.Wishes.Applied,
			"refused": in.Wishes.Refused, "superseded": in.Wishes.Superseded}}
	if !in.Known {
		j.ID = ""
	}
	if j.Retained == nil {
		j.Retained = map[string]int{}
	}
	for _, l := range in.Lanes {
		j.Lanes = append(j.Lanes, laneJSON(l))
	}
	for _, t := range in.Tables {
		j.Tables = append(j.Tables, tableJSON(t))
	}
	for _, b := range in.BacklogRows {
		j.BacklogRows = append(j.BacklogRows, backlogJSON(b))
	}
	for _, r := range in.Rejected {
		j.Rejected = append(j.Rejected, rejectedJSON{Table: r.Table, Key: r.Key.String(), Reason: r.Reason, Message: r.Message, At: r.At, Reported: r.Reported})
	}
	j.WishList = wishesJSON(in.WishList)
	j.Commands, j.CommandList = map[string]int{}, []commandJSON{}
	for state, n := range in.Commands {
		j.Commands[state.String()] = n
	}
	for _, c := range in.CommandList {
		j.CommandList = append(j.CommandList, commandJSON{ID: c.ID.String(), Name: c.Name, Note: c.Note, IssuedAt: c.IssuedAt,
			Deadline: timeOrNil(c.Deadline), State: c.State.String(), Reason: c.Reason, AnsweredAt: timeOrNil(c.AnsweredAt),
			Filed: c.Filed, Withdrawn: c.Withdrawn, Held: c.Held})
	}
	if in.MoreWishes && len(in.WishList) > 0 {
		next := cursorText(in.WishList[len(in.WishList)-1].Cursor())
		j.WishesNext = &next
	}
	return j
}

// wishesJSON converts wishes for JSON.
func wishesJSON(ws []replica.WishInspection) []wishJSON {
	out := []wishJSON{}
	for _, w := range ws {
		out = append(out, wishJSON{Table: w.Table, Key: w.Key.String(), Wish: w.Wish, Note: w.Note, Columns: w.Columns,
			WishedAt: w.WishedAt, State: w.State.String(), Reason: w.Reason, AnsweredAt: timeOrNil(w.AnsweredAt), Filed: w.Filed, Held: w.Held})
	}
	return out
}

// wishPage is a page of the wishes as JSON: next is the cursor of the
// next page, null on the last.
type wishPage struct {
	Wishes []wishJSON `json:"wishes"`
	Next   *string    `json:"next"`
}

// wishPageJSON converts a page of the wishes for JSON.
func wishPageJSON(p replica.WishPage) wishPage {
	j := wishPage{Wishes: wishesJSON(p.Wishes)}
	if p.More {
		next := cursorText(p.Next)
		j.Next = &next
	}
	return j
}

// cursorText writes a cursor as -after reads it: TABLE:KEY, the key's
// bytes in hex.
func cursorText(c replica.WishCursor) string {
	return c.Table + ":" + hex.EncodeToString([]byte(c.Key))
}

// parseCursor reads a cursor cursorText wrote; "" is the zero cursor.
func parseCursor(s string) (replica.WishCursor, error) {
	if s == "" {
		return replica.WishCursor{}, nil
	}
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return replica.WishCursor{}, errors.New("a cursor is TABLE:KEY, the key in hex, as a page's last line gives it")
	}
	key, err := hex.DecodeString(s[i+1:])
	if err != nil {
		return replica.WishCursor{}, fmt.Errorf("the key after %q is not hex: %w", s[:i+1], err)
	}
	return replica.WishCursor{Table: s[:i], Key: magicsync.Key(key)}, nil
}

// writeWishes writes wishes as a table.
func writeWishes(out io.Writer, ws []replica.WishInspection) {
	var rows [][]string
	for _, w := range ws {
		rows = append(rows, []string{w.Table, clip(w.Key.String(), 40), strconv.FormatUint(w.Wish, 10), w.State.String(),
			when(w.AnsweredAt), strconv.FormatBool(w.Filed), clip(w.Reason, 60)})
	}
	table(out, []string{"TABLE", "KEY", "WISH", "STATE", "ANSWERED", "CONFIRMED", "REASON"}, rows)
}

// writeInspection writes an Inspection as text: the replica, then a table
// of each list that is not empty.
func writeInspection(out io.Writer, in replica.Inspection) {
	id := "not known yet (being set up)"
	if in.Known {
		id = in.ID.String()
	}
	table(out, []string{"replica", id}, [][]string{
		{"last applied", fmt.Sprintf("%d (reported %d)", in.LastApplied, in.ReportedApplied)},
		{"build", in.Build},
		{"schema version", strconv.Itoa(in.SchemaVersion)},
		{"digests sent", when(in.DigestsAt)},
		{"backlog", fmt.Sprintf("%d rows, %d reports, %d answers", in.Backlog, in.HeldReports, in.HeldAnswers)},
		{"unreadable", strconv.Itoa(in.Unreadable)},
		{"rejected", strconv.Itoa(in.RejectedTotal)},
		{"wishes", fmt.Sprintf("%d pending, %d waiting, %d applied, %d refused, %d superseded",
			in.Wishes.Pending, in.Wishes.Waiting, in.Wishes.Applied, in.Wishes.Refused, in.Wishes.Superseded)},
		{"commands", commandCounts(in.Commands)},
	})
	if in.Staged > 0 {
		fmt.Fprintf(out, "provisioning   %d rows staged\n", in.Staged)
	}
	if len(in.Lanes) > 0 {
		fmt.Fprintln(out)
		var rows [][]string
		for _, l := range in.Lanes {
			rows = append(rows, []string{l.Name, strconv.FormatUint(l.Sent, 10), strconv.Itoa(l.Unconfirmed)})
		}
		table(out, []string{"LANE", "LAST SENT", "UNCONFIRMED ROWS"}, rows)
	}
	if len(in.Tables) > 0 {
		fmt.Fprintln(out)
		var rows [][]string
		for _, t := range in.Tables {
			rows = append(rows, []string{t.Table, strconv.Itoa(t.Unsent), strconv.Itoa(t.Unconfirmed), strconv.Itoa(t.Backlog), strconv.Itoa(t.Unreadable)})
		}
		table(out, []string{"TABLE", "UNSENT", "UNCONFIRMED", "BACKLOG", "UNREADABLE"}, rows)
	}
	if len(in.BacklogRows) > 0 {
		fmt.Fprintf(out, "\nBacklog (%d rows; 'magicsync release-backlog' sends them again):\n", in.Backlog)
		var rows [][]string
		for _, b := range in.BacklogRows {
			rows = append(rows, []string{b.Table, clip(b.Key, 40), b.Build, clip(b.Reason, 80)})
		}
		table(out, []string{"TABLE", "KEY", "BUILD", "REASON"}, rows)
	}
	if len(in.Rejected) > 0 {
		fmt.Fprintf(out, "\nRows it could not take (%d, newest first):\n", in.RejectedTotal)
		var rows [][]string
		for _, r := range in.Rejected {
			rows = append(rows, []string{r.Table, clip(r.Key.String(), 40), strconv.FormatUint(r.Message, 10), when(r.At), strconv.FormatBool(r.Reported), clip(r.Reason, 80)})
		}
		table(out, []string{"TABLE", "KEY", "MESSAGE", "AT", "REPORTED", "REASON"}, rows)
	}
	if len(in.WishList) > 0 {
		fmt.Fprintln(out, "\nWishes and answers:")
		writeWishes(out, in.WishList)
		if in.MoreWishes {
			fmt.Fprintf(out, "(the first %d: 'magicsync inspect -wishes -after %s FILE' lists the next)\n",
				len(in.WishList), cursorText(in.WishList[len(in.WishList)-1].Cursor()))
		}
	}
	if len(in.CommandList) > 0 {
		fmt.Fprintln(out, "\nCommands (issued last first):")
		var rows [][]string
		for _, c := range in.CommandList {
			rows = append(rows, []string{c.ID.String(), clip(c.Name, 30), c.State.String(), when(c.IssuedAt), when(c.AnsweredAt),
				strconv.FormatBool(c.Filed), clip(c.Reason, 60)})
		}
		table(out, []string{"ID", "NAME", "STATE", "ISSUED", "ANSWERED", "CONFIRMED", "REASON"}, rows)
	}
	if len(in.Retained) > 0 {
		fmt.Fprintln(out, "\nRows kept retired:")
		names := make([]string, 0, len(in.Retained))
		for t := range in.Retained {
			names = append(names, t)
		}
		sort.Strings(names)
		var rows [][]string
		for _, t := range names {
			rows = append(rows, []string{t, strconv.Itoa(in.Retained[t])})
		}
		table(out, []string{"TABLE", "ROWS"}, rows)
	}
}

// commandCounts writes the commands' counts by state, in the states'
// order, those at zero left out; "none" when there are none.
func commandCounts(counts replica.CommandCounts) string {
	var parts []string
	for state := magicsync.CommandQueued; state <= magicsync.CommandCancelled; state++ {
		if n := counts[state]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, state))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
