package server

import (
	"google.golang.org/protobuf/proto"
)

// Schema returns the declared tables as the protocol's Schema message,
// encoded (proto/sync.proto; PROTOCOL.md, section 13): each table's name,
// which side writes it, its columns with their kinds and roles, its key,
// origin and Retired column. A replica written in another language reads
// it to create and check its tables; the HTTP transport serves it at
// GET /sync/{id}/schema. It is the same for every replica, and the same
// bytes for the same declarations.
func (s *Server) Schema() []byte {
	s.schemaOnce.Do(func() {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s.codecs.Schema())
		if err != nil {
			// A message of strings, booleans and enums cannot fail to
			// encode; were it to, the replica is told there is none.
			s.log.Error("magicsync/server: encoding the schema", "err", err)
		}
		s.schema = b
	})
	return s.schema
}
