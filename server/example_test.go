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
// The replica's word of the last message it applied comes with each poll;
// the zero Applied says nothing.
func ExampleEndpoint_Next() {
	var s *server.Server // from server.New
	e := s.Endpoint()
	register := uuid.MustParse("0190e5a4-7f3c-7d2e-9a41-5b6c7d8e9f01")
	var applied server.Applied // the replica's word, as it came with the poll
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	msg, ok, err := e.Next(ctx, register, applied)
	if err != nil {
		log.Fatal(err)
	}
	if !ok {
		return // nothing came before the deadline: the replica asks again
	}
	// … msg.Body goes to the replica, which applies it …
	if err := e.Ack(context.Background(), register, msg.ID); err != nil {
		log.Printf("not acknowledged, so it is sent again: %v", err)
	}
}

// What a transport does with what a replica sends up: file it, and tell a
// refusal for good from a failure worth retrying.
func ExampleEndpoint_Receive() {
	var s *server.Server // from server.New
	register := uuid.MustParse("0190e5a4-7f3c-7d2e-9a41-5b6c7d8e9f01")
	var body []byte // the replica's upward message, as it came
	err := s.Endpoint().Receive(context.Background(), register, "main", body)
	switch {
	case err == nil:
		// Filed and committed; the Filed confirmation is on its way down.
	case errors.Is(err, server.ErrPermanent):
		log.Printf("refused for good (answer 4xx): %v", err)
	default:
		log.Printf("not filed now, send it again later (answer 503): %v", err)
	}
}

// RegisterSetting is one of a register's settings: the register owns its
// value, and the head office may wish it another.
type RegisterSetting struct {
	RegisterID uuid.UUID `db:"register_id" sync:"key"`
	Name       string    `db:"name" sync:"key"`
	Value      string    `db:"value" sync:"desired"`
	ChangedAt  time.Time `db:"changed_at" sync:"version"`
}

func (RegisterSetting) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "shop", Name: "settings", Mirror: magicsync.Setting,
		Origin: "register_id", Apply: magicsync.IfUnchanged}
}

// An operator sets a register's setting from the page that showed it: the
// row as the page read it, with the value they typed. The register carries
// the wish out only while its setting is still what the operator saw.
func ExampleDesire() {
	ctx := context.Background()
	var s *server.Server // from server.New
	var seen RegisterSetting
	tx, err := s.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	seen.Value = "Thank you, come again"
	wished, err := server.Desire(ctx, s, tx, seen, "ann at the office")
	if err != nil {
		log.Fatal(err)
	}
	// … the host's own audit row, in the same transaction …
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	log.Printf("wish %d of %v is on its way to %v", wished.Number, wished.Key, wished.Replica)
}

// Where the wishes of a page's settings stand.
func ExampleWishesOf() {
	ctx := context.Background()
	var s *server.Server   // from server.New
	var pool *pgxpool.Pool // the host's
	var keys []magicsync.Key
	wishes, err := server.WishesOf[RegisterSetting](ctx, s, pool, keys)
	if err != nil {
		log.Fatal(err)
	}
	for _, w := range wishes {
		log.Printf("%s → %s: %v %s", w.Wanted.Name, w.Wanted.Value, w.State, w.Reason)
	}
}

// The fleet's wishes, those needing attention first, and how many stand
// where.
func ExampleServer_Wishes() {
	ctx := context.Background()
	var s *server.Server // from server.New
	list, err := s.Wishes(ctx, server.WishScope{Table: "settings"})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%d applied, %d waiting, %d refused", list.Counts[server.WishApplied], list.Counts[server.WishWaiting], list.Counts[server.WishRefused])
	for _, w := range list.Wishes {
		log.Printf("%v %v: %v %s", w.Replica, w.Key, w.State, w.Reason)
	}
}

// The head office asks register 2 to print a test page, with a deadline,
// in the same transaction as its own audit row; later it reads what came
// of it. (The server runs with Options.Commands set.)
func ExampleIssueCommand() {
	ctx := context.Background()
	var s *server.Server   // from server.New, with Options.Commands
	var pool *pgxpool.Pool // the host's
	register2 := uuid.MustParse("0190e5a4-7f3c-7d2e-9a41-5b6c7d8e9f02")
	tx, err := s.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	id, err := server.IssueCommand(ctx, s, tx, server.CommandRequest{
		Replica:  register2,
		Name:     "print-test-page",
		Params:   []byte(`{"copies":1}`),
		Note:     "ann at the office",
		Deadline: time.Now().Add(time.Hour),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	c, err := s.CommandOf(ctx, pool, id)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("command %s: %v %s %s", c.ID, c.State, c.Reason, c.Result)
}
