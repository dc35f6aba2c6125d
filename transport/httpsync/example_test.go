package httpsync_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"os/signal"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/httpsync"
)

// A register in one call: its SQLite file, its tables, the engine and its
// client, synced until the program is interrupted. The program imports a
// SQLite driver (modernc.org/sqlite, say); the token is the one the head
// office issued it.
func ExampleOpenReplica() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var codecs *magicsync.Codecs // the shop's declarations, shared with the head office
	token := os.Getenv("REGISTER_TOKEN")

	reg, err := httpsync.OpenReplica(ctx, "register.db", "https://head-office.example", token, codecs, httpsync.ReplicaOptions{
		Schema: `CREATE TABLE IF NOT EXISTS receipts (register_id TEXT NOT NULL, id TEXT NOT NULL,
			total_cents INTEGER NOT NULL, rung_at TIMESTAMP NOT NULL, PRIMARY KEY (register_id, id))`, // the register's own tables
	})
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	// The till writes to reg.DB as it would without the engine.
	if err := reg.Run(ctx); err != nil { // until Ctrl-C
		log.Println(err)
	}
}

// The calls OpenReplica makes, for a program that opens the database
// itself or unplugs its client: the client is both the replica's uplink
// and its receive loop.
func ExampleNewClient() {
	ctx := context.Background()
	register := uuid.MustParse("0190e5a4-7f3c-7d2e-9a41-5b6c7d8e9f01")
	token := os.Getenv("REGISTER_TOKEN")  // httpsync.JoinToken(register, secret), from the head office
	var codecs *magicsync.Codecs          // the shop's declarations
	dsn, err := replica.DSN("", "reg.db") // WAL, synchronous FULL, recursive triggers…
	if err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open(replica.DriverModernc, dsn)
	if err != nil {
		log.Fatal(err)
	}
	if err := replica.Install(ctx, db, codecs); err != nil {
		log.Fatal(err)
	}

	// A switch a demo flips to unplug the register.
	var plugged atomic.Bool
	plugged.Store(true)
	client := httpsync.NewClient("http://head-office:8080", register, token, httpsync.ClientOptions{Online: plugged.Load})
	r, err := replica.New(ctx, db, codecs, replica.Me(register), client, replica.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = r.Run(ctx) }() // what the register writes goes up through client.Send
	// What the head office sends is applied, then acknowledged.
	if err := client.ReceiveLoop(ctx, r.Endpoint()); err != nil {
		log.Fatal(err)
	}
}
