package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// listen.go holds the listener, Run's service that hears what the other
// processes serving the database did (the wake channel) and keeps this
// process's memo trusted (its heartbeat).

// listen LISTENs on the wake channel (waking this process's waiters),
// reconnecting after failures. Wake-ups kick no pass: the passes that send
// them are planned already. Each time it listens again it sends on
// relisten: a pass is due, what was heard of in between having gone
// unheard.
func (s *Server) listen(ctx context.Context, relisten chan<- struct{}) {
	var out outage
	for ctx.Err() == nil {
		listened := false
		err := s.listenOnce(ctx, relisten, func() {
			listened = true
			out.note(s.log, nil, "", "magicsync/server: listening for notifications again")
		})
		if ctx.Err() != nil {
			return
		}
		if listened {
			// A connection lost after it listened: reconnect at once, and
			// say so once.
			out.note(s.log, err, "magicsync/server: listening for notifications failed; reconnecting", "")
			continue
		}
		wait := out.note(s.log, err, "magicsync/server: listening for notifications failed; reconnecting", "")
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// listenOnce listens on one connection until it fails, calling listening
// once it listens.
func (s *Server) listenOnce(ctx context.Context, relisten chan<- struct{}, listening func()) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, s.m.engine.listen()); err != nil {
		conn.Conn().Close(ctx) //nolint:errcheck // closing a failed connection
		return err
	}
	// The first heartbeat goes before the listener counts as listening: one
	// that fails (the engine's tables unreadable, say) backs off as a
	// failed LISTEN does.
	if err := s.heartbeat(ctx, conn.Conn()); err != nil {
		conn.Conn().Close(ctx) //nolint:errcheck // closing a failed connection
		return err
	}
	beat := time.Now() // when the last heartbeat was sent
	listening()
	if s.hooks.listening != nil {
		s.hooks.listening()
	}
	// Whatever happened while not listening: forget the ranges built and
	// what was remembered of the replicas (the other processes' passes and
	// builds went unheard), wake everyone, plan.
	s.out.cache.bump()
	s.memo.forgetAll()
	s.hub.wakeAll()
	select {
	case relisten <- struct{}{}:
	default:
	}
	defer func() {
		// From now on nothing is heard: nothing remembered is trusted, and
		// the polls parked on it read again.
		s.memo.deaf()
		s.memo.forgetAll()
		s.creds.clear()
		s.hub.wakeAll()
		// Leave no LISTEN on a pooled connection.
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := conn.Exec(c, qUnlisten); err != nil {
			conn.Conn().Close(c) //nolint:errcheck // it is being dropped
		}
	}()
	for {
		if time.Since(beat) >= heartbeatEvery {
			if err := s.heartbeat(ctx, conn.Conn()); err != nil {
				return err
			}
			beat = time.Now()
		}
		if s.memo.heard.Load() != 0 && !s.memo.trusted() {
			// The heartbeat is late: the notifications lag, or the
			// connection died without a word.
			return fmt.Errorf("magicsync/server: the listener's heartbeat did not come back within %v", heartbeatLag)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Until(beat.Add(heartbeatEvery)))
		n, err := conn.Conn().WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil && wctx.Err() != nil {
				continue // time for the next heartbeat
			}
			return err
		}
		if n.Channel == s.m.engine.wakeChannel() {
			s.wakeFor(n.Payload)
		}
	}
}

// heartbeat sends this process's heartbeat on the wake channel, from the
// listener's own connection (memo.go): heard back, it says that every
// notification committed before it was heard. It also reads sync_replicas'
// oid, which a logical restore of the engine's tables changes: everything
// remembered is then forgotten.
func (s *Server) heartbeat(ctx context.Context, conn *pgx.Conn) error {
	hctx, cancel := context.WithTimeout(ctx, heartbeatLag)
	defer cancel()
	var oid uint32
	payload := "h:" + s.nonce + ":" + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := conn.QueryRow(hctx, s.sql.of(qHeartbeat), s.m.engine.wakeChannel(), payload).Scan(&oid); err != nil {
		return fmt.Errorf("magicsync/server: the listener's heartbeat: %w", err)
	}
	if s.memo.oid != 0 && s.memo.oid != oid {
		s.log.Warn("magicsync/server: the engine's tables were replaced (restored?): forgetting what was remembered of the replicas")
		s.memo.forgetAll()
		s.creds.clear()
		s.hub.wakeAll()
	}
	s.memo.oid = oid
	return nil
}

// wakeFor wakes the waiters a wake notification concerns.
func (s *Server) wakeFor(payload string) {
	switch {
	case strings.HasPrefix(payload, "g:"):
		rest, own := s.othersList(payload[2:])
		if own {
			return // this process's own pass, which woke them already
		}
		var groups []int64
		for p := range strings.SplitSeq(rest, ",") {
			if g, err := strconv.ParseInt(p, 10, 64); err == nil {
				groups = append(groups, g)
			}
		}
		s.out.cache.bumpGroups(groups)
		s.memo.groupsGrew(groups)
		s.hub.wakeGroups(groups)
	case strings.HasPrefix(payload, "i:"):
		// Another process issued these replicas messages: what this one
		// knows of them is behind, and their polls parked here read again.
		nonce, list, _ := strings.Cut(payload[2:], ":")
		if nonce == s.nonce {
			return
		}
		ids := parseIssued(list)
		s.memo.drop(ids...)
		s.hub.wakeReplicas(ids)
	case strings.HasPrefix(payload, "h:"):
		// This process's heartbeat (memo.go): everything committed before
		// it was sent has been heard.
		nonce, sent, _ := strings.Cut(payload[2:], ":")
		if nonce != s.nonce {
			return
		}
		if ns, err := strconv.ParseInt(sent, 10, 64); err == nil {
			s.memo.heardBeat(time.Unix(0, ns))
			if s.hooks.heard != nil {
				s.hooks.heard()
			}
		}
	case strings.HasPrefix(payload, "e:"):
		// Events were written (events.go).
		s.bell.ring()
	case strings.HasPrefix(payload, "r:"):
		// A filing (receive.go), which may have written events.
		s.bell.ring()
		rest, own := s.othersList(payload[2:])
		if own {
			return // this process's own pass, which woke them already
		}
		var ids []uuid.UUID
		for p := range strings.SplitSeq(rest, ",") {
			if id, err := uuid.Parse(p); err == nil {
				ids = append(ids, id)
			}
		}
		s.memo.drop(ids...)
		s.creds.forgetAll(ids)
		s.hub.wakeReplicas(ids)
	case strings.HasPrefix(payload, "c:"):
		// A replica's secret was issued anew (Credentials).
		if id, err := uuid.Parse(payload[2:]); err == nil {
			s.creds.forget(id)
		}
	default:
		s.out.cache.bump()
		s.memo.forgetAll()
		s.hub.wakeAll()
	}
}

// othersList reads a wake's list, "nonce:list" or a bare list (which no
// process sent as its own): own is true when this process sent it.
func (s *Server) othersList(rest string) (list string, own bool) {
	nonce, list, ok := strings.Cut(rest, ":")
	if !ok {
		return rest, false
	}
	return list, nonce == s.nonce
}
