package server_test

import (
	"context"
	"log"
	"net/http"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

// A head office that leaves the engine's migrations to it: Open applies
// its schema steps and triggers, then the planning loop runs and the sync
// endpoints are served until Ctrl-C.
func ExampleOpen() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	codecs, err := magicsync.NewCodecs(Product{})
	if err != nil {
		log.Fatal(err)
	}
	s, err := server.Open(ctx, pool, codecs, server.Options{Replicas: "shop.registers(id)"})
	if err != nil {
		log.Fatal(err) // says what the host's tables lack
	}
	go func() { _ = s.Run(ctx) }()
	srv := &http.Server{Addr: ":8080", Handler: headoffice.Handler(s, headoffice.HandlerOptions{})}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
