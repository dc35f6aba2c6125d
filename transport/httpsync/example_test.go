package httpsync_test

import (
	"context"
	"database/sql"
	"log"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

// The head office serves the protocol over its engine; each register runs
// a client, which is both its replica's uplink and its receive loop.
func Example() {
	ctx := context.Background()

	// The head office. The secret Credentials issues is handed to the
	// register joined with its id, so that the handler can tell a wrong
	// token (401) from another register's (403).
	var s *server.Server // from server.New
	register := uuid.MustParse("0190e5a4-7f3c-7d2e-9a41-5b6c7d8e9f01")
	secret, err := s.Credentials(ctx, register)
	if err != nil {
		log.Fatal(err)
	}
	token := httpsync.JoinToken(register, secret)
	go func() {
		h := headoffice.Handler(s, headoffice.HandlerOptions{Logger: slog.Default()})
		// WriteTimeout must outlast a long-poll (25 s by default).
		srv := &http.Server{Addr: ":8080", Handler: h, ReadTimeout: time.Minute, WriteTimeout: time.Minute}
		log.Fatal(srv.ListenAndServe())
	}()

	// A register: its client, with a switch a demo flips to unplug it.
	var db *sql.DB               // its SQLite database, opened with durable settings
	var codecs *magicsync.Codecs // the shop's declarations
	var plugged atomic.Bool
	plugged.Store(true)
	client := httpsync.NewClient("http://head-office:8080", register, token, httpsync.ClientOptions{Online: plugged.Load})
	r, err := replica.New(ctx, db, codecs, replica.Me(register), client, replica.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = r.Run(ctx) }() // what the register writes goes up through client.Send
	// What the head office sends is applied, then acknowledged.
	if err := client.ReceiveLoop(ctx, r); err != nil {
		log.Fatal(err)
	}
}
