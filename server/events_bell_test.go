package server

import (
	"testing"

	"github.com/google/uuid"
)

// The listener rings the events' bell when it hears events written ("e:")
// or a filing ("r:"), waking every FollowEvents waiting since the last
// ring, and only those: a wait begun after a ring waits for the next.
func TestTheListenerRingsTheEventBellForEventsAndFilings(t *testing.T) {
	t.Parallel()
	s := &Server{hub: newHub()}
	for _, payload := range []string{"e:", "r:" + uuid.NewString()} {
		a, b := s.bell.wait(), s.bell.wait()
		s.wakeFor(payload)
		for _, ch := range []<-chan struct{}{a, b} {
			select {
			case <-ch:
			default:
				t.Errorf("after %q, a waiter was not woken", payload)
			}
		}
		select {
		case <-s.bell.wait():
			t.Errorf("after %q, a wait begun after the ring is already woken", payload)
		default:
		}
	}
}
