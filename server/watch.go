package server

import (
	"context"
	"time"
)

// watch.go holds the watch, Run's service that kicks the planner when the
// host's writes noted keys.

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
	writing, quiet := watchEvery(s.opts.PollEvery, s.opts.Linger)
	every := writing
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
		every = watchInterval(writing, quiet, every, time.Since(lastMoved))
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

// watchEvery is how often the watch looks while the host writes, and
// how seldom at most once it is quiet. Under a linger, passes come no
// sooner than Linger apart, and a look every Linger/2 while the host
// writes finds each pass's notes in time.
func watchEvery(pollEvery, linger time.Duration) (writing, quiet time.Duration) {
	writing = max(pollEvery, linger/2)
	return writing, max(watchQuietFactor*pollEvery, writing)
}

// watchInterval is the watch's next interval, given its intervals while
// the host writes and once it is quiet (watchEvery), the last interval
// and how long ago the sequence last moved.
func watchInterval(writing, quiet, last, sinceMoved time.Duration) time.Duration {
	if sinceMoved < watchQuietAfter {
		return writing
	}
	return max(writing, min(2*last, quiet))
}

// watchOnce is one look of watch: whether a pass is due. While the
// sequence moves, reading it is enough; only once it stands still, for
// PassEvery after it last moved, does watch look whether notes committed
// since are there to take (a look that reads the queue's table, deleted
// rows included until vacuum). Notes the slot's reader wrote in this
// process (CaptureLogical) are not a reason to kick: it kicked the
// planner for them itself.
func (s *Server) watchOnce(ctx context.Context, seen *int64, pendingUntil *time.Time) (bool, error) {
	var last int64
	if err := s.pool.QueryRow(ctx, s.sql.of(qWatch)).Scan(&last); err != nil {
		return false, err
	}
	if last != *seen {
		*seen, *pendingUntil = last, time.Now().Add(s.opts.PassEvery)
		// Notes the slot's reader wrote here kicked the planner already:
		// a second kick would only run an empty pass.
		return last > s.plan.kicked.Load(), nil
	}
	if !time.Now().Before(*pendingUntil) {
		return false, nil
	}
	var waiting int64
	if err := s.pool.QueryRow(ctx, s.sql.of(qWatchNotes)).Scan(&waiting); err != nil {
		return false, err
	}
	return waiting > s.plan.kicked.Load(), nil
}
