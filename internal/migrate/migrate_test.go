package migrate_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/magicsync/magicsync/internal/migrate"
	"github.com/magicsync/magicsync/internal/sqlitetest"
)

func TestReadRefusesStepsNotNumberedFromOneWithoutAGap(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		fs   fstest.MapFS
		want string
	}{
		{"a gap", fstest.MapFS{"m/001_a.sql": {}, "m/003_c.sql": {}}, `"003_c.sql" should be step 2`},
		{"a repeat", fstest.MapFS{"m/001_a.sql": {}, "m/001_b.sql": {}}, "should be step 2"},
		{"not from one", fstest.MapFS{"m/002_b.sql": {}}, "should be step 1"},
		{"a file misnamed", fstest.MapFS{"m/one.sql": {}}, `"one.sql" is not named NNN_name.sql`},
		{"not SQL", fstest.MapFS{"m/001_a.txt": {}}, "is not named NNN_name.sql"},
		{"none", fstest.MapFS{"m": {Mode: fs.ModeDir}}, "no migrations"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := migrate.Read(c.fs, "m")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Read = %v; want an error saying %q", err, c.want)
			}
		})
	}
	steps, err := migrate.Read(fstest.MapFS{"m/002_b.sql": {Data: []byte("B")}, "m/001_a.sql": {Data: []byte("A")}}, "m")
	if err != nil || len(steps) != 2 || steps[0] != (migrate.Step{Number: 1, Name: "001_a.sql", SQL: "A"}) || steps[1].SQL != "B" {
		t.Fatalf("Read = %+v, %v; want the two steps in order", steps, err)
	}
}

// sqliteStore records the steps in a table of a SQLite database, in the
// transaction q holds (a *sql.Tx, or a *sql.Conn in a transaction begun
// by hand), as the replica's engine does.
type sqliteStore struct {
	q interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}
}

func (s sqliteStore) Done(ctx context.Context) (int, error) {
	if _, err := s.q.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS steps (n INTEGER NOT NULL)"); err != nil {
		return 0, err
	}
	var n int
	err := s.q.QueryRowContext(ctx, "SELECT coalesce(max(n), 0) FROM steps").Scan(&n)
	return n, err
}

func (s sqliteStore) Apply(ctx context.Context, st migrate.Step) error {
	if _, err := s.q.ExecContext(ctx, st.SQL); err != nil {
		return err
	}
	_, err := s.q.ExecContext(ctx, "INSERT INTO steps (n) VALUES (?)", st.Number)
	return err
}

// up runs Up in a transaction of its own, committed only if it succeeds.
func up(t *testing.T, db *sql.DB, steps []migrate.Step, acceptAhead bool) (int, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	done, err := migrate.Up(ctx, steps, sqliteStore{tx}, acceptAhead)
	if err != nil {
		return done, err
	}
	return done, tx.Commit()
}

func TestUpRunsTheStepsADatabaseLacksOnceInOrder(t *testing.T) {
	t.Parallel()
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		t.Parallel()
		db := sqlitetest.Open(t, d)
		all := []migrate.Step{
			{Number: 1, Name: "001_a.sql", SQL: "CREATE TABLE a (x INTEGER)"},
			{Number: 2, Name: "002_b.sql", SQL: "INSERT INTO a (x) VALUES (2)"},
			{Number: 3, Name: "003_c.sql", SQL: "INSERT INTO a (x) VALUES (3)"},
		}
		if done, err := up(t, db, all[:2], false); err != nil || done != 2 {
			t.Fatalf("Up of two steps on a new database = %d, %v; want 2", done, err)
		}
		for range 2 {
			if done, err := up(t, db, all, false); err != nil || done != 3 {
				t.Fatalf("Up of three steps = %d, %v; want 3", done, err)
			}
		}
		var got string
		if err := db.QueryRow("SELECT group_concat(x) FROM (SELECT x FROM a ORDER BY rowid)").Scan(&got); err != nil || got != "2,3" {
			t.Fatalf("the steps wrote %q (%v); want each once, in order: 2,3", got, err)
		}
	})
}

func TestUpRefusesADatabaseALaterBuildSetUpUnlessAskedToAcceptIt(t *testing.T) {
	t.Parallel()
	db := sqlitetest.Open(t, sqlitetest.Modernc())
	all := []migrate.Step{
		{Number: 1, Name: "001_a.sql", SQL: "CREATE TABLE a (x INTEGER)"},
		{Number: 2, Name: "002_b.sql", SQL: "CREATE TABLE b (x INTEGER)"},
	}
	if _, err := up(t, db, all, false); err != nil {
		t.Fatal(err)
	}
	done, err := up(t, db, all[:1], false)
	var ahead *migrate.AheadError
	if !errors.As(err, &ahead) || ahead.Done != 2 || ahead.Latest != 1 || done != 2 {
		t.Fatalf("Up of an older build = %d, %v; want an AheadError at step 2, knowing 1", done, err)
	}
	if done, err := up(t, db, all[:1], true); err != nil || done != 2 {
		t.Fatalf("Up accepting a later build's database = %d, %v; want 2 and no error", done, err)
	}
}

func TestAStepThatFailsStopsUpAndNamesItself(t *testing.T) {
	t.Parallel()
	db := sqlitetest.Open(t, sqlitetest.Modernc())
	all := []migrate.Step{
		{Number: 1, Name: "001_a.sql", SQL: "CREATE TABLE a (x INTEGER)"},
		{Number: 2, Name: "002_bad.sql", SQL: "INSERT INTO nowhere VALUES (1)"},
		{Number: 3, Name: "003_c.sql", SQL: "CREATE TABLE c (x INTEGER)"},
	}
	_, err := up(t, db, all, false)
	if err == nil || !strings.Contains(err.Error(), "step 002_bad.sql") {
		t.Fatalf("Up = %v; want an error naming step 002_bad.sql", err)
	}
	var n int
	if err := db.QueryRow("SELECT count(*) FROM sqlite_master WHERE name IN ('a', 'c', 'steps')").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d of the steps' tables left (%v); the transaction rolled back should leave none", n, err)
	}
}

// Two starts at once over one file: one runs the steps, the other,
// waiting on the write lock of its transaction, finds them done.
func TestConcurrentStartsRunEachStepOnce(t *testing.T) {
	t.Parallel()
	path := sqlitetest.NewPath(t)
	d := sqlitetest.Modernc()
	all := []migrate.Step{
		{Number: 1, Name: "001_a.sql", SQL: "CREATE TABLE a (x INTEGER)"},
		{Number: 2, Name: "002_b.sql", SQL: "INSERT INTO a (x) VALUES (2)"},
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		db := sqlitetest.OpenPath(t, d, path, sqlitetest.Safe())
		wg.Go(func() {
			ctx := context.Background()
			conn, err := db.Conn(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			// BEGIN IMMEDIATE, as the replica's Install: the write lock
			// first, so that the second start waits for the first.
			if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
				errs <- err
				return
			}
			if _, err := migrate.Up(ctx, all, sqliteStore{conn}, false); err != nil {
				_, _ = conn.ExecContext(ctx, "ROLLBACK")
				errs <- err
				return
			}
			_, err = conn.ExecContext(ctx, "COMMIT")
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	db := sqlitetest.OpenPath(t, d, path, sqlitetest.Safe())
	var n int
	if err := db.QueryRow("SELECT count(*) FROM a").Scan(&n); err != nil || n != 1 {
		t.Fatalf("step 2 ran %d times (%v); want once", n, err)
	}
}
