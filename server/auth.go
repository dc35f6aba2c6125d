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
// call's cost says nothing of which ids exist. While Run's listener hears
// (memo.go: its heartbeat comes back in time), a known replica's are kept
// for authTrustFor instead: a rotation anywhere is announced ("c:") at its
// commit and forgets them, and a listener that stops hearing forgets them
// all (clear). An unknown replica's stay bounded by AuthCacheFor, so that a
// replica added to the host's table is found within it.
type credsCache struct {
	mu sync.Mutex
	m  map[uuid.UUID]credsRead
	// reading holds the readings under way, which the calls of the same
	// replica arriving meanwhile wait for rather than read again.
	reading map[uuid.UUID]*credsReading
}

// credsReading is one reading of a replica's credentials under way: done
// is closed once r and err are set.
type credsReading struct {
	done chan struct{}
	r    credsRead
	err  error
}

// join returns the reading under way of a replica's credentials, or starts
// one: lead is true when the caller must read, then call land.
func (c *credsCache) join(replica uuid.UUID) (rd *credsReading, lead bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rd := c.reading[replica]; rd != nil {
		return rd, false
	}
	if c.reading == nil {
		c.reading = map[uuid.UUID]*credsReading{}
	}
	rd = &credsReading{done: make(chan struct{})}
	c.reading[replica] = rd
	return rd, true
}

// land ends a reading, keeping what it read when it worked, and hands it to
// the calls that waited for it.
func (c *credsCache) land(replica uuid.UUID, rd *credsReading) {
	c.mu.Lock()
	// A reading forget dropped meanwhile may have read what a rotation
	// replaced: it is handed to the calls that waited, not kept.
	current := c.reading[replica] == rd
	if current {
		delete(c.reading, replica)
	}
	if rd.err == nil && current {
		if c.m == nil || len(c.m) >= maxCachedCreds {
			c.m = map[uuid.UUID]credsRead{}
		}
		c.m[replica] = rd.r
	}
	c.mu.Unlock()
	close(rd.done)
}

// credsRead is what one statement read of a replica's credentials.
type credsRead struct {
	stored []byte
	known  bool
	at     time.Time
}

// maxCachedCreds bounds the cache; past it, it starts again empty.
const maxCachedCreds = 100_000

// get returns a replica's credentials read less than fresh ago — or, for
// a known replica read since heard (not zero: the listener hears, and has
// since then), less than authTrustFor ago.
func (c *credsCache) get(replica uuid.UUID, fresh time.Duration, heard time.Time) (credsRead, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[replica]
	if ok && r.known && !heard.IsZero() && !r.at.Before(heard) {
		fresh = max(fresh, authTrustFor)
	}
	if !ok || time.Since(r.at) >= fresh {
		return credsRead{}, false
	}
	return r, true
}

// forgetAll forgets the credentials of replicas adopted or let go of.
func (c *credsCache) forgetAll(replicas []uuid.UUID) {
	if len(replicas) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range replicas {
		delete(c.m, r)
		delete(c.reading, r)
	}
}

// clear forgets every replica's credentials: the listener stopped hearing,
// and a rotation may have gone unheard.
func (c *credsCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = nil
	c.reading = nil
}

// forget drops a replica's credentials, issued anew; a reading under way,
// which may have read the old ones, is no longer joined.
func (c *credsCache) forget(replica uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, replica)
	delete(c.reading, replica)
}

// readCreds reads a replica's stored hash and whether it is known, from
// the cache while it is fresh; the calls that miss it together share one
// reading.
func (s *Server) readCreds(ctx context.Context, replica uuid.UUID) (credsRead, error) {
	if s.opts.AuthCacheFor <= 0 {
		return s.readCredsNow(ctx, replica)
	}
	for {
		if r, ok := s.creds.get(replica, s.opts.AuthCacheFor, s.memo.trustedSince()); ok {
			return r, nil
		}
		// The calls of a replica arriving together read its credentials
		// once: a flood of one replica's calls queues one statement for
		// the pool, not one per call.
		rd, lead := s.creds.join(replica)
		if lead {
			rd.r, rd.err = s.readCredsNow(ctx, replica)
			s.creds.land(replica, rd)
			return rd.r, rd.err
		}
		select {
		case <-ctx.Done():
			return credsRead{}, fmt.Errorf("magicsync/server: authenticating %s: %w", replica, ctx.Err())
		case <-rd.done:
		}
		if rd.err == nil {
			return rd.r, nil
		}
		if ctx.Err() != nil {
			return credsRead{}, fmt.Errorf("magicsync/server: authenticating %s: %w", replica, ctx.Err())
		}
		// The reading failed, maybe for its own caller's context only:
		// read again (at most one of the waiting calls does).
	}
}

// readCredsNow reads a replica's stored hash and whether it is known.
func (s *Server) readCredsNow(ctx context.Context, replica uuid.UUID) (credsRead, error) {
	rt := s.m.replicas
	r := credsRead{at: time.Now()}
	err := s.pool.QueryRow(ctx, s.sql.onReplicas(qReadCredsFmt, rt), replica).Scan(&r.stored, &r.known)
	if err != nil {
		return credsRead{}, fmt.Errorf("magicsync/server: authenticating %s: %w", replica, err)
	}
	return r, nil
}

// noSecret stands for the stored hash of a replica that has none — an
// unknown replica, or one never issued a secret — so that Authenticate
// compares as much for it as for a wrong secret. It decides nothing: a
// secret hashing to it is refused all the same.
var noSecret = sha256.Sum256([]byte("magicsync: no secret was issued"))

// authenticate is Endpoint.Authenticate.
func (s *Server) authenticate(ctx context.Context, replica uuid.UUID, secret string) error {
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
