package server_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/server"
)

// The head office: the engine's schema, the host's triggers, the engine,
// and its planning loop.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://127.0.0.1:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	codecs, err := magicsync.NewCodecs(Product{})
	if err != nil {
		log.Fatal(err)
	}
	// The engine's own sync_* objects: versioned steps, safe to run from
	// several processes at once.
	if err := server.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	opts := server.Options{Replicas: "shop.registers(id)"}
	// The triggers belong in the host's migrations, after its tables;
	// New says so, with the SQL to run, when they are missing or old.
	ddl, err := server.Triggers(codecs, opts)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, ddl); err != nil {
		log.Fatal(err)
	}
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		log.Fatal(err)
	}
	// Plans what each replica should hold, woken by the triggers' NOTIFY.
	go func() { _ = s.Run(ctx) }()

	// A register's secret, for the transport to check; only its hash is
	// kept.
	register := uuid.MustParse("0190e5a4-7f3c-7d2e-9a41-5b6c7d8e9f01")
	secret, err := s.Credentials(ctx, register)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("register %s: hand it its token (httpsync.JoinToken joins id and secret): %d characters", register, len(secret))
}

// What a transport does for a replica: hand it its next message, waiting
// for one up to a deadline, and take its acknowledgement once applied.
func ExampleServer_Next() {
	var s *server.Server // from server.New
	register := uuid.MustParse("0190e5a4-7f3c-7d2e-9a41-5b6c7d8e9f01")
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	msg, ok, err := s.Next(ctx, register)
	if err != nil {
		log.Fatal(err)
	}
	if !ok {
		return // nothing came before the deadline: the replica asks again
	}
	// … msg.Body goes to the replica, which applies it …
	if err := s.Ack(context.Background(), register, msg.ID); err != nil {
		log.Printf("not acknowledged, so it is sent again: %v", err)
	}
}

// What a transport does with what a replica sends up: file it, and tell a
// refusal for good from a failure worth retrying.
func ExampleServer_Receive() {
	var s *server.Server // from server.New
	register := uuid.MustParse("0190e5a4-7f3c-7d2e-9a41-5b6c7d8e9f01")
	var body []byte // the replica's upward message, as it came
	err := s.Receive(context.Background(), register, "main", body)
	switch {
	case err == nil:
		// Filed and committed; the Filed confirmation is on its way down.
	case errors.Is(err, server.ErrPermanent):
		log.Printf("refused for good (answer 4xx): %v", err)
	default:
		log.Printf("not filed now, send it again later (answer 503): %v", err)
	}
}
