// Package headoffice is the head office's end of magicsync's HTTP
// transport: the http.Handler serving the sync endpoints over a
// *server.Server (Handler), or over any Engine (NewHandler). The engines
// move opaque bytes; the handler only moves them, authenticates the
// replica on every call and maps failures to status codes a client can act
// on. The replica's end, the client, is package httpsync, which links
// nothing of the server.
//
// Mounted beside the host's own routes:
//
//	mux.Handle("/sync/", headoffice.Handler(s, headoffice.HandlerOptions{}))
//
// # Protocol
//
// Four calls, each under the replica's id and each carrying the replica's
// token as "Authorization: Bearer <token>":
//
//	GET  /sync/{id}/next[?wait=<seconds>]
//	     Long-polls for the next message to the replica, at most the
//	     handler's PollWait (or wait, when shorter: seconds in plain
//	     decimal, "25" or "0.5"; anything else is refused with 400). A
//	     message already due is answered at once, even with wait=0. 204
//	     when none came; 200 with the message as the body and its id in
//	     the Message-Id header otherwise. The same message comes again
//	     until acknowledged.
//	POST /sync/{id}/ack/{msg}
//	     Acknowledges message msg (a decimal uint64): 204. A client
//	     acknowledges only once the message is applied and committed.
//	POST /sync/{id}/up
//	     Files one upward message, the body, in the lane the Sync-Lane
//	     header names ("main" when absent): 204 once it is filed.
//	GET  /sync/{id}/schema
//	     The server's declarations as the protocol's Schema message: 200.
//
// # Status codes
//
// Every refusal has a short text/plain reason as its body. 5xx, 408 and 429
// are retryable: the same call may succeed later (503 comes with a
// Retry-After header). Every other 4xx is permanent for that request — but
// none of them judges the rows an upward message carries (the engine does
// that in its Filed confirmation), so httpsync.Client keeps the rows queued
// whatever the code: it sends smaller messages after a 413, waits long
// after a refusal naming an older protocol, and backs off, warns and shows
// the reason in the replica's Status after any other (see its Send):
//
//	400  a malformed request, or a message the engine refuses for good
//	     (malformed, naming another replica or lane; a newer protocol, when
//	     the Sync-Protocol header names the one the engine speaks)
//	401  the token is missing or is not the replica's; nothing was done
//	403  the token is valid, but another replica's; nothing was done
//	404  the replica is unknown to the engine (after authentication), or
//	     no such path
//	405  a wrong method for the path
//	408  the body of an upload came too slowly (retryable; see below)
//	413  the body is larger than the handler's MaxBodyBytes, or the upload
//	     holds more rows, or more refusals, than the engine takes in one
//	429  the replica has MaxUploads uploads in flight already, or the
//	     request's address failed authentication too often: its token
//	     was not checked (retryable, with Retry-After)
//	500  an unexpected engine failure (retryable)
//	503  the engine is unavailable for now, e.g. its database (retryable)
//
// Which engine error becomes which status is the job of a classifier; see
// HandlerOptions.Classify, Classifier and ForServer.
//
// # Limits per replica
//
// One replica cannot take more than its share of the head office, however
// many calls it makes (once authenticated; the limits count a replica's
// calls, not a client's connections):
//
//   - One long-poll at a time: a new GET next of a replica ends its older
//     one, answered 204 at once, and the engine is asked by one at a time.
//   - At most HandlerOptions.MaxUploads uploads in flight (2 by default),
//     from their body to the engine's answer; one more is answered 429
//     with Retry-After. They reach the engine one at a time, the others
//     waiting in the handler, so that one replica's filing holds at most
//     one connection of the engine's database pool.
//   - An upload's body must arrive at an average of MinBodyRate bytes a
//     second after BodyGrace (8 KiB a second after 10 s by default), or
//     it is answered 408 and its connection closed.
//
// The headers of a request are the http.Server's to bound: set its
// ReadHeaderTimeout (and, if any, a WriteTimeout above PollWait).
//
// # Stopping
//
// http.Server.Shutdown waits for the requests in flight, long-polls
// included, for up to PollWait. To stop at once, give the server a
// BaseContext that ends when it stops: a long-poll whose request context
// ends is answered 503 with Retry-After, and its client polls again later.
//
// # Tokens
//
// A token is a secret the engine checks for one replica. To tell a token
// that is wrong (401) from one that is right but another replica's (403),
// the handler reads which replica a token claims from its form,
// "<replica uuid>.<secret>" (see httpsync.JoinToken, NewToken and
// TokenReplica):
// when the token does not authenticate the replica of the URL but does
// authenticate the replica it claims, the answer is 403. A token of any
// other form still works for its own replica; misused, it is answered 401.
// A replica id the engine does not know is answered 401 too, so that the
// ids of replicas cannot be probed.
//
// Tokens cannot be guessed at the rate requests come: a source address
// that failed authentication HandlerOptions.MaxAuthFailures times (20 by
// default) has its requests answered 429 with Retry-After, before their
// token is checked, until it earns a failure back (one a second by
// default). Other addresses are served as ever; the handler keeps a
// bounded table of the addresses that failed. Behind a reverse proxy, name
// the client's address with HandlerOptions.ClientAddress.
//
// With ForServer, the secret is the one server.Server.Credentials issued
// and the replica presents httpsync.JoinToken(id, secret); ForServer hands
// the server the secret part alone.
//
// # Metrics
//
// HandlerOptions.Observer, when set, is told of every request answered —
// its endpoint (next, ack, up, schema; other for a path not served), its
// status and how long it took — and of the long-polls open; one that is
// also an AuthObserver is told of every failed authentication, refused
// or throttled. Package metrics has one that exports them to Prometheus;
// without one the handler counts nothing.
package headoffice
