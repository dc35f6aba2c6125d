package server_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/magicsync/magicsync/server"
)

// Calls of one replica that arrive together while its credentials are not
// cached — a fleet's first calls, a flood of long-polls, the first calls
// after AuthCacheFor or a rotation — share one reading of them: before,
// each read them, and a thousand long-polls of one replica queued a
// thousand statements for the pool's connections, so that none of its
// calls, nor any other replica's, got one for seconds.
func TestConcurrentAuthenticationsOfAReplicaShareOneReadingOfItsCredentials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sh, trace := tracedShop(t)
	s, err := server.New(ctx, sh.pool, sh.codecs, server.Options{Replicas: shopOptions.Replicas, AuthCacheFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	id := sh.register(sh.shopA).id
	secret, err := s.Credentials(ctx, id) // and the cache forgets it
	if err != nil {
		t.Fatal(err)
	}
	const calls = 64
	authenticate := func(secret string) []error {
		trace.take()
		start := make(chan struct{})
		errs := make([]error, calls)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				<-start
				errs[i] = s.Endpoint().Authenticate(ctx, id, secret)
			})
		}
		close(start)
		wg.Wait()
		return errs
	}
	for i, err := range authenticate(secret) {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if ran := trace.take(); len(ran) != 1 {
		t.Fatalf("%d calls arriving together ran %d statements; want one reading of the credentials", calls, len(ran))
	}
	// A rotation by this Server: the next calls read the new credentials,
	// once, and refuse the old secret.
	if _, err := s.Credentials(ctx, id); err != nil {
		t.Fatal(err)
	}
	for i, err := range authenticate(secret) {
		if !errors.Is(err, server.ErrUnauthorized) {
			t.Fatalf("call %d with the rotated secret: %v; want ErrUnauthorized", i, err)
		}
	}
	if ran := trace.take(); len(ran) != 1 {
		t.Fatalf("%d calls arriving together after a rotation ran %d statements; want one", calls, len(ran))
	}
}
