package server

import (
	"context"
	"time"
)

// export_events_test.go holds what the tests of events reach of the
// package's internals.

// AnnouncePresence runs Run's announcer once: an event for each replica
// whose online changed since it was last announced.
func (s *Server) AnnouncePresence(ctx context.Context) error { return s.announcePresence(ctx) }

// TrimEvents trims the events older than keep, as Run's trimmer does.
func (s *Server) TrimEvents(ctx context.Context, keep time.Duration) error {
	return s.trimEvents(ctx, keep)
}
