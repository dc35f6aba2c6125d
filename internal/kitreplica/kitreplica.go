// Package kitreplica is the Go replica as the conformance kit starts it,
// whatever its transport: it reads the environment the kit sets (see
// package conformance/kit), opens the SQLite file the kit names as the
// engine requires, and runs package replica's engine, with the kit's
// settings and its command, over the transport its program hands it.
// conformance/goreplica (over HTTP) and
// transport/natssync/conformance/goreplica (over NATS) are each their
// transport's wiring around Run, so that the kit judges the same replica
// over both.
package kitreplica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/google/uuid"
	_ "modernc.org/sqlite" // the replica's SQLite driver, which Run opens

	"github.com/magicsync/magicsync/conformance/kit"
	"github.com/magicsync/magicsync/replica"
)

// The pace of the kit's Go replicas: their clients long-poll for a
// second and back off between 50 and 500 ms, so that a case's faults
// pass within its timeout.
const (
	PollWait   = time.Second
	BackoffMin = 50 * time.Millisecond
	BackoffMax = 500 * time.Millisecond
)

// Env is the kit's contract, as the environment carries it.
type Env struct {
	// URL is MAGICSYNC_URL, the head office's (or the front's) URL.
	URL string
	// Replica is MAGICSYNC_REPLICA, the replica's id.
	Replica uuid.UUID
	// Token is MAGICSYNC_TOKEN, the token the replica presents.
	Token string
	// DB is MAGICSYNC_DB, the SQLite file the replica must use.
	DB string
	// DigestsEvery, ResendAfter and WishesEvery are
	// MAGICSYNC_DIGESTS_EVERY, MAGICSYNC_RESEND_AFTER and
	// MAGICSYNC_WISHES_EVERY: 1 s, 2 s and 1 s when unset.
	DigestsEvery, ResendAfter, WishesEvery time.Duration
}

// ReadEnv reads the kit's contract from the environment. The first four
// variables must be set; an error names the one missing or malformed.
func ReadEnv() (Env, error) {
	var e Env
	var vals [4]string
	for i, name := range []string{"MAGICSYNC_URL", "MAGICSYNC_REPLICA", "MAGICSYNC_TOKEN", "MAGICSYNC_DB"} {
		v := os.Getenv(name)
		if v == "" {
			return Env{}, fmt.Errorf("$%s is not set: the conformance kit sets it (see package conformance/kit)", name)
		}
		vals[i] = v
	}
	e.URL, e.Token, e.DB = vals[0], vals[2], vals[3]
	id, err := uuid.Parse(vals[1])
	if err != nil {
		return Env{}, fmt.Errorf("$MAGICSYNC_REPLICA: %w", err)
	}
	e.Replica = id
	for _, d := range []struct {
		name      string
		into      *time.Duration
		otherwise time.Duration
	}{
		{"MAGICSYNC_DIGESTS_EVERY", &e.DigestsEvery, time.Second},
		{"MAGICSYNC_RESEND_AFTER", &e.ResendAfter, 2 * time.Second},
		{"MAGICSYNC_WISHES_EVERY", &e.WishesEvery, time.Second},
	} {
		if *d.into, err = duration(d.name, d.otherwise); err != nil {
			return Env{}, err
		}
	}
	return e, nil
}

// duration reads an optional duration of the contract.
func duration(name string, otherwise time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return otherwise, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("$%s: %w", name, err)
	}
	return d, nil
}

// Logger returns the logger of a kit's Go replica: warnings and errors,
// as text, on standard error, which the kit shows under -v.
func Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// Receiver takes the head office's messages: the engine's Endpoint, or
// what a replica broken on purpose puts in front of it. Its method is
// that of each transport's Receiver.
type Receiver interface {
	Receive(ctx context.Context, msg []byte) (replica.Received, error)
}

// Transport is the replica's end of a transport: the uplink the engine
// sends by, and the loop that takes the head office's messages.
type Transport struct {
	// Uplink sends the engine's messages up: the transport's client.
	Uplink replica.Uplink
	// ReceiveLoop takes the head office's messages, handing each to r,
	// until ctx ends: the client's ReceiveLoop.
	ReceiveLoop func(ctx context.Context, r Receiver) error
}

// Options change the replica Run runs. The zero value is the replica as
// it should be.
type Options struct {
	// Logger receives the engine's logs. Nil means Logger().
	Logger *slog.Logger
	// BeforeInstall, when set, is run on the database before the engine
	// is installed over it, to change its tables.
	BeforeInstall func(ctx context.Context, db *sql.DB) error
	// Receiver, when set, returns what the receive loop hands the
	// messages to in place of the engine's endpoint e.
	Receiver func(e replica.Endpoint, db *sql.DB) Receiver
}

// Run runs the replica env describes over t until ctx ends: it opens
// env.DB as the engine requires, installs the engine over the kit's
// catalog, and runs it and t's receive loop. It returns nil once ctx
// ended, else the first error of either.
func Run(ctx context.Context, env Env, t Transport, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = Logger()
	}
	codecs, err := kit.Codecs()
	if err != nil {
		return err
	}
	// What the engine requires of every connection: WAL, synchronous
	// FULL, recursive triggers, foreign keys.
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: env.DB}).EscapedPath()+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=recursive_triggers(1)&_pragma=foreign_keys(1)&_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer db.Close()
	if opts.BeforeInstall != nil {
		if err := opts.BeforeInstall(ctx, db); err != nil {
			return err
		}
	}
	if err := replica.Install(ctx, db, codecs); err != nil {
		return err
	}
	engine, err := replica.New(ctx, db, codecs, replica.Me(env.Replica), t.Uplink, replica.Settings{
		Idle: 100 * time.Millisecond, BackoffMin: BackoffMin, BackoffMax: BackoffMax,
		DigestsEvery: env.DigestsEvery, ResendAfter: env.ResendAfter, Logger: log,
		// The kit's settings live in the database alone: a wish is
		// carried out by writing it.
		Wishes: replica.Wishes{replica.Handle(replica.Direct[kit.Setting]{})}, WishesEvery: env.WishesEvery,
		// The kit's one command: echo, its result its params.
		Commands: replica.Commands{kit.EchoCommand: func(_ context.Context, c replica.Command) ([]byte, error) {
			return c.Params, nil
		}},
	})
	if err != nil {
		return err
	}
	defer engine.Close()
	var r Receiver = engine.Endpoint()
	if opts.Receiver != nil {
		r = opts.Receiver(engine.Endpoint(), db)
	}
	done := make(chan error, 1)
	go func() { done <- engine.Run(ctx) }()
	err = t.ReceiveLoop(ctx, r)
	if rerr := <-done; err == nil && !errors.Is(rerr, context.Canceled) {
		err = rerr
	}
	return err
}
