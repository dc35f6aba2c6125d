package natswire

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

func TestSubjectsRoundTrip(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	for _, verb := range []string{Next, Ack, Up, Schema} {
		got, v, err := ParseSubject(DefaultPrefix, Subject(DefaultPrefix, id, verb))
		if err != nil || got != id || v != verb {
			t.Fatalf("ParseSubject(Subject(%s)) = %v, %q, %v", verb, got, v, err)
		}
	}
	for _, bad := range []string{"magicsync", "magicsync.x.next", "other." + id.String() + ".next", "magicsync." + id.String() + ".a.b", "magicsync." + id.String()} {
		if _, _, err := ParseSubject(DefaultPrefix, bad); err == nil {
			t.Errorf("ParseSubject(%q) took it", bad)
		}
	}
}

func FuzzParseSubject(f *testing.F) {
	f.Add("magicsync." + uuid.NewString() + ".next")
	f.Add("magicsync..next")
	f.Add("magicsync.00000000-0000-0000-0000-000000000000.up.x")
	f.Fuzz(func(t *testing.T, s string) {
		id, verb, err := ParseSubject(DefaultPrefix, s)
		if err != nil {
			return
		}
		if strings.Contains(verb, ".") {
			t.Fatalf("%q: exchange %q holds a dot", s, verb)
		}
		// The subject rebuilt from what was read reads the same.
		again, verb2, err := ParseSubject(DefaultPrefix, Subject(DefaultPrefix, id, verb))
		if err != nil || again != id || verb2 != verb {
			t.Fatalf("%q read as %v, %q, but its subject rebuilt reads %v, %q, %v", s, id, verb, again, verb2, err)
		}
	})
}

func FuzzBearer(f *testing.F) {
	f.Add("Bearer " + uuid.NewString() + ".secret")
	f.Add("bearer  x ")
	f.Add("Basic abc")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		token, ok := Bearer(v)
		if !ok {
			return
		}
		if token == "" || token != strings.TrimSpace(token) {
			t.Fatalf("Bearer(%q) = %q", v, token)
		}
		if id, claims := TokenReplica(token); claims && !strings.HasPrefix(strings.ToLower(token), id.String()) {
			t.Fatalf("TokenReplica(%q) = %v", token, id)
		}
	})
}

func TestParseWaitTakesPlainDecimalOnly(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]time.Duration{"25": 25 * time.Second, "0.5": 500 * time.Millisecond, "0": 0} {
		if d, ok := ParseWait(v); !ok || d != want {
			t.Errorf("ParseWait(%q) = %v, %v; want %v", v, d, ok, want)
		}
	}
	for _, v := range []string{"", "2s", "-1", "+1", "1e3", ".5", "5.", "Inf", "NaN", "0x10"} {
		if d, ok := ParseWait(v); ok {
			t.Errorf("ParseWait(%q) = %v; want it refused", v, d)
		}
	}
}

func FuzzParseWait(f *testing.F) {
	for _, s := range []string{"25", "0.5", "-1", "NaN", "Inf", "1e300", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseWait(v)
		if ok && (d < 0 || d > 1e6*time.Second || strings.ContainsAny(v, "+-eEInN")) {
			t.Fatalf("ParseWait(%q) = %v", v, d)
		}
	})
}

func FuzzShorten(f *testing.F) {
	f.Add(strings.Repeat("é", 400))
	f.Add("a\nb")
	f.Fuzz(func(t *testing.T, s string) {
		r := Shorten(s)
		if !utf8.ValidString(r) || len(r) > MaxReasonLen+len("…") || strings.Contains(r, "\n") {
			t.Fatalf("Shorten(%q) = %q", s, r)
		}
	})
}
