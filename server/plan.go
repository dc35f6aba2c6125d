package server

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/digest"
)

// plan.go holds the planner's pass: taking the keys the triggers noted,
// appending what changed to the logs of the rows' groups, and adopting,
// letting go of and regrouping replicas.

// planner is the pass's own state in this process. The pass's work is in
// the database (the logs, sync_replicas, the members tables); this is
// what keeps passes one at a time and remembers the first.
type planner struct {
	// mu keeps this process's passes one at a time; the advisory lock
	// keeps the processes'.
	mu sync.Mutex
	// adopted is set once the first pass reconciled the replicas table.
	adopted bool
	// kicked is the highest note id whose writer kicked this process's
	// planner itself (the slot's reader, under CaptureLogical): the watch
	// need not kick again for notes up to it.
	kicked atomic.Int64
}

// noteKicked records that the notes up to id were written by one who
// kicks the planner.
func (p *planner) noteKicked(id int64) {
	for {
		was := p.kicked.Load()
		if id <= was || p.kicked.CompareAndSwap(was, id) {
			return
		}
	}
}

// passBatch bounds the touched keys of one table one pass takes at once;
// what is left is taken by the next pass, which pass runs at once. The
// followers of rows a pass moved are the exception: the pass takes them
// all, passBatch at a time (see owe).
const passBatch = 50000

// pass runs one planning pass now: it takes the keys the triggers noted,
// reads those rows as they are, and appends to the logs of their groups
// what changed (a row moving group: a delete in the old, an upsert in the
// new; an unchanged row: nothing), keeping each group's digests. It also
// adopts replicas added to the replicas table (to be provisioned), lets go
// of those removed, and marks for provisioning those whose groups changed.
// One process plans at a time: when another holds the planner's lock,
// pass returns nil at once. Run calls it; tests and benchmarks reach it through internal/serverhook.
func (s *Server) pass(ctx context.Context) error {
	s.plan.mu.Lock()
	defer s.plan.mu.Unlock()
	if s.hooks.passDone != nil {
		defer s.hooks.passDone()
	}
	for {
		more, err := s.passOnce(ctx)
		if err != nil || !more {
			return err
		}
	}
}

// passState is what one pass accumulates before writing it.
type passState struct {
	heads   map[int64]int64 // groups appended to: their new heads
	digests map[digestKey]*digest.Sum
	log     [][]any // grp, pos, tbl, key
	// leaving are the entries of followed rows leaving a group, held back
	// until their followers are planned (appendLeaving).
	leaving [][]any // grp, tbl, key
	// appended counts the log entries of the pass, those already written
	// (flushLog) among them.
	appended int
	// owed is, per follower table, the last sync_touched id this pass
	// noted of it (touchFollowers): the pass plans every key noted up to
	// it, however many, before it ends (owe).
	owed map[string]int64
}

// owe notes that the pass noted the keys of table up to sync_touched id
// upto, which it must plan itself. A follower planned by a later pass
// would leave a group after the row it follows, whose leaving this pass
// enters (appendLeaving): a replica would hold it without its row.
func (p *passState) owe(table string, upto int64) {
	if p.owed == nil {
		p.owed = map[string]int64{}
	}
	p.owed[table] = max(p.owed[table], upto)
}

// leave enters a row leaving a group: at once, or, for a row that others
// follow, once the pass has planned its followers, so that in every
// group's log a follower leaves before the row it follows, as it arrives
// after it — a replica applying the log in order, in messages cut
// anywhere, never holds a follower without its parent.
func (p *passState) leave(grp int64, t *table, key []byte) {
	if len(t.followers) == 0 {
		p.append(grp, t.name, key)
		return
	}
	p.leaving = append(p.leaving, []any{grp, t.name, key})
}

// appendLeaving enters the rows held back by leave, followers (planned
// later, held back later) first.
func (p *passState) appendLeaving() {
	for _, e := range slices.Backward(p.leaving) {
		p.append(e[0].(int64), e[1].(string), e[2].([]byte))
	}
	p.leaving = nil
}

// append adds a log entry to a group, and returns its position.
func (p *passState) append(grp int64, tbl string, key []byte) int64 {
	p.heads[grp]++
	pos := p.heads[grp]
	p.log = append(p.log, []any{grp, pos, tbl, key})
	p.appended++
	return pos
}

// passOnce runs one pass in one transaction; more reports that touched
// keys were left for another.
func (s *Server) passOnce(ctx context.Context) (more bool, err error) {
	start := time.Now()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("magicsync/server: pass: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var locked bool
	if err := tx.QueryRow(ctx, qPlanLock, s.m.engine.planLock()).Scan(&locked); err != nil {
		return false, fmt.Errorf("magicsync/server: pass: %w", err)
	}
	if !locked {
		return false, nil
	}
	if s.hooks.passLocked != nil {
		s.hooks.passLocked()
	}
	if !s.plan.adopted {
		if err := s.adoptAll(ctx, tx); err != nil {
			return false, err
		}
	}
	added, err := s.planReplicas(ctx, tx)
	if err != nil {
		return false, err
	}
	moved, err := s.planMembers(ctx, tx)
	if err != nil {
		return false, err
	}
	// The replicas whose plan changed: their Next calls, waiting here or
	// in other processes, have a provisioning to start (or an unknown
	// replica to report).
	replanned := append(added, moved...)
	if err := notifyReplicas(ctx, tx, s.m.engine.wakeChannel(), s.nonce, replanned); err != nil {
		return false, fmt.Errorf("magicsync/server: pass: %w", err)
	}
	p := &passState{heads: map[int64]int64{}, digests: map[digestKey]*digest.Sum{}}
	planned := 0 // keys taken, for Stats
	for _, t := range s.m.order {
		n, full, err := s.planAll(ctx, tx, t, p)
		if err != nil {
			return false, fmt.Errorf("magicsync/server: pass over %s: %w", t.qname, err)
		}
		more = more || full
		planned += n
	}
	p.appendLeaving()
	groups, err := s.writePass(ctx, tx, p)
	if err != nil {
		return false, fmt.Errorf("magicsync/server: pass: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("magicsync/server: pass: %w", err)
	}
	s.plan.adopted = true
	s.stats.passed(time.Since(start), planned)
	if len(groups) > 0 {
		s.out.cache.bumpGroups(groups)
		s.memo.groupsGrew(groups)
		s.hub.wakeGroups(groups)
	}
	s.memo.drop(replanned...)
	s.creds.forgetAll(replanned)
	s.hub.wakeReplicas(replanned)
	return more, nil
}

// notifyReplicas tells the other processes serving the database to wake
// the waiters of these replicas: "r:<nonce>:<id>,<id>...", in as many
// notifications as the payload's bound takes, sent at commit.
func notifyReplicas(ctx context.Context, tx pgx.Tx, channel, nonce string, ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	const perPayload = 7000 / 37
	var payloads []string
	for start := 0; start < len(ids); start += perPayload {
		part := ids[start:min(start+perPayload, len(ids))]
		var b strings.Builder
		b.WriteString("r:" + nonce + ":")
		for i, id := range part {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(id.String())
		}
		payloads = append(payloads, b.String())
	}
	_, err := tx.Exec(ctx, qNotifyEach, channel, payloads)
	return err
}

// adoptAll makes the engine's replicas those of the replicas table.
func (s *Server) adoptAll(ctx context.Context, tx pgx.Tx) error {
	rt := s.m.replicas
	if _, err := tx.Exec(ctx, s.sql.onReplicas(qAdoptAllFmt, rt)); err != nil {
		return fmt.Errorf("magicsync/server: adopting the replicas of %s: %w", rt.qname(), err)
	}
	if _, err := tx.Exec(ctx, s.sql.onReplicas(qLetGoAllFmt, rt)); err != nil {
		return fmt.Errorf("magicsync/server: letting go of replicas removed from %s: %w", rt.qname(), err)
	}
	return nil
}

// takeTouchedReplicas consumes the touched replica ids of a label.
func (s *Server) takeTouchedReplicas(ctx context.Context, tx pgx.Tx, label string) ([]uuid.UUID, error) {
	rows, err := tx.Query(ctx, s.sql.of(qTakeTouchedReplicas), label)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

// planReplicas adopts replicas added to the replicas table and lets go of
// those removed; it returns them.
func (s *Server) planReplicas(ctx context.Context, tx pgx.Tx) ([]uuid.UUID, error) {
	ids, err := s.takeTouchedReplicas(ctx, tx, touchedReplicas)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	rt := s.m.replicas
	rows, err := tx.Query(ctx, s.sql.onReplicas(qAdoptReplicasFmt, rt), ids)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: adopting replicas: %w", err)
	}
	changed, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: adopting replicas: %w", err)
	}
	rows, err = tx.Query(ctx, s.sql.onReplicas(qLetGoReplicasFmt, rt), ids)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: letting go of replicas: %w", err)
	}
	gone, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: letting go of replicas: %w", err)
	}
	return append(changed, gone...), nil
}

// planMembers marks for provisioning the replicas whose groups changed,
// and returns them.
//
// It locks their rows of sync_replicas first, in a statement of its own:
// a build starting a provisioning (startProvisioning) reads the replica's
// groups and writes its memberships under that lock, so that the
// comparison below, in later statements, sees what such a build committed
// rather than what it replaces — a change committed after the build read
// the groups is then compared with the groups the build chose, not lost.
func (s *Server) planMembers(ctx context.Context, tx pgx.Tx) ([]uuid.UUID, error) {
	touched, err := s.takeTouchedReplicas(ctx, tx, touchedMembers)
	if err != nil || len(touched) == 0 {
		return nil, err
	}
	rows, err := tx.Query(ctx, s.sql.of(qLockReplicas), touched)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: locking replicas: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	want, err := s.groupsOf(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	// A replica still to be provisioned (not started) is left alone: its
	// provisioning reads its groups when it starts, after this pass.
	rows, err = tx.Query(ctx, s.sql.of(qMembershipNames), ids)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: reading memberships: %w", err)
	}
	var changed []uuid.UUID
	var reasons []string
	for rows.Next() {
		var id uuid.UUID
		var have []string
		if err := rows.Scan(&id, &have); err != nil {
			rows.Close()
			return nil, err
		}
		w := want[id]
		var joined, left []string
		for _, g := range w {
			if !slices.Contains(have, g) {
				joined = append(joined, describeGroup(g))
			}
		}
		for _, g := range have {
			if !slices.Contains(w, g) {
				left = append(left, describeGroup(g))
			}
		}
		if len(joined)+len(left) > 0 {
			reason := "group changed"
			if len(joined) > 0 {
				reason += ": joined " + strings.Join(joined, ", ")
			}
			if len(left) > 0 {
				if len(joined) > 0 {
					reason += ";"
				} else {
					reason += ":"
				}
				reason += " left " + strings.Join(left, ", ")
			}
			changed = append(changed, id)
			reasons = append(reasons, reason)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(changed) == 0 {
		return nil, nil
	}
	if _, err := tx.Exec(ctx, s.sql.of(qMarkRegrouped), changed, reasons); err != nil {
		return nil, fmt.Errorf("magicsync/server: marking replicas for provisioning: %w", err)
	}
	return changed, nil
}

// describeGroup writes a group's name for people.
func describeGroup(name string) string {
	switch {
	case name == groupBroadcast:
		return "everything broadcast"
	case strings.HasPrefix(name, "a:"):
		return "the rows assigned to " + name[2:]
	case strings.HasPrefix(name, "g:"):
		spec, value, _ := strings.Cut(name[2:], "):")
		return fmt.Sprintf("%s = %s (%s))", spec[strings.LastIndexByte(spec, ',')+1:], value, spec)
	}
	return name
}

// groupsOf names the groups each replica belongs to now.
func (s *Server) groupsOf(ctx context.Context, q querier, ids []uuid.UUID) (map[uuid.UUID][]string, error) {
	out := make(map[uuid.UUID][]string, len(ids))
	for _, id := range ids {
		var g []string
		if s.m.broadcast {
			g = append(g, groupBroadcast)
		}
		if s.m.assigned {
			g = append(g, groupAssigned(id.String()))
		}
		out[id] = g
	}
	for _, mb := range s.m.members {
		rows, err := q.Query(ctx, mb.selectGroups(), ids)
		if err != nil {
			return nil, fmt.Errorf("magicsync/server: reading the groups of %s: %w", mb.qname(), err)
		}
		for rows.Next() {
			var id uuid.UUID
			var v string
			if err := rows.Scan(&id, &v); err != nil {
				rows.Close()
				return nil, err
			}
			if name := groupGrouped(mb, v); !slices.Contains(out[id], name) {
				out[id] = append(out[id], name)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// groupIDsOf finds the ids of groups by name, creating those missing in
// transactions of their own: a group is harmless to have, and its id, once
// committed, never changes, so it is cached.
func (s *Server) groupIDsOf(ctx context.Context, names []string) (map[string]int64, error) {
	out := make(map[string]int64, len(names))
	var missing []string
	s.groupMu.Lock()
	for _, n := range names {
		if id, ok := s.groupIDs[n]; ok {
			out[n] = id
		} else if !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	s.groupMu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	slices.Sort(missing)
	// A connection of its own, outside the pool: the callers hold a
	// transaction of the pool's, and taking a second connection from a
	// pool that their transactions have exhausted would wait forever. New
	// groups are rare (a new group value, a new replica), so opening one
	// costs little.
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: creating groups: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, s.sql.of(qCreateGroups), missing); err != nil {
		return nil, fmt.Errorf("magicsync/server: creating groups: %w", err)
	}
	// Read them in a statement of its own: when another transaction created
	// a group at the same time, the INSERT above waited for it and skipped
	// the name, and only a later snapshot sees its row.
	rows, err := conn.Query(ctx, s.sql.of(qGroupIDs), missing)
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: creating groups: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Name string
		ID   int64
	}])
	if err != nil {
		return nil, fmt.Errorf("magicsync/server: creating groups: %w", err)
	}
	s.groupMu.Lock()
	defer s.groupMu.Unlock()
	for _, g := range found {
		out[g.Name] = g.ID
		s.groupIDs[g.Name] = g.ID
	}
	for _, n := range missing {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("magicsync/server: group %q was created but cannot be read back", n)
		}
	}
	return out, nil
}

// touchedRow is one touched key of a catalog, and the row as it is now.
type touchedRow struct {
	key     []byte
	present bool
	tuple   []byte
	group   string
	// parent is the key of the row a follower points at (Follows); the
	// row's group is that row's, as sync_rows holds it.
	parent []byte
	grp    int64
}

// planAll plans the touched keys of one catalog table into p: a batch of
// them, and then, a batch at a time, every key the pass owes the table
// (owe), writing each batch's log entries before the next so that the
// pass's memory stays bounded by its batch. It returns the keys it took,
// and whether its last batch was full (keys may be left for the next
// pass).
func (s *Server) planAll(ctx context.Context, tx pgx.Tx, t *table, p *passState) (taken int, full bool, err error) {
	for {
		n, err := s.planTable(ctx, tx, t, p)
		if err != nil {
			return 0, false, err
		}
		taken += n
		upto := p.owed[t.name]
		if upto == 0 {
			return taken, n >= s.passBatch, nil
		}
		var owed bool
		if err := tx.QueryRow(ctx, s.sql.of(qTouchedUpTo), t.name, upto).Scan(&owed); err != nil {
			return 0, false, err
		}
		if !owed {
			return taken, n >= s.passBatch, nil
		}
		if err := s.flushLog(ctx, tx, p); err != nil {
			return 0, false, err
		}
	}
}

// planTable plans the touched keys of one catalog table into p.
func (s *Server) planTable(ctx context.Context, tx pgx.Tx, t *table, p *passState) (int, error) {
	touched, n, err := s.takeTouched(ctx, tx, t)
	if err != nil || len(touched) == 0 {
		return n, err
	}
	// What the planner knew of these rows.
	keys := make([][]byte, len(touched))
	var names []string
	for i, tr := range touched {
		keys[i] = tr.key
		if tr.group != "" && !slices.Contains(names, tr.group) {
			names = append(names, tr.group)
		}
	}
	old, err := s.knownRows(ctx, tx, t, keys)
	if err != nil {
		return 0, err
	}
	ids, err := s.groupIDsOf(ctx, names)
	if err != nil {
		return 0, err
	}
	if t.parent != nil {
		if err := s.followParents(ctx, tx, t, touched); err != nil {
			return 0, err
		}
	}
	grps := make([]int64, 0, len(ids)+len(old)+len(touched))
	for _, id := range ids {
		grps = append(grps, id)
	}
	for _, o := range old {
		grps = append(grps, o.grp)
	}
	for _, tr := range touched {
		if tr.grp != 0 {
			grps = append(grps, tr.grp)
		}
	}
	if err := s.loadHeads(ctx, tx, p, grps); err != nil {
		return 0, err
	}
	// In key order: the upsert below then walks sync_rows' indexes in
	// order rather than at random (4 times faster for a bulk load).
	slices.SortFunc(touched, func(a, b touchedRow) int { return bytes.Compare(a.key, b.key) })
	if err := s.writePlan(ctx, tx, t, p, touched, old, ids); err != nil {
		return 0, err
	}
	return n, nil
}

// takeTouched takes a batch of the table's keys the triggers noted, with
// each row as it is now (or gone), one per key; n counts the notes taken.
// A row the declaration cannot hold is taken as gone, and logged.
func (s *Server) takeTouched(ctx context.Context, tx pgx.Tx, t *table) (touched []touchedRow, n int, err error) {
	rows, err := tx.Query(ctx, s.sql.takeTouched(t), t.name, s.passBatch)
	if err != nil {
		return nil, 0, err
	}
	keyVals := make([]codec.Value, len(t.tc.Columns))
	vals := make([]codec.Value, len(t.tc.Columns))
	nk := len(t.tc.KeyIndex)
	raw := make([]any, nk+1+len(t.down)+1)
	ptrs := make([]any, len(raw))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	seen := map[string]int{}
	for rows.Next() {
		n++
		if err := rows.Scan(ptrs...); err != nil {
			rows.Close()
			return nil, 0, err
		}
		unreadable := func(err error) {
			s.log.Warn("magicsync/server: a row of the host holds a value its declaration cannot hold: replicas hold it as gone until it is written again with values that read",
				"table", t.qname, "key", fmt.Sprint(raw[:nk]...), "err", err)
		}
		var bad error
		for j, i := range t.tc.KeyIndex {
			v, err := t.tc.Columns[i].Canonical(raw[j])
			if err != nil {
				bad = err
				break
			}
			keyVals[i] = v
		}
		if bad != nil {
			unreadable(bad)
			continue
		}
		tr := touchedRow{key: []byte(t.tc.KeyOfRow(keyVals))}
		tr.present, _ = raw[nk].(bool)
		if tr.present {
			for j, i := range t.down {
				v, err := t.tc.Columns[i].Canonical(raw[nk+1+j])
				if err != nil {
					bad = err
					break
				}
				vals[i] = v
			}
			if bad != nil {
				// One row the declaration cannot hold must not stop the
				// planning of every other (it did: every pass failed). It
				// is taken as gone, as readByKeys takes it when building
				// messages, so that the digests agree with what replicas
				// are sent.
				unreadable(bad)
				tr.present = false
			}
		}
		if tr.present && t.parent != nil {
			pk, ok, err := t.parentKeyOf(raw[len(raw)-1])
			if err != nil {
				unreadable(err)
				tr.present = false
			}
			tr.parent = pk
			tr.present = tr.present && ok
		}
		if tr.present {
			tr.tuple = t.tc.EncodeRow(nil, vals, t.down)
			if t.parent == nil {
				var route *string
				if r, ok := raw[len(raw)-1].(string); ok {
					route = &r
				}
				tr.group = t.groupOfRow(route)
			}
		}
		if at, dup := seen[string(tr.key)]; dup {
			touched[at] = tr
			continue
		}
		seen[string(tr.key)] = len(touched)
		touched = append(touched, tr)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	return touched, n, nil
}

// knownRow is what the planner knew of a row: its group and its hash.
type knownRow struct {
	grp  int64
	hash []byte
}

// knownRows reads what the planner knew of the table's rows of keys.
func (s *Server) knownRows(ctx context.Context, tx pgx.Tx, t *table, keys [][]byte) (map[string]knownRow, error) {
	old := make(map[string]knownRow, len(keys))
	krows, err := tx.Query(ctx, s.sql.of(qKnownRows), t.name, keys)
	if err != nil {
		return nil, err
	}
	for krows.Next() {
		var k, h []byte
		var g int64
		if err := krows.Scan(&k, &g, &h); err != nil {
			krows.Close()
			return nil, err
		}
		old[string(k)] = knownRow{g, h}
	}
	krows.Close()
	if err := krows.Err(); err != nil {
		return nil, err
	}
	return old, nil
}

// writePlan compares each touched row with what the planner knew of it
// and appends to the groups' logs what changed — a row moving group
// leaves the old and enters the new, an unchanged row nothing — keeping
// the digests, the planner's record of the rows, and the followers of the
// rows that moved.
func (s *Server) writePlan(ctx context.Context, tx pgx.Tx, t *table, p *passState, touched []touchedRow, old map[string]knownRow, ids map[string]int64) error {
	var upKeys, upHashes, upTuples [][]byte
	var upGrps, upPos []int64
	var delKeys, moved [][]byte
	for _, tr := range touched {
		o, had := old[string(tr.key)]
		var grp int64
		var h [32]byte
		switch {
		case tr.present && tr.grp != 0:
			grp = tr.grp
		case tr.present && tr.group != "":
			grp = ids[tr.group]
		}
		if grp != 0 {
			h = rowHash(tr.tuple)
		}
		if grp != o.grp { // o.grp is 0 for a row not held before
			moved = append(moved, tr.key)
		}
		switch {
		case grp == 0 && !had:
			continue
		case grp == 0:
			p.leave(o.grp, t, tr.key)
			p.digest(o.grp, t.name).RemoveHash(storedHash(o.hash))
			delKeys = append(delKeys, tr.key)
			continue
		case had && o.grp == grp && string(o.hash) == string(h[:]):
			continue
		}
		if had {
			p.digest(o.grp, t.name).RemoveHash(storedHash(o.hash))
			if o.grp != grp {
				p.leave(o.grp, t, tr.key)
			}
		}
		pos := p.append(grp, t.name, tr.key)
		p.digest(grp, t.name).AddHash(h)
		upKeys = append(upKeys, tr.key)
		upHashes = append(upHashes, h[:])
		upTuples = append(upTuples, tr.tuple)
		upGrps = append(upGrps, grp)
		upPos = append(upPos, pos)
	}
	if len(upKeys) > 0 {
		if _, err := tx.Exec(ctx, s.sql.of(qWriteRows),
			t.name, upKeys, upGrps, upHashes, upPos, upTuples, t.shape); err != nil {
			return err
		}
	}
	if len(delKeys) > 0 {
		if _, err := tx.Exec(ctx, s.sql.of(qDropRows), t.name, delKeys); err != nil {
			return err
		}
	}
	if err := s.touchFollowers(ctx, tx, t, moved, p); err != nil {
		return err
	}
	return nil
}

// followParents sets the group of each touched row of a follower: the
// group sync_rows holds its parent in (as this pass left it: parents are
// planned first), or none when its parent is held nowhere.
func (s *Server) followParents(ctx context.Context, tx pgx.Tx, t *table, touched []touchedRow) error {
	var keys [][]byte
	for _, tr := range touched {
		if tr.parent != nil {
			keys = append(keys, tr.parent)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, s.sql.of(qKnownRows), t.parent.name, keys)
	if err != nil {
		return err
	}
	grpOf := map[string]int64{}
	for rows.Next() {
		var k, h []byte
		var g int64
		if err := rows.Scan(&k, &g, &h); err != nil {
			rows.Close()
			return err
		}
		grpOf[string(k)] = g
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for i := range touched {
		if touched[i].parent != nil {
			touched[i].grp = grpOf[string(touched[i].parent)]
		}
	}
	return nil
}

// loadHeads reads the heads of the groups the pass has not read yet.
func (s *Server) loadHeads(ctx context.Context, tx pgx.Tx, p *passState, ids []int64) error {
	var need []int64
	seen := map[int64]bool{}
	for _, id := range ids {
		if _, ok := p.heads[id]; !ok && !seen[id] {
			seen[id] = true
			need = append(need, id)
		}
	}
	if len(need) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, s.sql.of(qHeads), need)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, head int64
		if err := rows.Scan(&id, &head); err != nil {
			return err
		}
		p.heads[id] = head
	}
	return rows.Err()
}

// flushLog writes the log entries the pass planned since it last wrote
// them, and forgets them.
func (s *Server) flushLog(ctx context.Context, tx pgx.Tx, p *passState) error {
	if len(p.log) == 0 {
		return nil
	}
	if _, err := tx.CopyFrom(ctx, s.logTable, logColumns, pgx.CopyFromRows(p.log)); err != nil {
		return fmt.Errorf("appending to the logs: %w", err)
	}
	p.log = p.log[:0]
	return nil
}

// writePass writes the log entries, heads and digests a pass planned, and
// returns the groups it appended to.
func (s *Server) writePass(ctx context.Context, tx pgx.Tx, p *passState) ([]int64, error) {
	if p.appended == 0 {
		return nil, nil
	}
	if err := s.flushLog(ctx, tx, p); err != nil {
		return nil, err
	}
	groups := make([]int64, 0, len(p.heads))
	heads := make([]int64, 0, len(p.heads))
	for g, h := range p.heads {
		groups = append(groups, g)
		heads = append(heads, h)
	}
	// The groups' rows are locked in id order, as startProvisioning locks
	// them (FOR SHARE), so that the two never wait for each other in a
	// cycle; a provisioning under way keeps its groups' heads still until
	// it commits.
	if _, err := tx.Exec(ctx, s.sql.of(qLockGroups), groups); err != nil {
		return nil, fmt.Errorf("locking the groups: %w", err)
	}
	if _, err := tx.Exec(ctx, s.sql.of(qMoveHeads), groups, heads); err != nil {
		return nil, fmt.Errorf("moving the heads: %w", err)
	}
	var dg []int64
	var dt []string
	for k := range p.digests {
		dg = append(dg, k.grp)
		dt = append(dt, k.tbl)
	}
	rows, err := tx.Query(ctx, s.sql.of(qReadDigests), dg, dt)
	if err != nil {
		return nil, fmt.Errorf("reading digests: %w", err)
	}
	for rows.Next() {
		var k digestKey
		var b []byte
		if err := rows.Scan(&k.grp, &k.tbl, &b); err != nil {
			rows.Close()
			return nil, err
		}
		p.digests[k].Merge(parseSum(b))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sums := make([][]byte, len(dg))
	counts := make([]int64, len(dg))
	for i := range dg {
		d := p.digests[digestKey{dg[i], dt[i]}]
		sums[i] = d.Bytes()
		counts[i] = int64(d.Rows())
	}
	if _, err := tx.Exec(ctx, s.sql.of(qWriteDigests), dg, dt, sums, counts); err != nil {
		return nil, fmt.Errorf("writing digests: %w", err)
	}
	payload := "g:" + s.nonce + ":" + joinInts(groups)
	if len(payload) > 7000 {
		payload = "*"
	}
	if _, err := tx.Exec(ctx, qNotify, s.m.engine.wakeChannel(), payload); err != nil {
		return nil, err
	}
	return groups, nil
}

// joinInts writes ids comma-separated.
func joinInts(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(parts, ",")
}
