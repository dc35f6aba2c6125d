// Package httpsync is the replica's end of magicsync's HTTP transport: the
// client a device carries (Client), which sends up what its replica
// writes and takes what the head office sends down. It links nothing of
// the head office — neither package server nor PostgreSQL's driver — so
// that a register's, a kiosk's or a board's program holds the replica, its
// transport and a SQLite driver alone. The head office's end, the
// http.Handler serving the sync endpoints, is package headoffice.
//
// # A replica in one call
//
// OpenReplica opens a replica over a SQLite file with the settings the
// engine requires, for whichever SQLite driver the program registered,
// its id read from its token; its Run sends and receives until its
// context ends:
//
//	reg, err := httpsync.OpenReplica(ctx, "register.db", url, token, codecs, httpsync.ReplicaOptions{Schema: registerSQL})
//	if err != nil {
//		return err
//	}
//	defer reg.Close()
//	return reg.Run(ctx) // the till writes to reg.DB meanwhile
//
// # Protocol
//
// Four calls, each under the replica's id and each carrying the replica's
// token as "Authorization: Bearer <token>":
//
//	GET  /sync/{id}/next[?wait=<seconds>&applied=<id>&sha256=<hex>]
//	     Long-polls for the next message to the replica, saying which
//	     message it applied last: 200 with the message as the body and
//	     its id in the Message-Id header, or 204 when none came. The same
//	     message comes again until acknowledged.
//	POST /sync/{id}/ack/{msg}
//	     Acknowledges message msg, once it is applied and committed.
//	POST /sync/{id}/up
//	     Files one upward message, the body, in the lane the Sync-Lane
//	     header names ("main" when absent).
//	GET  /sync/{id}/schema
//	     The head office's declarations as the protocol's Schema message.
//
// 5xx, 408 and 429 are retryable; every other 4xx is permanent for that
// request, but none judges the rows an upward message carries, which the
// client keeps queued whatever the code (see Client.Send). Package
// headoffice lists the codes, and proto/PROTOCOL.md, section 11, the
// whole protocol.
//
// # Tokens
//
// A token is "<replica uuid>.<secret>" (JoinToken): the head office issues
// the secret (server.Server.Credentials) and hands the joined token to the
// device once. The replica's id is read from it (TokenReplica).
//
// # Client
//
// Client is the replica side beneath OpenReplica: it implements
// replica.Uplink (Send) and runs the receive loop (ReceiveLoop), which
// hands each message to the replica and acknowledges it only after the
// replica committed it. A program that opens its database itself calls
// replica.DSN, replica.Install, NewClient and replica.New, and runs the
// engine's Run beside the client's ReceiveLoop.
package httpsync
