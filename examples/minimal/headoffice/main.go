// Command headoffice is the minimal head office, over $DATABASE_URL. The
// first time, it adds a register and writes its token to -token-file.
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/examples/minimal/tables"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync"
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "the address to serve the sync endpoints at")
	tokenFile := flag.String("token-file", "register.token", "where a new register's token is written, the first time")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	check(err)
	defer pool.Close()
	_, err = pool.Exec(ctx, tables.HeadOfficeSQL) // the host's own tables: its migrations' job
	check(err)
	codecs, err := tables.Codecs()
	check(err)
	s, err := server.Open(ctx, pool, codecs, server.Options{Replicas: "shop.registers(id)"}) // and the engine's
	check(err)
	if _, err := os.Stat(*tokenFile); os.IsNotExist(err) { // a first register, and its token
		var id uuid.UUID
		check(pool.QueryRow(ctx, `INSERT INTO shop.registers VALUES (gen_random_uuid()) RETURNING id`).Scan(&id))
		secret, err := s.Credentials(ctx, id) // only its hash is kept: hand it over once
		check(err)
		check(os.WriteFile(*tokenFile, []byte(httpsync.JoinToken(id, secret)), 0o600))
	}
	ln, err := net.Listen("tcp", *addr)
	check(err)
	srv := &http.Server{Handler: headoffice.Handler(s, headoffice.HandlerOptions{}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // until Close
	log.Printf("serving the sync endpoints at http://%s/sync/", ln.Addr())
	check(s.Run(ctx)) // plans what each register should hold, until Ctrl-C
	check(srv.Close())
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
