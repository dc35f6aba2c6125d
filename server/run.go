package server

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// run.go holds Run and the background services it runs, each a loop of
// its own with its own interval and stop (the end of Run's context):
//
//   - the planner (planLoop, below): a pass soon after the host's writes
//     noted keys, and at least every PassEvery (plan.go);
//   - the watch (watch.go): reads how far the triggers' notes went every
//     PollEvery, and kicks the planner;
//   - the listener (listen.go): LISTENs for what the other processes did,
//     waking the polls parked here, and keeps the memo trusted (memo.go);
//   - the builder ahead (buildAhead, outbox_build.go): builds a provisioning's
//     next part while the replica applies the last;
//   - the poll recorder (recordPollsEvery, polls.go): writes the polls
//     seen, every pollRecordEvery;
//   - the rollouts (advanceRolloutsEvery, rollout.go): moves the running
//     rollouts on, every PassEvery;
//   - the trimmer (trimEvery, trim.go): trims the logs of what every member
//     acknowledged, forgets old filed uploads and trims old events, every
//     trimInterval;
//   - the announcer (announcePresenceEvery, events_write.go): writes the
//     events of replicas come online or gone offline, every presenceEvery;
//   - under CaptureLogical, the capture (captureLogical, logical.go): reads
//     the host's changes from the replication slot, notes them and kicks
//     the planner; while another process reads the slot, looks every
//     slotRetry whether it is free.
//
// A service whose work fails — the database gone away, say — logs once
// per outage (outage, below), backs off, and tries again; only the end of
// the context stops it.

// Run runs the engine's background services until ctx ends, then returns
// nil once every one of them has stopped. It plans: a pass soon after the
// host's writes noted keys (within PollEvery of the notes, or of their
// commit when it comes within PassEvery of them) and at least every
// PassEvery. It also LISTENs for what other processes serving the same
// database did, so that the Next calls waiting here wake for it; it
// builds the next part of a provisioning while the replica applies the one
// Next handed out; every PassEvery it moves the running rollouts on
// (AdvanceRollouts); every two seconds it writes the events of replicas
// come online or gone offline (Events); and every minute it trims what no
// replica needs any more, and the events older than Options.KeepEvents.
// Run it in every process that serves Next; one plans at a time, whichever
// holds the lock.
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
	services := []func(context.Context){
		func(ctx context.Context) { s.listen(ctx, relisten) },
		func(ctx context.Context) { s.watch(ctx, kick) },
		func(ctx context.Context) { s.planLoop(ctx, kick, relisten) },
		s.buildAhead,
		s.recordPollsEvery,
		s.advanceRolloutsEvery,
		s.deadlinesEvery,
		s.trimEvery,
		s.announcePresenceEvery,
	}
	if s.opts.Capture == CaptureLogical {
		services = append(services, func(ctx context.Context) { s.captureLogical(ctx, kick) })
	}
	var wg sync.WaitGroup
	for _, run := range services {
		wg.Go(func() { run(ctx) })
	}
	wg.Wait()
	return nil
}

// planLoop is the planner: a pass at once, then whenever the watch kicks
// or the notifications come back, and at least every PassEvery; under
// Options.Linger, no sooner than Linger after the last began. A pass
// that fails is tried again after a backoff, or as soon as the
// notifications come back.
func (s *Server) planLoop(ctx context.Context, kick, relisten <-chan struct{}) {
	tick := time.NewTicker(s.opts.PassEvery)
	defer tick.Stop()
	var out outage
	var last time.Time // when the last pass began
	for {
		if s.opts.Linger > 0 && !last.IsZero() {
			// The changes that come meanwhile go with this pass.
			lingerUntil(ctx, last.Add(s.opts.Linger))
		}
		last = time.Now()
		err := s.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := out.note(s.log, err, "magicsync/server: planning fails; trying again until it works", "magicsync/server: planning works again")
		if wait > 0 {
			// Failing: wait out the backoff, unless the notifications
			// came back.
			select {
			case <-ctx.Done():
				return
			case <-time.After(max(wait, s.opts.PassEvery)):
			case <-relisten:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-kick:
		case <-relisten:
		}
	}
}

// every runs task at once and then every interval until ctx ends; while
// it fails, it logs once per outage (failed, then works once it works
// again) and tries again after a backoff, at least interval.
func (s *Server) every(ctx context.Context, interval time.Duration, task func(context.Context) error, failed, works string) {
	var out outage
	for {
		err := task(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := max(out.note(s.log, err, failed, works), interval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
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
