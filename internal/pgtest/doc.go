// Package pgtest provides PostgreSQL for the module's tests, benchmarks and
// demo.
//
// # Which PostgreSQL
//
// Tests, benchmarks and [Ensure] find a server the same way, in this order:
//
//  1. $DATABASE_URL, when it is set. It must answer: pgtest does not fall
//     back to anything else when it does not.
//  2. The local server at 127.0.0.1:5432, when it answers within a couple of
//     seconds to user postgres, database postgres, without a password.
//  3. A private cluster started from the PostgreSQL binaries installed on the
//     machine (initdb and postgres, found in $PATH or in
//     /usr/lib/postgresql/*/bin and similar places, the newest version first).
//     It listens on no TCP port, only on a Unix socket in its own directory,
//     and when the process runs as root it runs as the OS user postgres. For
//     tests it lives in a temporary directory with fsync off and is stopped
//     and removed when the tests end.
//
// Setting MAGICSYNC_PGTEST_FORCE_LOCAL_CLUSTER=1 skips steps 1 and 2, to use
// a private cluster on a machine that runs a server. (The package's own tests
// reach step 3 as a machine without a server does: $DATABASE_URL unset and
// nothing listening where they look for the local server.)
//
// The tests that need initdb skip without it, saying so, except under CI
// (the environment variable CI set), where they fail.
//
// # Using it from tests
//
// A package whose tests need PostgreSQL calls [Main] from its TestMain, so that
// a private cluster started for its tests is stopped when they end:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// Each test then takes a database of its own, created empty and dropped (WITH
// (FORCE)) when the test ends, so tests may run in parallel:
//
//	pool := pgtest.NewPool(t)       // a *pgxpool.Pool on a fresh database
//	url := pgtest.NewDatabase(t)    // or just its connection string
//
// A test that needs a database already holding a schema (the engine's
// migrated tables, a host's tables) takes a copy of a [Template], which the
// test binary prepares once and clones for each test with CREATE DATABASE
// ... TEMPLATE, much faster than preparing each database anew:
//
//	var shop = pgtest.NewTemplate("shop", func(ctx context.Context, url string) error { ... })
//	pool := shop.NewPool(t)         // a fresh, prepared database
//
// The server is found, or started, lazily by the first test that asks for it,
// and shared by every test of the test binary. That is the one piece of
// package-level state in the module: a server value guarded by a
// sync.Mutex, kept here because a test binary's tests have no other common
// owner than TestMain. Nothing outside tests reaches it; [Ensure] keeps no
// state.
//
// # Using it from a program
//
// [Ensure] is the same search for programs such as the demo: it returns a
// server-level connection string and a function that stops whatever it
// started. Its private cluster lives in a directory the caller names and is
// kept between runs, with fsync on, so running the program again resumes
// where it stopped. [EnsureLogical] finds a server with wal_level=logical,
// as capture by logical replication needs: the one Ensure would use when
// it is so configured, else a private cluster started with
// wal_level=logical, durable whether kept or temporary. [DropSlots] drops
// the replication slots a database on it holds, which PostgreSQL requires
// before the database is dropped.
package pgtest
