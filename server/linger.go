package server

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
)

// linger.go holds Options.Linger: the least time between two passes, and
// between two messages of changes to one replica.

// lingerMarks is when this process last handed each replica a message of
// changes, for Next to linger after (Options.Linger).
type lingerMarks struct {
	mu sync.Mutex
	at map[uuid.UUID]time.Time
}

// handed notes that the replica was handed a message of changes now.
// Marks older than linger say nothing, and go when the map grows large.
func (l *lingerMarks) handed(replica uuid.UUID, linger time.Duration) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at == nil {
		l.at = map[uuid.UUID]time.Time{}
	}
	if len(l.at) >= maxCachedCreds {
		for id, at := range l.at {
			if now.Sub(at) >= linger {
				delete(l.at, id)
			}
		}
	}
	l.at[replica] = now
}

// last is when the replica was last handed a message of changes here; zero
// when never, or too long ago to remember.
func (l *lingerMarks) last(replica uuid.UUID) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at[replica]
}

// lingerUntil waits until the time until, or until ctx ends, whichever
// comes first; it returns at once when until has passed.
func lingerUntil(ctx context.Context, until time.Time) {
	wait := time.Until(until)
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// lingerBeforeDelta waits, under Options.Linger, until Linger after the
// replica's last message of changes, when its next message would be one
// (changed: woken by changes in its groups' logs; or behind them, by
// state, with nothing else due): the changes that come meanwhile go with
// it. A poll whose caller waits for nothing (ctx ended) looks at once, as
// it always does.
func (s *Server) lingerBeforeDelta(ctx context.Context, replica uuid.UUID, state *nextState, changed bool) {
	if s.opts.Linger <= 0 || ctx.Err() != nil {
		return
	}
	delta := changed || state != nil && state.behind && !state.provisioning && !state.queued && !state.filed
	if !delta {
		return
	}
	if last := s.out.lingered.last(replica); !last.IsZero() {
		lingerUntil(ctx, last.Add(s.opts.Linger))
	}
}

// handedDelta notes, under Options.Linger, that the replica was handed a
// message of changes.
func (s *Server) handedDelta(replica uuid.UUID, msg Message) {
	if s.opts.Linger > 0 && msg.kind == "down" {
		s.out.lingered.handed(replica, s.opts.Linger)
	}
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
