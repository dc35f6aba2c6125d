package server

import (
	"container/list"
	"context"
	"fmt"
	"sync"
)

// outbox_cache.go holds the cache of built ranges of the groups' logs, shared
// by a process's Next calls: a range read once (rangeOf) serves every
// replica at the same cursors, until a pass bumps its group's generation.

// rangeKey names a built range of a group's log.
type rangeKey struct {
	grp      int64
	from, to int64
}

// entry is one row of a built range: the key of a row changed in the range,
// and the row as it was read then (nil tuple: gone), with its group then.
type entry struct {
	tbl   *table
	key   []byte
	tuple []byte // the down tuple, nil when the row is gone
	grp   int64  // the row's group when read; 0 when gone or in none
	pos   int64  // the last position of the key in the range
}

// builtRange is a cached range: its entries, ordered by pos.
type builtRange struct {
	key     rangeKey
	gen     generation // the generation of its group it was built at
	entries []entry
	size    int
	elem    *list.Element
}

// generation stamps a range with what the cache knew of its group's log
// when the range was built.
type generation struct {
	all   uint64 // bumped for every group at once
	group uint64 // bumped for the range's group
}

// rangeCache keeps built ranges so that the members of a group at the same
// position share one build. It is bounded by bytes, least recently used
// out first, and a range is only used while no pass has appended to its
// group's log since it was built (its generation), so that no replica gets
// from the cache a row that has since changed or left the group: a row
// that changes appends to its group's log, and one that moves appends a
// delete to the group it left. A pass appending to some groups leaves the
// ranges of the others cached, so that under a stream of writes to a few
// groups the members of the others do not build their ranges again.
type rangeCache struct {
	mu    sync.Mutex
	limit int
	size  int
	all   uint64
	gens  map[int64]uint64 // per group; absent is 0
	m     map[rangeKey]*builtRange
	lru   *list.List
}

// newRangeCache returns a cache of built ranges of at most limit bytes.
func newRangeCache(limit int) *rangeCache {
	return &rangeCache{limit: limit, gens: map[int64]uint64{}, m: map[rangeKey]*builtRange{}, lru: list.New()}
}

// bump starts a new generation of every group: everything built before is
// stale.
func (c *rangeCache) bump() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all++
	for k, r := range c.m {
		delete(c.m, k)
		c.lru.Remove(r.elem)
	}
	c.size = 0
}

// bumpGroups starts a new generation of groups, whose logs grew: their
// ranges built before are stale, the other groups' stay.
func (c *rangeCache) bumpGroups(groups []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	grew := make(map[int64]bool, len(groups))
	for _, g := range groups {
		c.gens[g]++
		grew[g] = true
	}
	for k, r := range c.m {
		if grew[k.grp] {
			delete(c.m, k)
			c.lru.Remove(r.elem)
			c.size -= r.size
		}
	}
}

// generation returns the current generation of group grp, for a range of
// it about to be built.
func (c *rangeCache) generation(grp int64) generation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return generation{all: c.all, group: c.gens[grp]}
}

// get returns the built range of key k, if cached.
func (c *rangeCache) get(k rangeKey) *builtRange {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.m[k]
	if r != nil {
		c.lru.MoveToFront(r.elem)
	}
	return r
}

// put caches a built range, unless it is stale or too large.
func (c *rangeCache) put(r *builtRange) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.gen != (generation{all: c.all, group: c.gens[r.key.grp]}) || r.size > c.limit/4 {
		return
	}
	if old := c.m[r.key]; old != nil {
		return
	}
	r.elem = c.lru.PushFront(r)
	c.m[r.key] = r
	c.size += r.size
	for c.size > c.limit {
		last := c.lru.Back()
		old := last.Value.(*builtRange)
		c.lru.Remove(last)
		delete(c.m, old.key)
		c.size -= old.size
	}
}

// rangeOf returns the entries of a group's log in (from, to], built once
// for every member at the same position.
func (s *Server) rangeOf(ctx context.Context, q querier, grp, from, to int64) (*builtRange, error) {
	k := rangeKey{grp, from, to}
	if r := s.out.cache.get(k); r != nil {
		return r, nil
	}
	gen := s.out.cache.generation(grp)
	rows, err := q.Query(ctx, s.sql.of(qLogRange), grp, from, to)
	if err != nil {
		return nil, fmt.Errorf("reading the log of group %d: %w", grp, err)
	}
	r := &builtRange{key: k, gen: gen}
	byTable := map[*table][][]byte{}
	for rows.Next() {
		var tbl string
		var key []byte
		var pos int64
		if err := rows.Scan(&tbl, &key, &pos); err != nil {
			rows.Close()
			return nil, err
		}
		t := s.m.byName[tbl]
		if t == nil || !t.catalog {
			continue
		}
		r.entries = append(r.entries, entry{tbl: t, key: key, pos: pos})
		byTable[t] = append(byTable[t], key)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	now := map[*table]map[string]current{}
	for t, keys := range byTable {
		cur, err := s.plannedRows(ctx, q, t, keys)
		if err != nil {
			return nil, err
		}
		now[t] = cur
	}
	for i := range r.entries {
		e := &r.entries[i]
		if c, ok := now[e.tbl][string(e.key)]; ok {
			e.tuple, e.grp = c.tuple, c.grp
		}
		r.size += len(e.key) + len(e.tuple) + 64
	}
	s.out.cache.put(r)
	return r, nil
}
