package server

import "github.com/google/uuid"

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
