package headoffice

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzBearer feeds arbitrary Authorization headers to bearer, which must
// not panic: a token it accepts is not empty, is trimmed, came after the
// scheme "Bearer" (in any case) and round-trips through a "Bearer "
// header; a header it refuses yields no token. (Package httpsync fuzzes
// the handler behind it, and TokenReplica.)
func FuzzBearer(f *testing.F) {
	token := JoinToken(replicaA, "secret-a")
	for _, seed := range []string{
		"",
		"Bearer",
		"Bearer ",
		"Bearer  ",
		"Bearer " + token,
		"bearer " + token,
		"BEARER   " + token + "  ",
		"Bearer\t" + token,
		"Basic " + token,
		"Bearer secret",
		"Bearer \x00\xff\u00a0",
		"Bearer \u0085" + token + "\u00a0",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		r := httptest.NewRequest("POST", "/sync/"+replicaA.String()+"/ack/1", nil)
		r.Header["Authorization"] = []string{header}
		token, ok := bearer(r)
		if !ok {
			if token != "" {
				t.Fatalf("bearer(%q) = %q, false; a refusal returns no token", header, token)
			}
			return
		}
		scheme, _, _ := strings.Cut(header, " ")
		switch {
		case token == "" || strings.TrimSpace(token) != token:
			t.Fatalf("bearer(%q) = %q: empty or untrimmed", header, token)
		case !strings.EqualFold(scheme, "Bearer"):
			t.Fatalf("bearer(%q) = %q, under scheme %q", header, token, scheme)
		case !strings.Contains(header, token):
			t.Fatalf("bearer(%q) = %q, which the header does not hold", header, token)
		}
		again := httptest.NewRequest("GET", "/", nil)
		again.Header.Set("Authorization", "Bearer "+token)
		if back, ok := bearer(again); !ok || back != token {
			t.Fatalf("bearer(%q) = %q, but bearer(%q) = %q, %v", header, token, "Bearer "+token, back, ok)
		}
	})
}
