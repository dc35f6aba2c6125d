package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/server"
)

const statusDoc = "Status shows where every replica stands, as the server's Status reads it from\n" +
	"the engine's tables: online, last seen, last applied, messages queued, the\n" +
	"backlog it reported, the rows one side could not take, and per table what\n" +
	"it holds, should hold, has not sent and had filed. Without the host's\n" +
	"declarations the tables' kinds are unknown (server.StatusOf)."

// statusFlags is magicsync status.
func statusFlags(fs *flag.FlagSet) body {
	db := addServerFlags(fs)
	asJSON := jsonFlag(fs, "write JSON, for scripts")
	return func(ctx context.Context, _ string, out io.Writer) error {
		return db.withPool(ctx, func(pool *pgxpool.Pool) error {
			return status(ctx, pool, *db.schema, *asJSON, out)
		})
	}
}

// status writes the server's Status of every replica.
func status(ctx context.Context, pool *pgxpool.Pool, schema string, asJSON bool, out io.Writer) error {
	sts, err := server.StatusOf(ctx, pool, schema)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(out, statusJSON(sts))
	}
	writeStatus(out, sts)
	slots, err := server.Slots(ctx, pool)
	if err != nil {
		return err
	}
	writeSlots(out, slots)
	return nil
}

// writeSlots lists the engine's replication slots of the cluster
// (CaptureLogical), saying which hold back WAL with no process reading
// them.
func writeSlots(out io.Writer, slots []server.SlotStatus) {
	if len(slots) == 0 {
		return
	}
	var rows [][]string
	var idle []string
	for _, sl := range slots {
		state := "read"
		switch {
		case sl.Lost:
			state = "invalidated: made anew when its head office runs"
		case !sl.Active:
			state = "not read"
			idle = append(idle, sl.Name)
		}
		rows = append(rows, []string{sl.Name, sl.Database, strconv.FormatFloat(float64(sl.Retained)/(1<<20), 'f', 1, 64), state})
	}
	fmt.Fprintln(out)
	table(out, []string{"REPLICATION SLOT", "DATABASE", "WAL HELD (MB)", "STATE"}, rows)
	for _, name := range idle {
		fmt.Fprintf(out, "%s is read by no process and holds its WAL back: if its head office is gone for good, drop it: SELECT pg_drop_replication_slot('%s');\n", name, name)
	}
}

// replicaJSON is a ReplicaStatus as JSON: keys as text, times RFC 3339
// (null when never).
type replicaJSON struct {
	ID              string             `json:"id"`
	Online          bool               `json:"online"`
	LastSeen        *time.Time         `json:"last_seen"`
	ReportedAt      *time.Time         `json:"reported_at"`
	LastApplied     uint64             `json:"last_applied"`
	Queued          int                `json:"queued"`
	Provisioning    bool               `json:"provisioning"`
	ProvisionReason string             `json:"provision_reason,omitempty"`
	Backlog         int                `json:"backlog"`
	Build           string             `json:"build"`
	Wishes          map[string]int     `json:"wishes"`
	Commands        map[string]int     `json:"commands"`
	Tables          []tableStatusJSON  `json:"tables"`
	RejectedTotal   int                `json:"rejected_total"`
	Rejected        []serverRejectJSON `json:"rejected"`
}

type tableStatusJSON struct {
	Table  string `json:"table"`
	Holds  int    `json:"holds"`
	Should int    `json:"should"`
	Unsent int    `json:"unsent"`
	Filed  int    `json:"filed"`
}

type serverRejectJSON struct {
	Table  string    `json:"table"`
	Key    string    `json:"key"`
	Reason string    `json:"reason"`
	Side   string    `json:"side"`
	At     time.Time `json:"at"`
}

// statusJSON converts the replicas' status for JSON.
func statusJSON(sts []server.ReplicaStatus) []replicaJSON {
	out := []replicaJSON{}
	for _, st := range sts {
		j := replicaJSON{ID: st.ID.String(), Online: st.Online, LastSeen: timeOrNil(st.LastSeen), ReportedAt: timeOrNil(st.ReportedAt),
			LastApplied: st.LastApplied, Queued: st.Queued, Provisioning: st.Provisioning, ProvisionReason: st.ProvisionReason,
			Backlog: st.Backlog, Build: st.Build, Wishes: map[string]int{}, Commands: map[string]int{}, Tables: []tableStatusJSON{},
			RejectedTotal: st.RejectedTotal, Rejected: []serverRejectJSON{}}
		for s, n := range st.Wishes {
			j.Wishes[s.String()] = n
		}
		for s, n := range st.Commands {
			j.Commands[s.String()] = n
		}
		for _, t := range st.Tables {
			j.Tables = append(j.Tables, tableStatusJSON{Table: t.Table, Holds: t.Holds, Should: t.Should, Unsent: t.Unsent, Filed: t.Filed})
		}
		for _, r := range st.Rejected {
			j.Rejected = append(j.Rejected, serverRejectJSON{Table: r.Table, Key: r.Key.String(), Reason: r.Reason, Side: string(r.Side), At: r.At})
		}
		out = append(out, j)
	}
	return out
}

// writeStatus writes one line per replica, then its tables and the rows
// one side could not take.
func writeStatus(out io.Writer, sts []server.ReplicaStatus) {
	if len(sts) == 0 {
		fmt.Fprintln(out, "No replicas: the engine adopts those of the replicas table at a server's pass.")
		return
	}
	var rows [][]string
	for _, st := range sts {
		state := "ok"
		if st.Provisioning {
			state = "provisioning: " + clip(st.ProvisionReason, 50)
		}
		rows = append(rows, []string{st.ID.String(), strconv.FormatBool(st.Online), when(st.LastSeen), strconv.FormatUint(st.LastApplied, 10),
			strconv.Itoa(st.Queued), strconv.Itoa(st.Backlog), strconv.Itoa(st.RejectedTotal), clip(st.Build, 30), state})
	}
	table(out, []string{"REPLICA", "ONLINE", "LAST SEEN", "LAST APPLIED", "QUEUED", "BACKLOG", "REJECTED", "BUILD", "STATE"}, rows)
	for _, st := range sts {
		if len(st.Tables) == 0 && len(st.Rejected) == 0 {
			continue
		}
		fmt.Fprintf(out, "\n%s (reported %s):\n", st.ID, when(st.ReportedAt))
		if len(st.Tables) > 0 {
			var rows [][]string
			for _, t := range st.Tables {
				rows = append(rows, []string{t.Table, strconv.Itoa(t.Holds), strconv.Itoa(t.Should), strconv.Itoa(t.Unsent), strconv.Itoa(t.Filed)})
			}
			table(out, []string{"  TABLE", "HOLDS", "SHOULD", "UNSENT", "FILED"}, indent(rows))
		}
		if len(st.Rejected) > 0 {
			var rows [][]string
			for _, r := range st.Rejected {
				rows = append(rows, []string{r.Table, clip(r.Key.String(), 40), string(r.Side), when(r.At), clip(r.Reason, 80)})
			}
			table(out, []string{"  REJECTED", "KEY", "SIDE", "AT", "REASON"}, indent(rows))
		}
	}
}

// indent indents the first column of rows under an indented header.
func indent(rows [][]string) [][]string {
	for _, r := range rows {
		r[0] = "  " + r[0]
	}
	return rows
}
