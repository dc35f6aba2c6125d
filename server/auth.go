package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/codec"
)

// auth.go holds the replicas' credentials: issuing a secret, and
// authenticating one in constant time.

// Credentials issues a new secret for a replica, replacing any earlier one,
// which stops working at once in this process, and in the other processes
// serving the same database as soon as their Run hears of it (a
// notification sent as the new secret commits; without Run, after
// Options.AuthCacheFor). Only its SHA-256 is stored: hand the secret to
// the replica now, it cannot be read again.
func (s *Server) Credentials(ctx context.Context, replica uuid.UUID) (string, error) {
	if err := s.ensureReplica(ctx, s.pool, replica); err != nil {
		return "", err
	}
	secret, err := issueSecret(ctx, s.pool, s.sql, replica)
	if err != nil {
		return "", err
	}
	s.creds.forget(replica)
	return secret, nil
}

// issueSecret makes a new secret for a replica and stores its hash, telling
// the processes serving the database to forget what they read of its
// credentials, in the same transaction.
func issueSecret(ctx context.Context, pool *pgxpool.Pool, sq *statements, replica uuid.UUID) (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("magicsync/server: making a secret: %w", err)
	}
	secret := base64.RawURLEncoding.EncodeToString(raw[:])
	h := sha256.Sum256([]byte(secret))
	if err := storeSecret(ctx, pool, sq, replica, h[:]); err != nil {
		return "", fmt.Errorf("magicsync/server: storing the secret of %s: %w", replica, err)
	}
	return secret, nil
}

// storeSecret stores a replica's new secret's hash and tells the other
// processes to forget what they read of its credentials.
func storeSecret(ctx context.Context, pool *pgxpool.Pool, sq *statements, replica uuid.UUID, hash []byte) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.Exec(ctx, sq.of(qSetSecret), replica, hash); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, qNotify, sq.schema.wakeChannel(), "c:"+replica.String()); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// credsCache keeps what Authenticate read of replicas' credentials, each
// for AuthCacheFor: unknown replicas as well as known ones, so that a
// call's cost says nothing of which ids exist.
type credsCache struct {
	mu sync.Mutex
	m  map[uuid.UUID]credsRead
}

// credsRead is what one statement read of a replica's credentials.
type credsRead struct {
	stored []byte
	known  bool
	at     time.Time
}

// maxCachedCreds bounds the cache; past it, it starts again empty.
const maxCachedCreds = 100_000

// get returns a replica's credentials read less than fresh ago.
func (c *credsCache) get(replica uuid.UUID, fresh time.Duration) (credsRead, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[replica]
	if !ok || time.Since(r.at) >= fresh {
		return credsRead{}, false
	}
	return r, true
}

// put keeps a replica's credentials as read.
func (c *credsCache) put(replica uuid.UUID, r credsRead) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedCreds {
		c.m = map[uuid.UUID]credsRead{}
	}
	c.m[replica] = r
}

// forget drops a replica's credentials, issued anew.
func (c *credsCache) forget(replica uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, replica)
}

// readCreds reads a replica's stored hash and whether it is known, from
// the cache while it is fresh.
func (s *Server) readCreds(ctx context.Context, replica uuid.UUID) (credsRead, error) {
	if r, ok := s.creds.get(replica, s.opts.AuthCacheFor); ok {
		return r, nil
	}
	rt := s.m.replicas
	r := credsRead{at: time.Now()}
	err := s.pool.QueryRow(ctx, fmt.Sprintf(s.sql.of(qReadCredsFmt),
		rt.qname(), codec.QuoteIdent(rt.column)), replica).Scan(&r.stored, &r.known)
	if err != nil {
		return credsRead{}, fmt.Errorf("magicsync/server: authenticating %s: %w", replica, err)
	}
	if s.opts.AuthCacheFor > 0 {
		s.creds.put(replica, r)
	}
	return r, nil
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
// whether it is known — or, read less than Options.AuthCacheFor ago, the
// cache does — and the secret's hash is compared with the stored one or,
// when there is none, with a stand-in.
func (s *Server) Authenticate(ctx context.Context, replica uuid.UUID, secret string) error {
	rt := s.m.replicas
	r, err := s.readCreds(ctx, replica)
	if err != nil {
		return err
	}
	stored, known := r.stored, r.known
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
