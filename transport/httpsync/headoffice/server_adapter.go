package headoffice

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/server"
	"github.com/magicsync/magicsync/transport/httpsync/internal/httpwire"
)

// ForServer adapts a *server.Server to an Engine. Its Authenticate takes
// the tokens httpsync.JoinToken makes (and, for a token of no such form, the bare
// secret) and checks the secret with the server's; a token
// claiming another replica than the one asked about is refused without
// asking the server.
//
// Its calls are the server's Endpoint's; its Next is told what the replica
// applied last.
//
// It classifies the server's errors (see Classifier): ErrUnauthorized 401,
// ErrUnknownReplica 404, ErrTooLarge 413 (an upload of more rows, or more
// refusals, than one message takes: the replica splits it), ErrNotIssued
// 409 (an acknowledgement of a message
// the server never issued the replica, which changes nothing), any other
// ErrPermanent 400 (a malformed message, a newer protocol, a message naming
// another replica or lane), and everything else 503: the server's contract
// is that an error not wrapping ErrPermanent is transient.
func ForServer(s *server.Server) Engine {
	e := s.Endpoint()
	return &serverEngine{
		next: func(ctx context.Context, replica uuid.UUID, applied Applied) (uint64, []byte, bool, error) {
			m, ok, err := e.Next(ctx, replica, applied)
			return m.ID, m.Body, ok, err
		},
		ack:          e.Ack,
		receive:      e.Receive,
		authenticate: e.Authenticate,
		schema:       e.Schema,
	}
}

// serverEngine is ForServer's Engine, over the server's methods (or, in
// tests, fakes of them).
type serverEngine struct {
	next         func(ctx context.Context, replica uuid.UUID, applied Applied) (uint64, []byte, bool, error)
	ack          func(ctx context.Context, replica uuid.UUID, id uint64) error
	receive      func(ctx context.Context, replica uuid.UUID, lane string, body []byte) error
	authenticate func(ctx context.Context, replica uuid.UUID, secret string) error
	schema       func() []byte
}

// Schema returns the server's encoded Schema, or nil without one.
func (e *serverEngine) Schema() []byte {
	if e.schema == nil {
		return nil
	}
	return e.schema()
}

func (e *serverEngine) Next(ctx context.Context, replica uuid.UUID, applied Applied) (uint64, []byte, bool, error) {
	return e.next(ctx, replica, applied)
}

func (e *serverEngine) Ack(ctx context.Context, replica uuid.UUID, id uint64) error {
	return e.ack(ctx, replica, id)
}

func (e *serverEngine) Receive(ctx context.Context, replica uuid.UUID, lane string, body []byte) error {
	return e.receive(ctx, replica, lane, body)
}

func (e *serverEngine) Authenticate(ctx context.Context, replica uuid.UUID, token string) (bool, error) {
	secret := token
	if claimed, ok := httpwire.TokenReplica(token); ok {
		if claimed != replica {
			return false, nil
		}
		_, secret, _ = strings.Cut(token, ".")
	}
	err := e.authenticate(ctx, replica, secret)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, server.ErrUnauthorized), errors.Is(err, server.ErrUnknownReplica):
		return false, nil
	}
	return false, err
}

func (e *serverEngine) Classify(err error) int {
	switch {
	case errors.Is(err, server.ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, server.ErrUnknownReplica):
		return http.StatusNotFound
	case errors.Is(err, server.ErrNotIssued):
		return http.StatusConflict
	case errors.Is(err, server.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, server.ErrPermanent):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}
