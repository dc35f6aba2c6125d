package server

import (
	"sync"

	"github.com/google/uuid"
)

// outbox_wake.go holds the hub that wakes a process's Next calls waiting for
// something new: by group, by replica, or all.

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
	// own says a wake pending was for the replica itself (a confirmation
	// queued, its plan changed, every waiter woken), not only for changes
	// in its groups' logs: its next message need not linger (Linger).
	own bool
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

// wakeOwn wakes the waiter for its replica itself; h.mu is held.
func (w *waiter) wakeOwn() {
	w.own = true
	w.wake()
}

// tookOwn reports whether the wake the waiter took was for its replica
// itself (wakeOwn), and forgets it.
func (h *hub) tookOwn(w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	own := w.own
	w.own = false
	return own
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
			w.wakeOwn()
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
			w.wakeOwn()
		}
	}
}

// wakeAll wakes every waiter.
func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters {
		w.wakeOwn()
	}
}
