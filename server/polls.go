package server

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// polls.go holds the record of the replicas' polls (when each was last
// seen, for Status and the dashboard's online), kept in memory as polls
// come and written in batches by Run's poll recorder.

// pollMarks are the polls seen and not yet written. They are written, all
// of them in one statement, by Run every second and by Status before it
// reads them: a poll costs no commit of its own (and an idle fleet's polls
// one commit a second), and no statement but the one that reads.
type pollMarks struct {
	mu      sync.Mutex
	pending map[uuid.UUID]pollMark
	// written is when each replica's poll last written came: a replica
	// polling again soon after is not written again (freshFor).
	written map[uuid.UUID]time.Time
}

// pollMark is one replica's latest poll.
type pollMark struct {
	at     time.Time
	window *time.Duration
}

// pollRecordEvery is how often Run writes the polls seen: the dashboard's
// online allows twice the poll's window, seconds at least.
const pollRecordEvery = time.Second

// note notes a replica's poll, unless the last written is fresh enough.
func (p *pollMarks) note(replica uuid.UUID, window *time.Duration) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if at, ok := p.written[replica]; ok && now.Sub(at) < freshFor(window) {
		return
	}
	if p.pending == nil || len(p.pending) >= maxCachedCreds {
		p.pending = map[uuid.UUID]pollMark{}
	}
	p.pending[replica] = pollMark{at: now, window: window}
}

// freshFor is how long a replica's poll written stays fresh enough not to
// be written again: half its window (the dashboard's online allows twice
// the window), between pollRecordEvery and pollFreshMax. A replica that
// polls again as soon as a message came (a fleet taking a broadcast) then
// writes nothing more.
func freshFor(window *time.Duration) time.Duration {
	if window == nil {
		return pollRecordEvery
	}
	return min(max(*window/2, pollRecordEvery), pollFreshMax)
}

// pollFreshMax bounds freshFor: the last seen that Status shows is at most
// that old while a replica polls.
const pollFreshMax = 10 * time.Second

// take returns the marks pending and forgets them.
func (p *pollMarks) take() map[uuid.UUID]pollMark {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.pending
	p.pending = nil
	return out
}

// wrote records marks written.
func (p *pollMarks) wrote(marks map[uuid.UUID]pollMark) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.written == nil || len(p.written)+len(marks) > maxCachedCreds {
		p.written = map[uuid.UUID]time.Time{}
	}
	for id, m := range marks {
		p.written[id] = m.at
	}
}

// putBack keeps marks whose writing failed, unless newer came meanwhile.
func (p *pollMarks) putBack(marks map[uuid.UUID]pollMark) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending == nil {
		p.pending = map[uuid.UUID]pollMark{}
	}
	for id, m := range marks {
		if _, newer := p.pending[id]; !newer && len(p.pending) < maxCachedCreds {
			p.pending[id] = m
		}
	}
}

// recordPolls writes the polls seen since the last time, in one
// statement: when each replica last polled (as the database's clock has
// it: its now less how long ago the poll came) and how long it waits. A
// failure is logged and the marks are kept for the next time: they say
// only whether a replica is online.
func (s *Server) recordPolls(ctx context.Context) {
	marks := s.out.polls.take()
	if len(marks) == 0 {
		return
	}
	now := time.Now()
	ids := make([][16]byte, 0, len(marks))
	agos := make([]pgtype.Interval, 0, len(marks))
	windows := make([]pgtype.Interval, 0, len(marks))
	for id, m := range marks {
		ids = append(ids, id)
		agos = append(agos, pgtype.Interval{Microseconds: now.Sub(m.at).Microseconds(), Valid: true})
		w := pgtype.Interval{}
		if m.window != nil {
			w = pgtype.Interval{Microseconds: m.window.Microseconds(), Valid: true}
		}
		windows = append(windows, w)
	}
	if _, err := s.pool.Exec(ctx, s.sql.of(qRecordPolls), ids, agos, windows); err != nil {
		s.out.polls.putBack(marks)
		if ctx.Err() == nil {
			s.log.Warn("magicsync/server: recording the replicas' polls failed; trying again", "replicas", len(marks), "err", err)
		}
		return
	}
	s.out.polls.wrote(marks)
}

// recordPollsEvery writes the polls seen every pollRecordEvery. It
// returns when ctx ends, writing what is pending first.
func (s *Server) recordPollsEvery(ctx context.Context) {
	tick := time.NewTicker(pollRecordEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.pollQueryTimeout)
			s.recordPolls(fctx)
			cancel()
			return
		case <-tick.C:
			s.recordPolls(ctx)
		}
	}
}
