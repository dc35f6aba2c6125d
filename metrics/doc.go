// Package metrics exports magicsync's figures to Prometheus: those an
// operator alerts on, on both sides.
//
// On the head office, NewServerCollector reads at each scrape where the
// replicas stand, in one statement (server.Server.Fleet: replicas known,
// online and being provisioned, the messages queued per replica as a
// histogram over the replicas, the wishes by state), and what this
// process counted since it started (server.Server.Stats: the planning
// passes' durations and rows, the uploads and rows filed, the rows
// refused by reason, the digests that disagreed). NewHTTP counts what the
// HTTP transport's handler answered, per endpoint and status, the
// long-polls open, and the failed authentications (refused, or throttled
// because their address failed too often): give it to
// headoffice.HandlerOptions.Observer and register it. No server metric
// is labelled per replica, so that a fleet of thousands costs a few
// series; Server.Status tells one replica from another.
//
// A replica's figures are in the package replicametrics, which a device
// imports without linking the head office.
//
// The metrics are named magicsync_server_* and magicsync_http_*, with
// their units in their names (_seconds, _total, _rows).
//
// A counter of Stats counts what this process did: with several processes
// serving one database, sum them. The fleet's figures are the database's,
// the same from every process: take one (max, say), not their sum.
package metrics
