package server_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/magicsync/magicsync/server"
)

// syncTables lists every table of the engine, in any schema.
func syncTables(t *testing.T, sh *shop) []string {
	t.Helper()
	rows, err := sh.pool.Query(sh.ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND c.relname LIKE 'sync\_%' AND n.nspname NOT IN ('pg_catalog', 'information_schema')`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// holding lists the sync_* tables with a row whose text holds any of
// needles (bytea shows there as hex).
func holding(t *testing.T, sh *shop, needles ...string) []string {
	t.Helper()
	var out []string
	for _, tbl := range syncTables(t, sh) {
		n := sh.count(`SELECT count(*) FROM `+tbl+` x WHERE EXISTS (SELECT 1 FROM unnest($1::text[]) s WHERE strpos(lower(x::text), lower(s)) > 0)`, needles)
		if n > 0 {
			out = append(out, tbl)
		}
	}
	return out
}

// plainForms are the ways a token could be kept readable: as text, as its
// bytes, or as the random bytes it encodes.
func plainForms(t *testing.T, token string) []string {
	forms := []string{token, hex.EncodeToString([]byte(token))}
	if raw, err := base64.RawURLEncoding.DecodeString(token); err == nil {
		forms = append(forms, hex.EncodeToString(raw))
	}
	return forms
}

func hashOf(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// Credentials keeps only the token's hash: no sync_* table holds the token
// in any readable form. Authenticate takes the token, refuses another, and
// once a second token is issued the first stops working and its hash is
// gone.
func TestCredentialsStoreOnlyAHashOfTheToken(t *testing.T) {
	t.Parallel()
	sh := newShop(t, shopOptions)
	r := sh.register(sh.shopA)
	sh.pass()
	r.sync()
	first, err := sh.s.Credentials(sh.ctx, r.id)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) < 20 {
		t.Fatalf("token %q: too short to be a secret", first)
	}
	if len(syncTables(t, sh)) < 5 {
		t.Fatalf("found only %v: the search misses the engine's tables", syncTables(t, sh))
	}
	if got := holding(t, sh, plainForms(t, first)...); len(got) != 0 {
		t.Errorf("the token is kept readable in %v", got)
	}
	if got := holding(t, sh, hashOf(first)); len(got) != 1 {
		t.Errorf("the token's hash is kept in %v, want one table", got)
	}
	if err := sh.s.Endpoint().Authenticate(sh.ctx, r.id, first); err != nil {
		t.Errorf("the token: %v", err)
	}
	wrong := first[:len(first)-1] + "A"
	if wrong == first {
		wrong = first[:len(first)-1] + "B"
	}
	if err := sh.s.Endpoint().Authenticate(sh.ctx, r.id, wrong); !errorsIs(err, server.ErrUnauthorized) {
		t.Errorf("a wrong token: %v", err)
	}
	if err := sh.s.Endpoint().Authenticate(sh.ctx, r.id, hashOf(first)); !errorsIs(err, server.ErrUnauthorized) {
		t.Errorf("the stored hash taken for the token: %v", err)
	}

	second, err := sh.s.Credentials(sh.ctx, r.id)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("the rotated token is the same")
	}
	if err := sh.s.Endpoint().Authenticate(sh.ctx, r.id, first); !errorsIs(err, server.ErrUnauthorized) {
		t.Errorf("the first token after rotation: %v", err)
	}
	if err := sh.s.Endpoint().Authenticate(sh.ctx, r.id, second); err != nil {
		t.Errorf("the second token: %v", err)
	}
	if got := holding(t, sh, plainForms(t, second)...); len(got) != 0 {
		t.Errorf("the second token is kept readable in %v", got)
	}
	if got := holding(t, sh, hashOf(first)); len(got) != 0 {
		t.Errorf("the first token's hash is still kept, in %v", got)
	}
}
