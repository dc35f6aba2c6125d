package server_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/server"
)

// statements records the SQL of every statement a pool runs.
type statements struct {
	mu  sync.Mutex
	sql []string
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sql = append(s.sql, data.SQL)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns the statements run since the last take, and forgets them.
func (s *statements) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sql
	s.sql = nil
	return out
}

// Authenticate does the same work for a replica id nobody has, for a
// replica never issued a secret and for a wrong secret of a known one:
// the same statements, and one comparison of the secret's hash with a
// stored hash's worth of bytes. So its time does not tell which ids
// exist.
func TestAuthenticateOfAnUnknownReplicaDoesTheWorkOfAWrongSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sh, trace := tracedShop(t)
	var mu sync.Mutex
	var compared []int
	sh.s.OnSecretCompared(func(stored []byte) {
		mu.Lock()
		defer mu.Unlock()
		compared = append(compared, len(stored))
	})
	known := sh.register(sh.shopA).id
	if _, err := sh.s.Credentials(ctx, known); err != nil {
		t.Fatal(err)
	}
	unissued := sh.register(sh.shopA).id
	cases := []struct {
		name    string
		replica uuid.UUID
		want    error
	}{
		{"a wrong secret of a known replica", known, server.ErrUnauthorized},
		{"a replica never issued a secret", unissued, server.ErrUnauthorized},
		{"an unknown replica", uuid.New(), server.ErrUnknownReplica},
	}
	var first []string
	for i, c := range cases {
		trace.take()
		mu.Lock()
		compared = nil
		mu.Unlock()
		err := sh.s.Endpoint().Authenticate(ctx, c.replica, "not-the-secret")
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Authenticate = %v; want %v", c.name, err, c.want)
		}
		ran := trace.take()
		mu.Lock()
		cmp := slices.Clone(compared)
		mu.Unlock()
		if len(ran) != 1 {
			t.Errorf("%s: %d statements; want 1: %q", c.name, len(ran), ran)
		}
		if i == 0 {
			first = ran
		} else if !slices.Equal(ran, first) {
			t.Errorf("%s ran other statements than %s:\n%q\nwant\n%q", c.name, cases[0].name, ran, first)
		}
		if !slices.Equal(cmp, []int{32}) {
			t.Errorf("%s: compared with stored hashes of lengths %v; want one of 32 bytes", c.name, cmp)
		}
	}
}
