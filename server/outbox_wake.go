package server

import (
	"container/list"
	"sync"

	"github.com/google/uuid"
)

// hub.go holds what is shared in memory by a process's Next calls: the
// hub that wakes the waiting ones, and the cache of built ranges of logs.

// hub wakes the Next calls waiting in this process. A waiter names the
// groups whose logs it follows (nil: wake it for anything); a pass wakes the
// waiters of the groups it appended to and of the replicas whose plan it
// changed (added, removed, moved to other groups), Receive the waiters of
// one replica.
type hub struct {
	mu      sync.Mutex
	waiters map[*waiter]struct{}
}

// waiter is one waiting Next call: the replica's, and the groups it follows.
type waiter struct {
	replica uuid.UUID
	groups  map[int64]bool // nil: every wake
	ch      chan struct{}  // buffered 1
}

// newHub returns a hub with no waiters.
func newHub() *hub { return &hub{waiters: map[*waiter]struct{}{}} }

// register adds a waiter for the replica.
func (h *hub) register(replica uuid.UUID) *waiter {
	w := &waiter{replica: replica, ch: make(chan struct{}, 1)}
	h.mu.Lock()
	h.waiters[w] = struct{}{}
	h.mu.Unlock()
	return w
}

// unregister removes a waiter.
func (h *hub) unregister(w *waiter) {
	h.mu.Lock()
	delete(h.waiters, w)
	h.mu.Unlock()
}

// follow sets the groups a waiter follows.
func (h *hub) follow(w *waiter, groups []int64) {
	set := make(map[int64]bool, len(groups))
	for _, g := range groups {
		set[g] = true
	}
	h.mu.Lock()
	w.groups = set
	h.mu.Unlock()
}

// wake wakes the waiter, unless a wake is pending already.
func (w *waiter) wake() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// wakeGroups wakes the waiters following any of groups.
func (h *hub) wakeGroups(groups []int64) {
	if len(groups) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters {
		if w.groups == nil {
			w.wake()
			continue
		}
		for _, g := range groups {
			if w.groups[g] {
				w.wake()
				break
			}
		}
	}
}

// wakeReplica wakes the waiters of one replica.
func (h *hub) wakeReplica(id uuid.UUID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters {
		if w.replica == id {
			w.wake()
		}
	}
}

// wakeReplicas wakes the waiters of these replicas.
func (h *hub) wakeReplicas(ids []uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	set := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters {
		if set[w.replica] {
			w.wake()
		}
	}
}

// wakeAll wakes every waiter.
func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters {
		w.wake()
	}
}

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
