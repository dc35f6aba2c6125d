// Package migrate runs an engine's own schema steps, for both engines
// alike: the server's over PostgreSQL and the replica's over SQLite.
//
// The steps are SQL files embedded in the engine's build, named
// NNN_name.sql and numbered 1, 2, … without a gap or a repeat (Read
// refuses anything else). A database records the number of the last step
// it ran; Up runs those after it, in order, each recorded as it runs, in
// the transaction the caller holds — so a step and its record commit
// together or not at all, and the caller's lock on that transaction (the
// server's advisory lock, the replica's BEGIN IMMEDIATE) makes concurrent
// starts safe: the later one finds nothing left to do.
//
// A database ahead of the build (a later build ran more steps) is the
// caller's to judge: the replica refuses it, while the server, whose steps
// only ever add, serves it during a rolling upgrade.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Step is one numbered schema step.
type Step struct {
	// Number orders the steps, from 1.
	Number int
	// Name is the step's file name, e.g. "001_engine.sql".
	Name string
	// SQL is the file's text.
	SQL string
}

// Read reads the steps of directory dir of fsys, in order. It refuses a
// file not named NNN_name.sql, a set not numbered 1, 2, … without a gap
// or a repeat, and an empty one.
func Read(fsys fs.FS, dir string) ([]Step, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Step
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(e.Name(), ".sql") {
			return nil, fmt.Errorf("migration %q is not named NNN_name.sql", e.Name())
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, Step{Number: n, Name: e.Name(), SQL: string(b)})
	}
	slices.SortFunc(out, func(a, b Step) int { return a.Number - b.Number })
	for i, s := range out {
		if s.Number != i+1 {
			return nil, fmt.Errorf("migration %q should be step %d: the steps are numbered 1, 2, … without a gap or a repeat", s.Name, i+1)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no migrations")
	}
	return out, nil
}

// Store is a database's record of its steps, read and written in the
// transaction the caller holds.
type Store interface {
	// Done returns the number of the last step the database recorded; 0
	// when it has none (a new database).
	Done(ctx context.Context) (int, error)
	// Apply runs s and records it, in the same transaction.
	Apply(ctx context.Context, s Step) error
}

// AheadError is Up's error for a database a later build set up: it
// recorded step Done, past Latest, the last this build knows.
type AheadError struct {
	Done, Latest int
}

func (e *AheadError) Error() string {
	return fmt.Sprintf("the database is at step %d, set up by a later build; this build knows %d", e.Done, e.Latest)
}

// Up runs, in order, the steps after the last one st recorded, and
// returns the number of the last step the database holds. A database
// ahead of steps is left unchanged, and refused with an *AheadError
// unless acceptAhead.
func Up(ctx context.Context, steps []Step, st Store, acceptAhead bool) (int, error) {
	done, err := st.Done(ctx)
	if err != nil {
		return 0, err
	}
	latest := 0
	if len(steps) > 0 {
		latest = steps[len(steps)-1].Number
	}
	if done > latest {
		if acceptAhead {
			return done, nil
		}
		return done, &AheadError{Done: done, Latest: latest}
	}
	for _, s := range steps[done:] {
		if err := st.Apply(ctx, s); err != nil {
			return done, fmt.Errorf("step %s: %w", s.Name, err)
		}
		done = s.Number
	}
	return done, nil
}
