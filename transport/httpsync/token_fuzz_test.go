package httpsync

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// canonicalUUID is the only form of UUID a token's prefix may take: the
// 36-byte hyphenated one, hex digits in either case.
var canonicalUUID = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// The fuzzed engine's tokens are fixed, so that a corpus entry means the
// same on every run.
var (
	fuzzTokenA = JoinToken(replicaA, "secret-a")
	fuzzTokenB = JoinToken(replicaB, "secret-b")
)

// FuzzAuthorization feeds arbitrary Authorization headers to TokenReplica,
// and to the handler. Neither may panic; a replica TokenReplica reads
// round-trips through JoinToken, and it reads one
// exactly when the token is "<canonical uuid>.<non-empty secret>"; and the
// handler answers 204 only for replica A's own token, 403 only for replica
// B's, and otherwise 401 with a WWW-Authenticate challenge, changing nothing.
func FuzzAuthorization(f *testing.F) {
	for _, seed := range []string{
		"",
		"Bearer",
		"Bearer ",
		"Bearer  ",
		"Bearer " + fuzzTokenA,
		"bearer " + fuzzTokenA,
		"BEARER   " + fuzzTokenA + "  ",
		"Bearer\t" + fuzzTokenA,
		"Basic " + fuzzTokenA,
		"Bearer " + fuzzTokenB,
		"Bearer " + strings.ToUpper(replicaA.String()) + ".secret-a",
		"Bearer " + replicaA.String(),
		"Bearer " + replicaA.String() + ".",
		"Bearer " + replicaA.String() + "..",
		"Bearer " + replicaA.String() + ".a.b",
		"Bearer ." + replicaA.String(),
		"Bearer {" + replicaA.String() + "}.s",
		"Bearer urn:uuid:" + replicaA.String() + ".s",
		"Bearer " + strings.ReplaceAll(replicaA.String(), "-", "") + ".s",
		"Bearer " + strings.Replace(replicaA.String(), "-", "x", 1) + ".s",
		"Bearer 0000000g-0000-4000-8000-00000000000a.s",
		"Bearer " + JoinToken(replicaB, "secret-a"),
		"Bearer secret",
		"Bearer \x00\xff\u00a0",
		"Bearer \u0085" + fuzzTokenA + "\u00a0",
		"Bearer é" + fuzzTokenA[2:],
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		r := httptest.NewRequest("POST", "/sync/"+replicaA.String()+"/ack/1", nil)
		r.Header["Authorization"] = []string{header}

		token, ok := bearerOf(header)

		// TokenReplica reads any string, whether or not it is a bearer token.
		for _, s := range []string{token, header} {
			id, claims := TokenReplica(s)
			prefix, secret, dot := strings.Cut(s, ".")
			want := dot && secret != "" && canonicalUUID.MatchString(prefix)
			if claims != want {
				t.Fatalf("TokenReplica(%q) claims a replica: %v; want %v", s, claims, want)
			}
			if !claims {
				if id != (uuid.UUID{}) {
					t.Fatalf("TokenReplica(%q) = %v, false; a refusal returns the zero UUID", s, id)
				}
				continue
			}
			if !strings.EqualFold(prefix, id.String()) {
				t.Fatalf("TokenReplica(%q) = %v, which its prefix %q does not spell", s, id, prefix)
			}
			joined := JoinToken(id, secret)
			if back, ok := TokenReplica(joined); !ok || back != id {
				t.Fatalf("TokenReplica(JoinToken(%v, %q)) = %v, %v; want %v", id, secret, back, ok, id)
			}
			if !strings.EqualFold(joined, s) {
				t.Fatalf("JoinToken(TokenReplica(%q)) = %q: not the token", s, joined)
			}
		}

		// The handler, over an engine knowing A's and B's tokens.
		e := newFakeEngine()
		e.tokens[replicaA], e.tokens[replicaB] = fuzzTokenA, fuzzTokenB
		w := httptest.NewRecorder()
		NewHandler(e, HandlerOptions{Logger: quiet()}).ServeHTTP(w, r)
		acked, _, _ := e.state()
		switch code := w.Code; {
		case ok && token == fuzzTokenA:
			if code != http.StatusNoContent || acked != 1 {
				t.Fatalf("A's own token %q: status %d, %d acknowledged; want 204, 1", header, code, acked)
			}
		case ok && token == fuzzTokenB:
			if code != http.StatusForbidden || acked != 0 {
				t.Fatalf("B's token %q on A's path: status %d, %d acknowledged; want 403, 0", header, code, acked)
			}
		default:
			if code != http.StatusUnauthorized || acked != 0 {
				t.Fatalf("header %q: status %d, %d acknowledged; want 401, 0", header, code, acked)
			}
			if !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), `Bearer realm="magicsync"`) {
				t.Fatalf("header %q: 401 without a Bearer challenge: %q", header, w.Header().Get("WWW-Authenticate"))
			}
		}
	})
}

// bearerOf is the token of an Authorization header as the protocol reads
// it: after the scheme "Bearer" (in any case) and a space, trimmed of
// white space, and not empty. (Package headoffice fuzzes its own reading
// of it.)
func bearerOf(header string) (string, bool) {
	scheme, token, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
