package server

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// export_test.go holds what the package's tests reach of its internals.

// WaitingForChanges reports whether a Next call of replica in this process
// found nothing to send and waits for a wake (it follows its groups' logs),
// for the tests to act once it waits rather than after a guessed sleep.
func (s *Server) WaitingForChanges(replica uuid.UUID) bool {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	for w := range s.hub.waiters {
		if w.replica == replica && w.groups != nil {
			return true
		}
	}
	return false
}

// OnPassLocked runs f in every pass of s once it holds the planner's lock,
// before it plans. Set it before s plans.
func (s *Server) OnPassLocked(f func()) { s.hooks.passLocked = f }

// OnPassDone sets a function called as each Pass returns.
func (s *Server) OnPassDone(f func()) { s.hooks.passDone = f }

// OnProvisionBuilt runs f in every build of s that starts a provisioning,
// once the first message is built and before the build commits: the tests
// hold a build open there. Set it before s builds.
func (s *Server) OnProvisionBuilt(f func(replica uuid.UUID)) { s.hooks.provisionBuilt = f }

// OnListening runs f each time Run's listener starts listening. Set it
// before Run.
func (s *Server) OnListening(f func()) { s.hooks.listening = f }

// OnHeartbeat has f called each time Run's listener hears this process's
// heartbeat: from then on, what the process remembers of the replicas is
// trusted.
func (s *Server) OnHeartbeat(f func()) { s.hooks.heard = f }

// HoldPlanning keeps s from planning (its passes wait) until release.
func (s *Server) HoldPlanning() (release func()) {
	s.plan.mu.Lock()
	return s.plan.mu.Unlock
}

// TrimLogs trims the logs now, as Run does every minute.
func (s *Server) TrimLogs(ctx context.Context) error { return s.trimLogs(ctx) }

// TrimFiled forgets filed uploads as Run does every minute, keeping those
// younger than keep.
func (s *Server) TrimFiled(ctx context.Context, keep time.Duration) error {
	return s.trimFiled(ctx, keep)
}

// WatchOnce is one look of Run's watch: whether a pass is due, given what
// the watch saw of the sequence and until when it looks for notes.
func (s *Server) WatchOnce(ctx context.Context, seen *int64, pendingUntil *time.Time) (bool, error) {
	return s.watchOnce(ctx, seen, pendingUntil)
}

// OnAckQueued runs f as each Ack joins the acknowledgements pending, with
// how many are; OnAckBatch runs f as a batch of them starts, with its
// size. Set them before s acknowledges.
func (s *Server) OnAckQueued(f func(pending int)) { s.out.acks.queued = f }

// OnAckBatch: see OnAckQueued.
func (s *Server) OnAckBatch(f func(size int)) { s.out.acks.started = f }

// OnDeltaQueued and OnDeltaBatch are OnAckQueued and OnAckBatch for the
// builds of deltas batched (buildDeltas).
func (s *Server) OnDeltaQueued(f func(pending int)) { s.out.deltas.queued = f }

// OnDeltaBatch: see OnDeltaQueued.
func (s *Server) OnDeltaBatch(f func(size int)) { s.out.deltas.started = f }

// SetPollQueryTimeout bounds each look of a poll's statements by d instead
// of 15 seconds. Set it before s is used.
func (s *Server) SetPollQueryTimeout(d time.Duration) { s.pollQueryTimeout = d }

// ForgetPollsWritten forgets which polls were written lately, so that the
// next poll of every replica is written.
func (s *Server) ForgetPollsWritten() {
	s.out.polls.mu.Lock()
	defer s.out.polls.mu.Unlock()
	s.out.polls.written = nil
}

// Pass runs one planning pass now, of every change committed before it
// was called (under CaptureLogical, it reads the slot up to there
// first). Others than the package's tests reach both through
// internal/serverhook.
func (s *Server) Pass(ctx context.Context) error {
	if err := s.catchUp(ctx); err != nil {
		return err
	}
	return s.pass(ctx)
}

// OnSlotFlushed runs f each time the slot's reader (CaptureLogical) has
// committed a batch of notes, inTx true when the transaction they came
// from is still streaming. Set it before Run.
func (s *Server) OnSlotFlushed(f func(inTx bool)) { s.hooks.slotFlushed = f }

// AwaitVisible returns once transaction xid (its low 32 bits, as the
// slot sends it) shows committed to a new snapshot, as the slot's reader
// waits before it writes the notes of its changes.
func (s *Server) AwaitVisible(ctx context.Context, xid uint32) error {
	return s.awaitVisible(ctx, []uint32{xid})
}
