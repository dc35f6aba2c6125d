package server

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// trimEvery is how often Run trims the logs of what every member acked,
// and forgets the filed uploads no replica can ask for again.
const trimEvery = time.Minute

// Run plans until ctx ends, then returns nil: a pass whenever the triggers
// notify (once per writing transaction) and at least every PassEvery. It
// also LISTENs for what other processes serving the same database did, so
// that the Next calls waiting here wake for it; and it builds the next part
// of a provisioning while the replica applies the one Next handed out. Run
// it in every process that serves Next; one plans at a time, whichever
// holds the lock.
func (s *Server) Run(ctx context.Context) error {
	kick := make(chan struct{}, 1)
	var wg sync.WaitGroup
	lctx, cancel := context.WithCancel(ctx)
	defer wg.Wait()
	defer cancel()
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.listen(lctx, kick)
	}()
	go func() {
		defer wg.Done()
		s.buildAhead(lctx)
	}()
	tick := time.NewTicker(s.opts.PassEvery)
	defer tick.Stop()
	lastTrim := time.Now()
	for {
		if err := s.Pass(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Error("magicsync: pass failed; trying again", "err", err)
		}
		if time.Since(lastTrim) > trimEvery {
			lastTrim = time.Now()
			if err := s.trimLogs(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("magicsync: trimming the logs failed", "err", err)
			}
			if err := s.trimFiled(ctx, filedKeep); err != nil && ctx.Err() == nil {
				s.log.Warn("magicsync: forgetting filed uploads failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-kick:
		}
	}
}

// listen LISTENs on the triggers' channel (kicking a pass) and on the wake
// channel (waking this process's waiters), reconnecting after failures.
func (s *Server) listen(ctx context.Context, kick chan<- struct{}) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, kick)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("magicsync: listening for notifications failed; reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (s *Server) listenOnce(ctx context.Context, kick chan<- struct{}) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	for _, ch := range []string{notifyChannel, wakeChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+quoteIdentPlain(ch)); err != nil {
			conn.Conn().Close(ctx) //nolint:errcheck // closing a failed connection
			return err
		}
	}
	if s.hooks.listening != nil {
		s.hooks.listening()
	}
	// Whatever happened while not listening: wake everyone, plan.
	s.hub.wakeAll()
	select {
	case kick <- struct{}{}:
	default:
	}
	defer func() {
		// Leave no LISTEN on a pooled connection.
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := conn.Exec(c, "UNLISTEN *"); err != nil {
			conn.Conn().Close(c) //nolint:errcheck // it is being dropped
		}
	}()
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case notifyChannel:
			select {
			case kick <- struct{}{}:
			default:
			}
		case wakeChannel:
			s.wakeFor(n.Payload)
		}
	}
}

// wakeFor wakes the waiters a wake notification concerns.
func (s *Server) wakeFor(payload string) {
	switch {
	case strings.HasPrefix(payload, "g:"):
		rest := payload[2:]
		if nonce, ids, ok := strings.Cut(rest, ":"); ok {
			if nonce == s.nonce {
				return // this process's own pass, which woke them already
			}
			rest = ids
		}
		var groups []int64
		for p := range strings.SplitSeq(rest, ",") {
			if g, err := strconv.ParseInt(p, 10, 64); err == nil {
				groups = append(groups, g)
			}
		}
		s.cache.bump()
		s.hub.wakeGroups(groups)
	case strings.HasPrefix(payload, "r:"):
		rest := payload[2:]
		if nonce, ids, ok := strings.Cut(rest, ":"); ok {
			if nonce == s.nonce {
				return // this process's own pass, which woke them already
			}
			rest = ids
		}
		var ids []uuid.UUID
		for p := range strings.SplitSeq(rest, ",") {
			if id, err := uuid.Parse(p); err == nil {
				ids = append(ids, id)
			}
		}
		s.hub.wakeReplicas(ids)
	default:
		s.cache.bump()
		s.hub.wakeAll()
	}
}

func quoteIdentPlain(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
