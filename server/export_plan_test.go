package server

// SetPassBatch bounds the touched keys of one table one pass takes (50,000
// otherwise), for the tests to cut a pass's work small. Set it before s
// plans.
func (s *Server) SetPassBatch(n int) { s.passBatch = n }
