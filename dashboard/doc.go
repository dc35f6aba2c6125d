// Package dashboard shows where every replica of a magicsync server stands,
// as a web page readable on a phone and as JSON for scripts.
//
// Mount the handler New returns wherever the host serves its own
// administration pages. What it shows (replica ids, table names, rejected
// rows' keys and reasons, errors from the database) is for operators, so it
// is protected by default:
//
//	mux.Handle("/sync/dashboard/", http.StripPrefix("/sync/dashboard", dashboard.New(s, dashboard.Options{
//		Title:       "Shop registers",
//		Names:       func(id uuid.UUID) string { return registerNames[id] },
//		TableLabels: map[string]string{"receipts": "sales", "footers": "receipt footer"},
//		ServerName:  "the head office",
//		Authorize:   dashboard.BasicAuth("operator", password),
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
//   - GET / — the page: a summary of the fleet in sentences ("3 replicas,
//     2 online; 1 needs attention, shown first", "sales waiting to reach
//     the head office: 2, as of 14:03", updates waiting to be sent, the
//     wishes counted by state; rejected rows and the backlog each
//     explained in a sentence, with what to do), then one card per
//     replica: its name; online, or offline since when; whether it is
//     being loaded afresh, and why; updates waiting to reach it; per table
//     what it holds of what it should ("holds 5 of 7"), the rows written
//     on it and not yet sent ("as of" its last report, marked stale while
//     it is offline), and the rows received from it; its wishes counted by
//     where they stand (refused, waiting, superseded, on its way, carried
//     out; a refused wish needs attention), linking to its wish list; its
//     backlog; its software, by a short name; and every row one side could
//     not take, with its table, key, side and reason (the page lists the
//     first [MaxRejectedShown] of a replica and counts them all;
//     status.json has those the Source lists — a [server.Server], the
//     latest [server.StatusRejected], with their total). The engineer's
//     detail (ids, message numbers, the full build, table names) is one
//     click away, in a <details> element. A table is shown as its
//     declaration says: a catalog by what is held of it, a record or
//     setting by its rows on their way up and received; and by the word
//     [Options.TableLabels] gives it.
//   - GET /wishes — the wish list, when the Source is a [WishLister] (a
//     [server.Server] is): every wish (of the replica, setting table or
//     group the query's replica, table and group name), those needing
//     attention first — refused, then waiting (the one waiting longest
//     first), then superseded — then those on their way and carried out;
//     each with the value wished, the value reported (when the Source is a
//     [SettingReader]), where it stands and why, who asked (its note), when
//     it was wished and answered. One Wishes read, and one Reported read
//     per setting table listed.
//   - GET /setting?table=name — a setting's page: per row, what its replica
//     reports (with a [SettingReader]) beside what was wished, and where the
//     wish stands. The table is named as its replicas name it ("settings")
//     or with its schema ("shop.settings"). A name of no setting table
//     (the Source's error wraps [magicsync.ErrNotDeclared] or
//     [server.ErrNotASetting]) is answered 404 with a page saying so, here
//     and on the wish list: bad input, not an outage.
//   - GET /rollouts — when the Source is a [RolloutLister] (a
//     [server.Server] is): the rollouts of a value to many replicas, the
//     newest first, each with how far it got, its wishes counted by state,
//     the refusal most given, and why it stopped. When the Source is also
//     a [RolloutStarter] (a [server.Server] is), above them, "Roll out a
//     new value": a form per setting table, with its key columns (but the
//     replica's own) and the columns a wish sets, to every replica or a
//     group's, with an optional first stage, a percentage of refusals to
//     stop above (judged after so many answers) and who asks.
//   - POST /rollouts — with a [RolloutStarter]: starts the rollout the
//     form describes, in one call (one transaction), and sends the browser
//     to it (303 to rollouts#rollout-<id>); or shows the form again, as
//     filled in, saying what is wrong (400, or 503 when the database does
//     not answer). Authorize's credentials go with any request a browser
//     sends, another site's form's too, so a POST must carry the form's
//     token (drawn at random when the handler is made: a page served
//     before a restart must be loaded again) and, when the browser says
//     where it comes from (Sec-Fetch-Site, Origin), come from the
//     dashboard's own origin; it is refused 403 otherwise. Without a
//     RolloutStarter, no form is shown and POST is answered 405.
//   - GET /status.json — the overview, as an [Overview].
//   - GET /healthz — 200 "ok" when the database answers, 503 "unavailable:
//     database unreachable since <time>" when it does not. It is answered to
//     anyone, without Authorize (a load balancer's probe carries no
//     credentials), and is cheap: it reads no status, only pings the
//     database when the Source is a [Pinger] (a [server.Server] is), else
//     says what the last reading of the status found.
//
// Every request reads afresh from the Source — for the overview one
// Status (for a [server.Server], one SQL query, bounded whatever the
// replicas reported); for the wish list and a setting's page one Wishes —
// so the counts are exact and live; nothing is cached. When the Source
// fails (but for a name of no setting table), the pages and status.json
// answer 503 (with Retry-After) and say
// since when the database has been unreachable (the first failure since it
// last answered) and what failed; the page keeps trying until it answers
// again.
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
// # Live updates
//
// A page updates itself in place, without being loaded again: its script
// opens an EventSource on the page's own address, and the dashboard
// answers it with server-sent events. Every [Options.Refresh] (2 s by
// default) it reads what the page shows, as a GET would, and when
// something changed it sends one small event: the parts of the page that
// changed (a replica's card, the summary, a wish), rendered, and the order
// of all of them. While nothing changes, nothing is sent; a page left in a
// background tab closes its EventSource, so that it reads nothing; a lost
// connection is shown and retried. Times are shown to the minute ("as of
// 14:03", "5 min ago") so that a part changes when what it says does.
//
// Without JavaScript, a <meta http-equiv="refresh"> reloads the page
// every Refresh instead, and a "reload" link does it at once: every page
// is whole as served. The page loads nothing from the network: its style
// and script are inline, allowed by a Content-Security-Policy that names
// their hashes and nothing else.
package dashboard
