// Package dashboard shows where every replica of a magicsync server stands,
// as a web page readable on a phone and as JSON for scripts.
//
// Mount the handler New returns wherever the host serves its own
// administration pages. What it shows (replica ids, table names, rejected
// rows' keys and reasons, errors from the database) is for operators, so it
// is protected by default:
//
//	mux.Handle("/sync/dashboard/", http.StripPrefix("/sync/dashboard", dashboard.New(s, dashboard.Options{
//		Title:     "Shop registers",
//		Names:     func(id uuid.UUID) string { return registerNames[id] },
//		Authorize: dashboard.BasicAuth("operator", password),
//	})))
//
// # Who may see it
//
// [Options.Authorize] decides, per request; a request it refuses gets 401
// Unauthorized and nothing is read. [BasicAuth] makes one checking a user
// and password (in constant time), and its refusals ask the browser for
// them. To put the dashboard behind the host's own authentication, either
// give Authorize a function checking the host's session or token, or wrap
// the handler in the host's own middleware and set [Options.Public]:
//
//	mux.Handle("/admin/sync/", requireAdmin(http.StripPrefix("/admin/sync", dashboard.New(s, dashboard.Options{Public: true}))))
//
// With neither, every request is refused 401 with a page saying how to
// configure it. Serving the dashboard on a listener of its own, reachable
// only by operators, is another way (with Public).
//
// # What it serves
//
// Paths are relative to where the handler is mounted (use [http.StripPrefix]):
//
//   - GET / — the page: a summary of the fleet (replicas, online, messages
//     queued, rows on their way up, rows filed, rejected rows, backlog), then
//     one card per replica: its name and id; online or offline and when it
//     was last seen; whether it is being provisioned, and why (a new replica,
//     a changed group, a digest that disagrees); messages queued for it and
//     the last one it applied; per table what it holds of what it should
//     ("holds 5 of 7"), the rows written on it and not yet sent, and the rows
//     filed from it; its wishes counted by where they stand (refused,
//     waiting, superseded, pending, applied; a refused wish needs
//     attention); its backlog and build; and every row one side could not
//     take, with its table, key, side and reason (the page lists the first
//     [MaxRejectedShown] of a replica and counts them all; status.json has
//     those the Source lists — a [server.Server], the latest
//     [server.StatusRejected], with their total). A table is shown as its
//     declaration says: a catalog by what is held of it, a record or setting
//     by its rows on their way up and filed. Rows on their way up are the
//     replica's last report: shown "as of" its time, and marked stale while
//     the replica is offline.
//   - GET /status.json — the same, as an [Overview].
//   - GET /healthz — 200 "ok" when the database answers, 503 "unavailable:
//     database unreachable since <time>" when it does not. It is answered to
//     anyone, without Authorize (a load balancer's probe carries no
//     credentials), and is cheap: it reads no status, only pings the
//     database when the Source is a [Pinger] (a [server.Server] is), else
//     says what the last reading of the status found.
//
// Every request reads the status afresh from the Source — for a
// [server.Server], one SQL query, bounded whatever the replicas reported —
// so the counts are exact and live; nothing is cached. When the Source
// fails, the page and status.json answer 503 (with Retry-After) and say
// since when the database has been unreachable (the first failure since it
// last answered) and what failed; the page keeps refreshing until it
// answers again.
//
// # Order and attention
//
// A replica needs attention when it is offline, being provisioned, has
// rejected rows or a backlog, or holds a different number of rows of a table
// than it should (which is also what a replica catching up looks like).
// Those replicas come first, each saying why ([Replica.Attention]); then the
// others. Within each group, replicas are ordered by name, numbers in names
// compared as numbers ("register 2" before "register 10"), then by id.
//
// # Refreshing
//
// The page refreshes itself every [Options.Refresh] (2 s by default) with a
// few lines of inline script that fetch the page again and swap its content
// in place, so scrolling is kept, a dashboard left open in a background tab
// does not query the database, and a lost connection is shown and retried.
// Without JavaScript, a <meta http-equiv="refresh"> does the same by
// reloading. The page loads nothing from the network: its style and script
// are inline, allowed by a Content-Security-Policy that names their hashes
// and nothing else.
package dashboard
