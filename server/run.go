package server

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// run.go holds Run, the engine's background work: passes, trims, building
// ahead, moving rollouts on, and listening for the wake-ups of other
// processes.

// trimEvery is how often Run trims the logs of what every member acked,
// and forgets the filed uploads no replica can ask for again.
const trimEvery = time.Minute

// Run plans until ctx ends, then returns nil: a pass soon after the
// host's writes noted keys (within PollEvery of the notes, or of their
// commit when it comes within PassEvery of them) and at least every
// PassEvery. It
// also LISTENs for what other processes serving the same database did, so
// that the Next calls waiting here wake for it; and it builds the next part
// of a provisioning while the replica applies the one Next handed out.
// After a pass, at most every PassEvery, it moves the running rollouts on
// (AdvanceRollouts). Run it in every process that serves Next; one plans
// at a time, whichever holds the lock.
//
// A pass that fails — the database gone away, say — does not end Run: it
// tries again, backing off up to outageBackoffMax (and at once when the
// notifications come back), logs a warning once per outage rather than
// once per attempt, and logs again when a pass works once more. Only the
// end of ctx ends it.
func (s *Server) Run(ctx context.Context) error {
	// kick is the watch's: notes to plan. relisten is the listener's: the
	// notifications came back, and with them, likely, the database. While
	// passes fail, only relisten cuts the backoff short: notes that stay
	// while a pass fails keep the watch kicking.
	kick := make(chan struct{}, 1)
	relisten := make(chan struct{}, 1)
	var wg sync.WaitGroup
	lctx, cancel := context.WithCancel(ctx)
	defer wg.Wait()
	defer cancel()
	wg.Add(4)
	go func() {
		defer wg.Done()
		s.listen(lctx, relisten)
	}()
	go func() {
		defer wg.Done()
		s.recordPollsEvery(lctx)
	}()
	go func() {
		defer wg.Done()
		s.watch(lctx, kick)
	}()
	go func() {
		defer wg.Done()
		s.buildAhead(lctx)
	}()
	tick := time.NewTicker(s.opts.PassEvery)
	defer tick.Stop()
	lastTrim := time.Now()
	var lastRollouts time.Time
	var out outage
	for {
		err := s.pass(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := out.note(s.log, err, "magicsync/server: planning fails; trying again until it works", "magicsync/server: planning works again")
		if err == nil && time.Since(lastRollouts) >= s.opts.PassEvery {
			// Rollouts move on as their replicas answer: a look at most
			// every PassEvery, which reads an index of the running ones
			// (mostly none) and costs nothing more when none runs.
			lastRollouts = time.Now()
			if err := s.AdvanceRollouts(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("magicsync/server: advancing the rollouts failed", "err", err)
			}
		}
		if err == nil && time.Since(lastTrim) > trimEvery {
			lastTrim = time.Now()
			if err := s.trimLogs(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("magicsync/server: trimming the logs failed", "err", err)
			}
			if err := s.trimFiled(ctx, filedKeep); err != nil && ctx.Err() == nil {
				s.log.Warn("magicsync/server: forgetting filed uploads failed", "err", err)
			}
		}
		if wait > 0 {
			// Failing: wait out the backoff, unless the notifications
			// came back.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(max(wait, s.opts.PassEvery)):
			case <-relisten:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-kick:
		case <-relisten:
		}
	}
}

// outageBackoffMin and outageBackoffMax bound the backoff between two
// attempts while the database fails.
const (
	outageBackoffMin = 100 * time.Millisecond
	outageBackoffMax = 5 * time.Second
)

// outage follows a run of failures of one recurring task, so that it is
// logged once when it starts and once when it ends, not at every attempt.
type outage struct {
	since   time.Time // when the first failure of the run came; zero when none
	backoff time.Duration
	count   int
}

// note records how an attempt went and returns how long to wait before
// the next (zero: as usual). The first failure of a run is logged at
// warning level with failed, the others at debug level; a success after
// failures is logged at info level with works.
func (o *outage) note(log *slog.Logger, err error, failed, works string) time.Duration {
	if err == nil {
		if !o.since.IsZero() {
			log.Info(works, "after", time.Since(o.since).Round(time.Millisecond), "failures", o.count)
		}
		*o = outage{}
		return 0
	}
	o.count++
	if o.since.IsZero() {
		o.since = time.Now()
		o.backoff = outageBackoffMin
		log.Warn(failed, "err", err)
	} else {
		o.backoff = min(2*o.backoff, outageBackoffMax)
		log.Debug(failed, "err", err, "since", o.since, "failures", o.count)
	}
	return o.backoff
}

// watch kicks a pass when the host's writes noted keys: every PollEvery it
// reads how far sync_touched's sequence went, which a writing transaction
// advances as its triggers note keys, before it commits. A pass kicked at
// once may not see the notes of a transaction still committing, so for
// PassEvery after the sequence moved, watch also looks whether notes are
// there to take, and kicks again when they are: a transaction committing
// later than that waits for Run's PassEvery timer. After a failure watch
// backs off as Run does (outageBackoffMin to outageBackoffMax), logging
// once per outage, and kicks a pass once it works again.
func (s *Server) watch(ctx context.Context, kick chan<- struct{}) {
	every := s.opts.PollEvery
	timer := time.NewTimer(every)
	defer timer.Stop()
	seen := int64(-1)
	var pendingUntil time.Time // while the notes of a moved sequence may come
	var lastMoved time.Time
	var out outage
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		before := seen
		due, err := s.watchOnce(ctx, &seen, &pendingUntil)
		if ctx.Err() != nil {
			// Stopped while looking: the look failed for that, and no
			// more is asked of it.
			return
		}
		if wait := out.note(s.log, err, "magicsync/server: watching for the host's writes fails; passes wait for PassEvery until it works", "magicsync/server: watching for the host's writes works again"); wait > 0 {
			// Whatever was noted meanwhile is planned once it works again.
			seen = -1
			timer.Reset(wait)
			continue
		}
		if seen != before {
			lastMoved = time.Now()
		}
		every = watchInterval(s.opts.PollEvery, every, time.Since(lastMoved))
		timer.Reset(every)
		if !due {
			continue
		}
		select {
		case kick <- struct{}{}:
		default:
		}
	}
}

// Once the host has not written for watchQuietAfter, the watch looks less
// and less often, down to once every watchQuietFactor × PollEvery: an idle
// server reads the sequence some 25 times a second, not 200, and the
// first write after a quiet spell waits that much longer for its pass.
const (
	watchQuietAfter  = time.Second
	watchQuietFactor = 8
)

// watchInterval is the watch's next interval, given PollEvery, the last
// interval and how long ago the sequence last moved.
func watchInterval(pollEvery, last, sinceMoved time.Duration) time.Duration {
	if sinceMoved < watchQuietAfter {
		return pollEvery
	}
	return min(2*last, watchQuietFactor*pollEvery)
}

// watchOnce is one look of watch: whether a pass is due. While the
// sequence moves, reading it is enough; only once it stands still, for
// PassEvery after it last moved, does watch look whether notes committed
// since are there to take (a look that reads the queue's table, deleted
// rows included until vacuum).
func (s *Server) watchOnce(ctx context.Context, seen *int64, pendingUntil *time.Time) (bool, error) {
	var last int64
	if err := s.pool.QueryRow(ctx, s.sql.of(qWatch)).Scan(&last); err != nil {
		return false, err
	}
	if last != *seen {
		*seen, *pendingUntil = last, time.Now().Add(s.opts.PassEvery)
		return true, nil
	}
	if !time.Now().Before(*pendingUntil) {
		return false, nil
	}
	var notes bool
	if err := s.pool.QueryRow(ctx, s.sql.of(qWatchNotes)).Scan(&notes); err != nil {
		return false, err
	}
	return notes, nil
}

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
	if _, err := conn.Exec(ctx, qListen+quoteIdentPlain(s.m.engine.wakeChannel())); err != nil {
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
