package natssync_test

import (
	"context"
	"database/sql"
	"log"
	"sync"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/natssync"
	"github.com/magicsync/magicsync/transport/natssync/embedded"
	"github.com/magicsync/magicsync/transport/natssync/headoffice"
)

// A head office and a register over a NATS server embedded in the
// process. In real life they are programs of their own: the head office
// calls headoffice.Serve (in as many processes as it likes), the register
// natssync.Connect, NewClient, replica.New and ReceiveLoop.
func Example() {
	ctx := context.Background()
	var (
		s        *server.Server    // server.New over the head office's database
		db       *sql.DB           // the register's SQLite database, replica.Install'ed
		codecs   *magicsync.Codecs // the declared tables
		register uuid.UUID         // a row of the replicas table
		secret   string            // s.Credentials(ctx, register)
	)
	ns, err := embedded.Start(embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer ns.Shutdown()

	// The head office.
	office, err := nats.Connect(ns.URL())
	if err != nil {
		log.Fatal(err)
	}
	defer office.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Go(func() {
		if err := headoffice.Serve(ctx, office, headoffice.ForServer(s), headoffice.Options{}); err != nil {
			log.Print(err)
		}
	})

	// The register.
	nc, err := natssync.Connect(ns.URL(), register)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	client := natssync.NewClient(nc, register, natssync.JoinToken(register, secret), natssync.ClientOptions{})
	r, err := replica.New(ctx, db, codecs, replica.Me(register), client, replica.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	wg.Go(func() { _ = r.Run(ctx) })
	wg.Go(func() { _ = client.ReceiveLoop(ctx, r.Endpoint()) })
}
