package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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

// Authenticate checks a replica's secret, in constant time. It returns an
// error wrapping ErrUnknownReplica for a replica the replicas table does
// not have, ErrUnauthorized for a wrong secret or a replica that was never
// issued one.
func (s *Server) Authenticate(ctx context.Context, replica uuid.UUID, secret string) error {
	var stored []byte
	err := s.pool.QueryRow(ctx, `SELECT secret FROM public.sync_replicas WHERE id = $1`, replica).Scan(&stored)
	if errors.Is(err, pgx.ErrNoRows) {
		if err := s.ensureReplica(ctx, s.pool, replica); err != nil {
			return err
		}
		return fmt.Errorf("%w: replica %s has no credentials: issue them with Credentials", ErrUnauthorized, replica)
	}
	if err != nil {
		return fmt.Errorf("server: authenticating %s: %w", replica, err)
	}
	h := sha256.Sum256([]byte(secret))
	if len(stored) != len(h) {
		// Compare anyway, so that the time taken says nothing.
		subtle.ConstantTimeCompare(h[:], h[:])
		return fmt.Errorf("%w: replica %s has no credentials: issue them with Credentials", ErrUnauthorized, replica)
	}
	if subtle.ConstantTimeCompare(stored, h[:]) != 1 {
		return fmt.Errorf("%w: wrong secret for replica %s", ErrUnauthorized, replica)
	}
	return nil
}
