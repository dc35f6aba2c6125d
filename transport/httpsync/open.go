package httpsync

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/replica"
)

// ReplicaOptions tune OpenReplica. The zero value is sensible throughout.
type ReplicaOptions struct {
	// Driver is the name the SQLite driver registered with database/sql:
	// replica.DriverModernc ("sqlite") or replica.DriverMattn ("sqlite3").
	// Empty means whichever of the two the program registered
	// (replica.SQLiteDriver), modernc.org/sqlite when both are.
	Driver string
	// CreateTables, when true, creates each declared table the database
	// lacks (replica.CreateTables): the declared columns and key, and the
	// foreign keys among declared tables the head office's tables have,
	// from its Schema message, asked for only when a table is missing — so
	// a first start needs the head office, and fails, retryably, without
	// it. A table that exists is left as it is. It runs before Schema and
	// Prepare. False leaves every table to the host.
	CreateTables bool
	// Schema, when set, is SQL run on the database before the engine
	// installs its own tables: the host's tables, which the engine
	// requires to exist (CREATE TABLE IF NOT EXISTS …). It runs at every
	// OpenReplica, so it must be idempotent.
	Schema string
	// Prepare, when set, runs on the database after Schema, before the
	// engine installs its own tables: the host creates or migrates its
	// tables there by code. It runs at every OpenReplica, so it must be
	// idempotent.
	Prepare func(ctx context.Context, db *sql.DB) error
	// Settings tune the replica's engine; see replica.Settings.
	Settings replica.Settings
	// Client tunes the HTTP client; see ClientOptions.
	Client ClientOptions
	// Logger, when set, receives the logs of the engine and of the client
	// whose own options (Settings.Logger, Client.Logger) name none. Nil
	// leaves those to their defaults (slog.Default()).
	Logger *slog.Logger
}

// Replica is a replica over a SQLite file that syncs with its head office
// over HTTP, as OpenReplica opened it: the engine (whose methods it has:
// Status, Nudge, OfferWishes…), its database, for the host's own reads and
// writes, and its client. Run syncs it; Close closes it.
type Replica struct {
	// Replica is the engine.
	*replica.Replica
	// DB is the SQLite database the replica is over. The host writes its
	// own rows there, as it would without the engine.
	DB *sql.DB
	// Client is the HTTP transport, the engine's uplink.
	Client *Client
	// ID is the replica's id, read from its token.
	ID uuid.UUID
}

// ErrTokenNamesNoReplica is returned by OpenReplica for a token that is
// not of the form "<replica uuid>.<secret>" (see JoinToken).
var ErrTokenNamesNoReplica = errors.New("magicsync/httpsync: the token names no replica")

// OpenReplica opens the replica over the SQLite file at path (created when
// missing) that syncs with the head office at url (under which /sync/...
// is served) with token, in one call: it opens the file with the settings
// the engine requires (replica.DSN) through the SQLite driver the program
// registered, takes the replica's id from the token (TokenReplica), makes
// the host's tables (CreateTables, Schema, Prepare), installs the
// engine's own (replica.Install), and opens the engine (replica.New) over
// the client (NewClient). Nothing is sent or received until Run.
//
// The program imports the SQLite driver; this package imports none. Those
// who open the database themselves, or whose token is of another form,
// call replica.DSN, replica.Install, NewClient and replica.New, and run
// the engine's Run and the client's ReceiveLoop.
func OpenReplica(ctx context.Context, path, url, token string, codecs *magicsync.Codecs, opts ReplicaOptions) (*Replica, error) {
	id, ok := TokenReplica(token)
	if !ok {
		return nil, fmt.Errorf(`%w: it is not "<replica uuid>.<secret>" (JoinToken); open the replica with replica.New and NewClient, naming its id`, ErrTokenNamesNoReplica)
	}
	driver := opts.Driver
	if driver == "" {
		d, err := replica.SQLiteDriver()
		if err != nil {
			return nil, err
		}
		driver = d
	}
	dsn, err := replica.DSN(driver, path)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("magicsync/httpsync: opening %s: %w", path, err)
	}
	r, err := openReplica(ctx, db, id, url, token, codecs, opts)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return r, nil
}

// openReplica is OpenReplica once the database is open; on an error the
// caller closes it.
func openReplica(ctx context.Context, db *sql.DB, id uuid.UUID, url, token string, codecs *magicsync.Codecs, opts ReplicaOptions) (*Replica, error) {
	if err := db.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("magicsync/httpsync: opening the replica's database: %w", err)
	}
	copts := opts.Client
	if copts.Logger == nil {
		copts.Logger = opts.Logger
	}
	client := NewClient(url, id, token, copts)
	if opts.CreateTables {
		if _, err := replica.CreateTables(ctx, db, codecs, client.Schema); err != nil {
			return nil, err
		}
	}
	if opts.Schema != "" {
		if _, err := db.ExecContext(ctx, opts.Schema); err != nil {
			return nil, fmt.Errorf("magicsync/httpsync: making the replica's tables (ReplicaOptions.Schema): %w", err)
		}
	}
	if opts.Prepare != nil {
		if err := opts.Prepare(ctx, db); err != nil {
			return nil, fmt.Errorf("magicsync/httpsync: preparing the replica's tables: %w", err)
		}
	}
	if err := replica.Install(ctx, db, codecs); err != nil {
		return nil, err
	}
	settings := opts.Settings
	if settings.Logger == nil {
		settings.Logger = opts.Logger
	}
	engine, err := replica.New(ctx, db, codecs, replica.Me(id), client, settings)
	if err != nil {
		return nil, err
	}
	return &Replica{Replica: engine, DB: db, Client: client, ID: id}, nil
}

// Run syncs the replica until ctx ends: it sends up what the host writes
// (the engine's Run) and applies what the head office sends, acknowledging
// each message once committed (the client's ReceiveLoop), side by side.
// It returns once both have returned, nil when ctx ended; offline, or
// refused by the head office, it keeps trying (see Client.Send and
// Client.ReceiveLoop), and the host's rows wait in the file.
func (r *Replica) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var sendErr error
	wg.Go(func() {
		defer cancel()
		sendErr = r.Replica.Run(ctx)
	})
	recvErr := r.Client.ReceiveLoop(ctx, r.Replica.Endpoint())
	cancel()
	wg.Wait()
	return errors.Join(sendErr, recvErr)
}

// Close releases the engine's statements and closes the database. Call it
// once Run has returned.
func (r *Replica) Close() error {
	return errors.Join(r.Replica.Close(), r.DB.Close())
}
