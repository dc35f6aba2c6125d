package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
)

// Credentials issues a new secret for a replica, replacing any earlier one
// (which stops working at once). Only its SHA-256 is stored: hand the
// secret to the replica now, it cannot be read again.
func (s *Server) Credentials(ctx context.Context, replica uuid.UUID) (string, error) {
	if err := s.ensureReplica(ctx, s.pool, replica); err != nil {
		return "", err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("server: making a secret: %w", err)
	}
	secret := base64.RawURLEncoding.EncodeToString(raw[:])
	h := sha256.Sum256([]byte(secret))
	if _, err := s.pool.Exec(ctx, `UPDATE public.sync_replicas SET secret = $2 WHERE id = $1`, replica, h[:]); err != nil {
		return "", fmt.Errorf("server: storing the secret of %s: %w", replica, err)
	}
	return secret, nil
}

// noSecret stands for the stored hash of a replica that has none — an
// unknown replica, or one never issued a secret — so that Authenticate
// compares as much for it as for a wrong secret. It decides nothing: a
// secret hashing to it is refused all the same.
var noSecret = sha256.Sum256([]byte("magicsync: no secret was issued"))

// Authenticate checks a replica's secret, in constant time. It returns an
// error wrapping ErrUnknownReplica for a replica the replicas table does
// not have, ErrUnauthorized for a wrong secret or a replica that was never
// issued one.
//
// Every path costs the same, so that its time says nothing of which
// replica ids exist: one statement reads the replica's stored hash and
// whether it is known, and the secret's hash is compared with the stored
// one or, when there is none, with a stand-in.
func (s *Server) Authenticate(ctx context.Context, replica uuid.UUID, secret string) error {
	rt := s.m.replicas
	var stored []byte
	var known bool
	err := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT secret FROM public.sync_replicas WHERE id = $1),
			EXISTS (SELECT 1 FROM public.sync_replicas WHERE id = $1) OR EXISTS (SELECT 1 FROM %s h WHERE h.%s = $1)`,
		rt.qname(), magicsync.QuoteIdent(rt.column)), replica).Scan(&stored, &known)
	if err != nil {
		return fmt.Errorf("server: authenticating %s: %w", replica, err)
	}
	h := sha256.Sum256([]byte(secret))
	issued := len(stored) == len(h)
	against := stored
	if !issued {
		against = noSecret[:]
	}
	match := s.compareSecret(against, h[:])
	switch {
	case !known:
		return fmt.Errorf("%w %s: no row of %s has it", ErrUnknownReplica, replica, rt.qname())
	case !issued:
		return fmt.Errorf("%w: replica %s has no credentials: issue them with Credentials", ErrUnauthorized, replica)
	case !match:
		return fmt.Errorf("%w: wrong secret for replica %s", ErrUnauthorized, replica)
	}
	return nil
}

// compareSecret compares a stored hash with a secret's in constant time.
func (s *Server) compareSecret(stored, hash []byte) bool {
	if f := s.hooks.secretCompared; f != nil {
		f(stored)
	}
	return subtle.ConstantTimeCompare(stored, hash) == 1
}
