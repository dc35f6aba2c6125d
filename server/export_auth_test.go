package server

// export_auth_test.go holds what the authentication tests reach of the
// package's internals.

// OnSecretCompared runs f in every Authenticate of s with the stored hash
// it compares the secret's with. Set it before s authenticates.
func (s *Server) OnSecretCompared(f func(stored []byte)) { s.hooks.secretCompared = f }
