// Command register is the minimal register: a SQLite file synced with the
// head office, ringing up a sale every -every. It links nothing of the
// head office's (no server, no PostgreSQL driver).
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	_ "modernc.org/sqlite" // the SQLite driver, pure Go

	"github.com/magicsync/magicsync/examples/minimal/tables"
	"github.com/magicsync/magicsync/transport/httpsync"
)

func main() {
	url := flag.String("server", "http://127.0.0.1:8080", "the head office")
	tokenFile := flag.String("token-file", "register.token", "the token the head office issued this register")
	path := flag.String("db", "register.db", "the register's SQLite file")
	every := flag.Duration("every", 2*time.Second, "how often a sale is rung up")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	token, err := os.ReadFile(*tokenFile)
	check(err)
	codecs, err := tables.Codecs()
	check(err)
	reg, err := httpsync.OpenReplica(ctx, *path, *url, strings.TrimSpace(string(token)), codecs,
		httpsync.ReplicaOptions{CreateTables: true}) // its tables from the declarations, then the engine's
	check(err)
	defer reg.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { check(reg.Run(ctx)) }) // sends the sales up, applies what comes down, until Ctrl-C
	for tick := time.Tick(*every); ctx.Err() == nil; <-tick {
		var p tables.Product // the till sells the first product it holds, writing its own table
		if reg.DB.QueryRowContext(ctx, `SELECT id, name, price_cents FROM products ORDER BY name`).Scan(&p.ID, &p.Name, &p.PriceCents) == nil {
			_, err := reg.DB.Exec(`INSERT INTO sales VALUES (?, ?, ?, ?, ?)`, // a sale begun is written whole
				reg.ID.String(), uuid.NewString(), p.ID.String(), p.PriceCents, time.Now())
			check(err)
			log.Printf("sold %s for %d cents", p.Name, p.PriceCents)
		}
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
