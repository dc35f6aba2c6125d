// Package dashboard shows where every replica of a magicsync server stands,
// as a web page readable on a phone and as JSON for scripts.
//
// Mount the handler New returns wherever the host serves its own
// administration pages, behind the host's own authentication: the handler
// checks no credentials itself, and what it shows (replica ids, table names,
// rejected rows' keys and reasons, errors from the database) is for
// operators.
//
//	mux.Handle("/sync/dashboard/", http.StripPrefix("/sync/dashboard", dashboard.New(s, dashboard.Options{
//		Title: "Shop registers",
//		Names: func(id uuid.UUID) string { return registerNames[id] },
//	})))
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
//     filed from it; its backlog and build; and every row one side could not
//     take, with its table, key, side and reason (the page lists the first
//     [MaxRejectedShown] of a replica; status.json has them all).
//   - GET /status.json — the same, as an [Overview].
//   - GET /healthz — 200 "ok: N replicas" when the [Source] answers, 503 with
//     the error when it does not.
//
// Every request reads the status afresh from the Source — for a
// [server.Server], one SQL query — so the counts are exact and live; nothing
// is cached. When the Source fails, the page and status.json answer 503 and
// say what failed, and the page keeps refreshing until it answers again.
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
