package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/server"
)

// follows.go is benchmark 13: a grouped catalog whose rows each have
// followers (a catalog routed Follows its column), every parent moved to
// another group by one UPDATE, so that every follower moves with it;
// beside the same move of a grouped catalog of as many rows and no
// followers, which is what following costs.

// followGroups is the number of groups of benchmark 13; each replica is a
// member of one.
const followGroups = 10

// followersEach is the number of followers of each parent.
const followersEach = 10

// Parent is benchmark 13's grouped catalog: each row is held by the
// members of the group its group_id names.
type Parent struct {
	ID      uuid.UUID `db:"id" sync:"key"`
	GroupID int64     `db:"group_id"`
	Name    string    `db:"name"`
	Price   int64     `db:"price"`
}

// SyncTable declares the parents, grouped by group_id.
func (Parent) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "bench", Name: "parents", Mirror: magicsync.Catalog,
		Sync: magicsync.Grouped("bench.members(replica_id, group_id)", "group_id")}
}

// Follower is a row held wherever the parent its parent_id points at is.
type Follower struct {
	ID       uuid.UUID `db:"id" sync:"key"`
	ParentID uuid.UUID `db:"parent_id"`
	Name     string    `db:"name"`
	Price    int64     `db:"price"`
}

// SyncTable declares the followers, following their parent.
func (Follower) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "bench", Name: "followers", Mirror: magicsync.Catalog, Sync: magicsync.Follows("parent_id")}
}

// GroupedRow is the baseline's catalog: grouped like the parents, with no
// followers. Its columns are a parent's.
type GroupedRow Parent

// SyncTable declares the grouped rows, grouped by group_id.
func (GroupedRow) SyncTable() magicsync.Table {
	return magicsync.Table{Schema: "bench", Name: "grouped_rows", Mirror: magicsync.Catalog,
		Sync: magicsync.Grouped("bench.members(replica_id, group_id)", "group_id")}
}

// membersPgSchema is the replicas and the members table that puts each in
// one group.
const membersPgSchema = `
CREATE SCHEMA bench;
CREATE TABLE bench.replicas (id uuid PRIMARY KEY);
CREATE TABLE bench.members (replica_id uuid PRIMARY KEY REFERENCES bench.replicas, group_id bigint NOT NULL);
`

// followsPgSchema is benchmark 13's host schema: the parents and their
// followers, whose foreign key names the catalog they follow and whose
// index finds a moved parent's followers.
const followsPgSchema = membersPgSchema + `
CREATE TABLE bench.parents (id uuid PRIMARY KEY, group_id bigint NOT NULL, name text NOT NULL, price bigint NOT NULL);
CREATE TABLE bench.followers (id uuid PRIMARY KEY, parent_id uuid NOT NULL REFERENCES bench.parents, name text NOT NULL,
	price bigint NOT NULL);
CREATE INDEX ON bench.followers (parent_id);
`

// groupedPgSchema is the baseline's host schema: the grouped rows alone.
const groupedPgSchema = membersPgSchema + `
CREATE TABLE bench.grouped_rows (id uuid PRIMARY KEY, group_id bigint NOT NULL, name text NOT NULL, price bigint NOT NULL);
`

// moveCase is one side of benchmark 13: a schema, its declarations, how
// its rows are loaded and the one UPDATE that moves them all to the next
// group.
type moveCase struct {
	label  string
	schema string
	codecs func() (*magicsync.Codecs, error)
	load   func(ctx context.Context, e *serverEnv) error
	update string
}

// moveRounds is how many moves each side of benchmark 13 makes, in turn.
const moveRounds = 3

// moveRun is what one move of one side measured.
type moveRun struct {
	elapsed time.Duration // from the commit to the last acknowledgement
	planned time.Duration // the pass alone
	msgs    int
}

// benchFollows: a grouped catalog of 10,000 parents in 10 groups, each
// parent with 10 followers (100,000 rows routed Follows the parent), held
// by 100 replicas, 10 in each group and all provisioned. One UPDATE moves
// every parent to the next group, so every follower moves with it: each
// replica is sent a delete of each of the 11,000 rows that left its group
// and an upsert of each of the 11,000 that arrived. Measured from the
// commit through the pass until every replica (all at once, one goroutine
// each, Next and Ack as in benchmark 4) has acknowledged messages carrying
// all 22,000 of its deliveries, and then checked that no more come. The
// baseline is the same move, measured alike, of a grouped catalog of as
// many rows (110,000) with no followers, each row moved by the UPDATE of
// its own group column. Each side moves 3 times, in turn with the other;
// the fastest move of each is compared.
func benchFollows(ctx context.Context, c config) ([]result, error) {
	parents := c.scale(10_000, 1_000)
	replicas := c.scale(100, 10)
	rows := parents * (1 + followersEach)
	// Each group loses its rows to the next and gains the previous one's.
	want := rows / followGroups
	baseSide, err := prepareMove(ctx, c, replicas, want, moveCase{
		label:  "grouped rows",
		schema: groupedPgSchema,
		codecs: func() (*magicsync.Codecs, error) { return magicsync.NewCodecs(GroupedRow{}) },
		load: func(ctx context.Context, e *serverEnv) error {
			_, err := e.pool.CopyFrom(ctx, pgx.Identifier{"bench", "grouped_rows"}, []string{"id", "group_id", "name", "price"},
				pgx.CopyFromSlice(rows, func(i int) ([]any, error) {
					return []any{uuid.New(), int64(i % followGroups), fmt.Sprintf("row number %d", i), int64(100 + i)}, nil
				}))
			return err
		},
		update: fmt.Sprintf(`UPDATE bench.grouped_rows SET group_id = (group_id + 1) %% %d`, followGroups),
	})
	if err != nil {
		return nil, err
	}
	defer baseSide.close()
	folSide, err := prepareMove(ctx, c, replicas, want, moveCase{
		label:  "parents and followers",
		schema: followsPgSchema,
		codecs: func() (*magicsync.Codecs, error) { return magicsync.NewCodecs(Parent{}, Follower{}) },
		load: func(ctx context.Context, e *serverEnv) error {
			ids := make([]uuid.UUID, parents)
			for i := range ids {
				ids[i] = uuid.New()
			}
			if _, err := e.pool.CopyFrom(ctx, pgx.Identifier{"bench", "parents"}, []string{"id", "group_id", "name", "price"},
				pgx.CopyFromSlice(parents, func(i int) ([]any, error) {
					return []any{ids[i], int64(i % followGroups), fmt.Sprintf("parent number %d", i), int64(100 + i)}, nil
				})); err != nil {
				return err
			}
			_, err := e.pool.CopyFrom(ctx, pgx.Identifier{"bench", "followers"}, []string{"id", "parent_id", "name", "price"},
				pgx.CopyFromSlice(parents*followersEach, func(i int) ([]any, error) {
					return []any{uuid.New(), ids[i/followersEach], fmt.Sprintf("follower number %d", i), int64(100 + i)}, nil
				}))
			return err
		},
		update: fmt.Sprintf(`UPDATE bench.parents SET group_id = (group_id + 1) %% %d`, followGroups),
	})
	if err != nil {
		return nil, err
	}
	defer folSide.close()
	// The two sides move in turn, each moveRounds times: every move is the
	// same work (each group's rows go to the next), and the fastest of
	// each side is compared, so that the machine's load weighs on both
	// alike.
	base, fol, err := fastestAlternating(moveRounds, moveRun.took,
		func(int) (moveRun, error) { return baseSide.move(ctx) },
		func(int) (moveRun, error) { return folSide.move(ctx) })
	if err != nil {
		return nil, err
	}
	deliveries := float64(2 * want * replicas)
	return []result{
		{name: "13 follows: parents move, followers too", unit: "deliveries/s", figure: deliveries / fol.elapsed.Seconds(),
			baseline: deliveries / base.elapsed.Seconds(), bounds: []bound{ratioFloor(followsFloor, followsFloorShort)},
			note: fmt.Sprintf("%d parents × %d followers moved to the next group by one UPDATE, %d replicas in %d groups, %d deletes + %d upserts each: %v (pass %v, %d messages built and acknowledged); baseline %d grouped rows, no followers, moved alike: %v (pass %v, %d messages); the fastest of %d moves each, alternating",
				parents, followersEach, replicas, followGroups, want, want, fol.elapsed.Round(time.Millisecond), fol.planned.Round(time.Millisecond), fol.msgs,
				rows, base.elapsed.Round(time.Millisecond), base.planned.Round(time.Millisecond), base.msgs, moveRounds)},
		{name: "13 follows: planner pass alone", unit: "rows/s", figure: float64(rows) / fol.planned.Seconds(),
			baseline: float64(rows) / base.planned.Seconds(),
			note: fmt.Sprintf("moved rows planned per second of the pass, in the moves above: %d parents, their %d followers noted by the pass and planned in it; baseline %d grouped rows",
				parents, parents*followersEach, rows)},
	}, nil
}

// took is the move's time, from the commit to the last acknowledgement.
func (r moveRun) took() time.Duration { return r.elapsed }

// moveSide is one side of benchmark 13, ready to move: its database and
// engine, its replicas in followGroups groups, its rows loaded and every
// replica provisioned.
type moveSide struct {
	mc   moveCase
	e    *serverEnv
	ids  []uuid.UUID
	want int // the deletes, and the upserts, each replica is sent a move
}

// prepareMove sets one side of benchmark 13 up in a database of its own.
func prepareMove(ctx context.Context, c config, replicas, want int, mc moveCase) (*moveSide, error) {
	codecs, err := mc.codecs()
	if err != nil {
		return nil, err
	}
	e, err := newServerEnvOf(ctx, c, 8, serverOptions(c), mc.schema, codecs)
	if err != nil {
		return nil, err
	}
	m := &moveSide{mc: mc, e: e, want: want}
	if err := m.prepare(ctx, c, replicas); err != nil {
		e.close()
		return nil, err
	}
	return m, nil
}

func (m *moveSide) prepare(ctx context.Context, c config, replicas int) error {
	e, mc := m.e, m.mc
	ids, err := e.addReplicas(ctx, replicas)
	if err != nil {
		return err
	}
	m.ids = ids
	groups := make([]int64, len(ids))
	for i := range groups {
		groups[i] = int64(i % followGroups)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO bench.members (replica_id, group_id) SELECT * FROM unnest($1::uuid[], $2::bigint[])`, ids, groups); err != nil {
		return err
	}
	if err := mc.load(ctx, e); err != nil {
		return fmt.Errorf("loading the %s: %w", mc.label, err)
	}
	if err := e.passAll(ctx); err != nil {
		return err
	}
	c.note("%s: provisioning %d replicas with %d rows each", mc.label, replicas, m.want)
	if err := drainUntilSettled(ctx, e.s, e.pool, ids); err != nil {
		return err
	}
	_, err = e.pool.Exec(ctx, `ANALYZE`)
	return err
}

func (m *moveSide) close() { m.e.close() }

// move runs the side's UPDATE, which moves every row to the next group,
// then the pass, and every replica taking its deletes and upserts.
func (m *moveSide) move(ctx context.Context) (moveRun, error) {
	if _, err := m.e.pool.Exec(ctx, m.mc.update); err != nil {
		return moveRun{}, err
	}
	start := time.Now()
	if err := m.e.hooks.Pass(ctx); err != nil {
		return moveRun{}, err
	}
	run, err := takeMoves(ctx, m.e, m.ids, m.want, start)
	if err != nil {
		return moveRun{}, fmt.Errorf("moving the %s: %w", m.mc.label, err)
	}
	return run, nil
}

// takeMoves is every replica (one goroutine each) taking and acknowledging
// messages until they carry its want deletes and want upserts, the pass
// having begun at start; then it checks that no replica is sent more.
func takeMoves(ctx context.Context, e *serverEnv, ids []uuid.UUID, want int, start time.Time) (moveRun, error) {
	var run moveRun
	run.planned = time.Since(start)
	var mu sync.Mutex
	var firstErr error
	var last time.Time
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			err := func() error {
				upserts, deletes, taken := 0, 0, 0
				for upserts < want || deletes < want {
					msg, ok, err := nextWithin(ctx, e.s, id, 30*time.Second)
					if err != nil {
						return err
					}
					if !ok {
						return fmt.Errorf("replica %s: no message after %d upserts and %d deletes of %d each, in %d messages: %w", id, upserts, deletes, want, taken, errTimeout)
					}
					u, d, err := deltasIn(msg.Body)
					if err != nil {
						return err
					}
					upserts, deletes, taken = upserts+u, deletes+d, taken+1
					mu.Lock()
					run.msgs++
					mu.Unlock()
					if err := e.s.Endpoint().Ack(ctx, id, msg.ID); err != nil {
						return err
					}
				}
				// The clock stops at the last acknowledgement.
				now := time.Now()
				mu.Lock()
				if now.After(last) {
					last = now
				}
				mu.Unlock()
				if upserts != want || deletes != want {
					return fmt.Errorf("replica %s was sent %d upserts and %d deletes, want %d of each", id, upserts, deletes, want)
				}
				return nil
			}()
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return moveRun{}, firstErr
	}
	run.elapsed = last.Sub(start)
	// Nothing more is owed: a replica sent rows beyond its deliveries
	// would make the figure flatter than the truth.
	return run, askOnceMore(ctx, e.s, ids, func(id uuid.UUID, msg server.Message) error {
		u, d, err := deltasIn(msg.Body)
		if err == nil && u+d > 0 {
			err = fmt.Errorf("replica %s was sent %d upserts and %d deletes more than its %d of each", id, u, d, want)
		}
		return err
	})
}

// deltasIn counts the upserts and the deletes a message to a replica
// brings.
func deltasIn(body []byte) (upserts, deletes int, err error) {
	m, err := wire.DecodeToReplica(body)
	if err != nil {
		return 0, 0, err
	}
	for _, t := range m.GetDown().GetTables() {
		upserts += len(t.Upserts)
		deletes += len(t.Deletes)
	}
	return upserts, deletes, nil
}

// drainUntilSettled drains the replicas until none is being provisioned
// or has a message queued: drain alone stops at the first short wait
// without a message, which a loaded machine can leave in the middle of a
// provisioning — and the rows still to come would be counted as the
// move's. It asks the engine's tables directly: Status, which counts
// every replica's holdings, takes minutes at this size.
func drainUntilSettled(ctx context.Context, s *server.Server, pool interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, ids []uuid.UUID) error {
	for range 100 {
		if err := drainAll(ctx, s, ids, 4); err != nil {
			return err
		}
		var busy int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM public.sync_replicas r
			WHERE r.snapshot <> 0 OR r.provision_needed
			   OR EXISTS (SELECT 1 FROM public.sync_outbox o WHERE o.replica = r.id)`).Scan(&busy); err != nil {
			return err
		}
		if busy == 0 {
			return nil
		}
	}
	return fmt.Errorf("the replicas' provisioning did not end: %w", errTimeout)
}
