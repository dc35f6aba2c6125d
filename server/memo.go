package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// memo.go holds what a process remembers of the replicas it served, so
// that a poll that says only what the process knows already costs the
// database nothing: the replicaMemo.
//
// Why it is correct with many processes over one database, any of them
// serving any replica's poll:
//
//   - An entry is filled only by what this process itself read or issued
//     (a delta it built, or a poll's read of a quiet replica), and it is
//     trusted only while the replica's word matches it exactly: the id it
//     says it applied is the last this process knows was issued to it, and
//     the SHA-256 it sends is that message's. Any other word takes the
//     full path (the database read, judgeID, the restore checks).
//   - Every event that changes what a replica's next message is (a message
//     issued by any process, an upload filed, a plan changed, a
//     provisioning started, a group's log grown) is announced at its commit
//     on the wake channel, and the processes that hear it drop the entries
//     concerned (and wake those replicas' parked polls, which then read
//     again). A batch of deltas announces the replicas it issued
//     messages to ("i:", compact, in the statement that records the ids,
//     so it costs none of its own); a build of one replica's message
//     (build) does not, for a notifying commit holds the notify lock
//     through its WAL flush: what made its message due was announced at
//     its own commit.
//   - An entry filled after a read is kept only if no drop concerning it
//     came since before that read began (a sequence, per stripe of
//     replicas, per group and for all), so that an announcement heard
//     between a read and the filing is never lost.
//   - Entries are trusted only while the listener hears: it sends itself a
//     heartbeat every heartbeatEvery and the memo is trusted only while
//     one was heard less than heartbeatLag ago (PostgreSQL delivers the
//     notifications in commit order, so hearing the heartbeat means having
//     heard everything committed before it). A lost connection, or a
//     heartbeat late, forgets everything and wakes every waiter. Without
//     Run, nothing is remembered.
//   - A database restored from an older backup closes every connection
//     (the listener's among them: everything is forgotten), and a logical
//     restore replaces the engine's tables, which the heartbeat notices
//     (sync_replicas' oid changes). As a last guard, the writes stay the
//     database's: a build reads the replica's next id under its row's lock,
//     and one behind what this process issued forgets everything and fails
//     the poll (the replica retries, and the full path judges its word);
//     an acknowledgement of an id the database never issued is refused and
//     the poll takes the full path; an id issued twice conflicts on
//     sync_issued's key. An entry is trusted for memoTrustFor at most.
//   - A SIGKILLed process loses only its memory: the database holds
//     everything, and the others never trusted what it remembered.
//
// So a stale entry can cost a retry or delay a wake-up by the lag of a
// notification, never a wrong message, and a message issued by one process
// whose answer was lost reaches the replica through another as soon as that
// one hears the announcement (not after the long-poll window).
type replicaMemo struct {
	mu sync.Mutex
	m  map[uuid.UUID]*memoEntry
	// seq counts the drops; stripes, grew and allAt say when (at which seq)
	// a stripe of replicas, a group's log or everything last changed.
	seq     uint64
	stripes [memoStripes]uint64
	grew    map[int64]uint64
	allAt   uint64
	// heard is when the last heartbeat was heard (UnixNano; 0: not
	// listening); since, when the listener last began to be trusted.
	heard atomic.Int64
	since atomic.Int64
	// oid is sync_replicas' oid as the last heartbeat read it.
	oid uint32
}

// memoEntry is what a process knows of one replica: the last message it
// issued it and that message's sum, the last id it knows acknowledged,
// its groups, and when (the memo's seq) the read it came from began.
type memoEntry struct {
	issued int64
	sum    [sha256.Size]byte
	acked  int64
	groups []int64
	token  uint64
	at     time.Time
}

// Bounds of the memo.
const (
	memoStripes    = 4096
	heartbeatEvery = time.Second
	heartbeatLag   = 3 * time.Second
	// memoTrustFor bounds an entry's life: past it, one poll reads the
	// replica's state again.
	memoTrustFor = 5 * time.Minute
	// authTrustFor is how long a known replica's credentials read while
	// the listener hears are kept (a rotation is heard at once).
	authTrustFor = 10 * time.Minute
)

// stripe is a replica's stripe.
func stripe(id uuid.UUID) int {
	return int(uint16(id[14])<<8|uint16(id[15])) % memoStripes
}

// trusted reports whether the listener hears, recently enough for the
// memo to be trusted.
func (m *replicaMemo) trusted() bool {
	h := m.heard.Load()
	return h != 0 && time.Since(time.Unix(0, h)) < heartbeatLag
}

// token is the current seq, taken before a read whose result may fill an
// entry.
func (m *replicaMemo) token() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seq
}

// still reports whether nothing concerning the replica or its groups
// changed since token.
func (m *replicaMemo) still(replica uuid.UUID, groups []int64, token uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stillLocked(replica, groups, token)
}

func (m *replicaMemo) stillLocked(replica uuid.UUID, groups []int64, token uint64) bool {
	if m.allAt > token || m.stripes[stripe(replica)] > token {
		return false
	}
	for _, g := range groups {
		if m.grew[g] > token {
			return false
		}
	}
	return true
}

// get returns a copy of the replica's entry, if trusted.
func (m *replicaMemo) get(replica uuid.UUID) (memoEntry, bool) {
	if !m.trusted() {
		return memoEntry{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.m[replica]
	if e == nil || time.Since(e.at) > memoTrustFor || m.allAt > e.token || m.stripes[stripe(replica)] > e.token {
		return memoEntry{}, false
	}
	return *e, true
}

// put fills the replica's entry from a read or a build that began at
// token, unless something concerning it was dropped since, or the
// listener does not hear.
func (m *replicaMemo) put(replica uuid.UUID, e memoEntry) {
	if !m.trusted() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.allAt > e.token || m.stripes[stripe(replica)] > e.token {
		return
	}
	if m.m == nil || len(m.m) >= maxCachedCreds {
		m.m = map[uuid.UUID]*memoEntry{}
	}
	e.at = time.Now()
	m.m[replica] = &e
}

// acked notes that the database acknowledged up to id.
func (m *replicaMemo) acked(replica uuid.UUID, id int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.m[replica]
	switch {
	case e == nil:
	case id > e.issued:
		// Issued by another process: what this one knows is behind.
		m.dropLocked(replica)
	default:
		e.acked = max(e.acked, id)
	}
}

// issuedHere returns the last id this process knows it issued the
// replica, whatever the trust (0: none known).
func (m *replicaMemo) issuedHere(replica uuid.UUID) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.m[replica]; e != nil {
		return e.issued
	}
	return 0
}

// drop forgets replicas, whose next message may have changed.
func (m *replicaMemo) drop(replicas ...uuid.UUID) {
	if len(replicas) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range replicas {
		m.dropLocked(r)
	}
}

func (m *replicaMemo) dropLocked(replica uuid.UUID) {
	m.seq++
	delete(m.m, replica)
	m.stripes[stripe(replica)] = m.seq
}

// groupsGrew notes that the logs of groups grew: the replicas following
// them may be behind.
func (m *replicaMemo) groupsGrew(groups []int64) {
	if len(groups) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	if m.grew == nil {
		m.grew = map[int64]uint64{}
	}
	for _, g := range groups {
		m.grew[g] = m.seq
	}
}

// forgetAll forgets everything: the notifications may have gone unheard.
func (m *replicaMemo) forgetAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	m.allAt = m.seq
	m.m = nil
	m.grew = nil
}

// heardBeat notes a heartbeat heard, sent at sent.
func (m *replicaMemo) heardBeat(sent time.Time) {
	if m.heard.Load() == 0 {
		m.since.Store(time.Now().UnixNano())
	}
	if old := m.heard.Load(); sent.UnixNano() > old {
		m.heard.Store(sent.UnixNano())
	}
}

// deaf notes that the listener does not hear (any more): nothing is
// trusted until a heartbeat is heard again.
func (m *replicaMemo) deaf() {
	m.heard.Store(0)
	m.since.Store(0)
}

// trustedSince is when the listener began to be trusted, zero when it is
// not.
func (m *replicaMemo) trustedSince() time.Time {
	if !m.trusted() {
		return time.Time{}
	}
	return time.Unix(0, m.since.Load())
}

// matches reports whether a replica's word is exactly the entry's last
// issued message.
func (e *memoEntry) matches(applied Applied) bool {
	return applied.ID != 0 && int64(applied.ID) == e.issued && len(applied.Sum) == sha256.Size && bytes.Equal(applied.Sum, e.sum[:])
}

// issuedPayloads are the announcements of the replicas a build issued
// messages to: "i:<nonce>:" and their ids, 22 characters each, in as many
// payloads as PostgreSQL's bound of 8000 bytes takes.
func issuedPayloads(nonce string, ids [][16]byte) []string {
	const perPayload = 300 // 300 × 23 + the prefix < 8000
	var out []string
	for start := 0; start < len(ids); start += perPayload {
		part := ids[start:min(start+perPayload, len(ids))]
		var b strings.Builder
		b.Grow(len(nonce) + 3 + len(part)*23)
		b.WriteString("i:" + nonce + ":")
		for i, id := range part {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(base64.RawURLEncoding.EncodeToString(id[:]))
		}
		out = append(out, b.String())
	}
	return out
}

// parseIssued reads the ids of an announcement's payload (after "i:<nonce>:").
func parseIssued(list string) []uuid.UUID {
	var ids []uuid.UUID
	for p := range strings.SplitSeq(list, ",") {
		var id uuid.UUID
		if n, err := base64.RawURLEncoding.Decode(id[:], []byte(p)); err == nil && n == 16 {
			ids = append(ids, id)
		}
	}
	return ids
}
