package safetext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTextMakesBadBytesNULAndLengthSafe(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"safe text stays", "printer off", 64, "printer off"},
		{"empty stays", "", 64, ""},
		{"bytes not UTF-8", "printer status \xff\xfe off", 64, "printer status \uFFFD off"},
		{"a NUL", "printer\x00off", 64, "printer\uFFFDoff"},
		{"cut with a mark", "abcdefghij", 8, "abcde…"},
		{"cut on a character boundary", "aaaaéxxx", 8, "aaaa…"},
		{"a NUL grows past the bound", "abcdef\x00", 8, "abcde…"},
		{"a character straddling the bound", "abcde\u00e9fgh", 8, "abcde…"},
		{"a bound below the mark", "abcdef", 1, "…"},
	} {
		if got := Text(c.in, c.n); got != c.want {
			t.Errorf("%s: Text(%q, %d) = %q, want %q", c.name, c.in, c.n, got, c.want)
		}
	}
}

func TestReasonBoundsAMegabyte(t *testing.T) {
	t.Parallel()
	got := Reason("printer " + strings.Repeat("\xff\x00é", 1<<18))
	if len(got) > MaxReason || !Safe(got) || !strings.HasPrefix(got, "printer \uFFFD\uFFFDé") || !strings.HasSuffix(got, "…") {
		t.Fatalf("Reason of a megabyte: %d bytes, safe %v, %.40q", len(got), Safe(got), got)
	}
}

func TestSafeTextIsNotCopied(t *testing.T) {
	// Not parallel: AllocsPerRun counts every goroutine's allocations.
	in := strings.Repeat("x", 100)
	if n := testing.AllocsPerRun(100, func() { _ = Text(in, 200) }); n != 0 {
		t.Fatalf("%v allocations for text safe already", n)
	}
}

func FuzzText(f *testing.F) {
	for _, s := range []string{"", "ok", "\xff\xfe", "a\x00b", "é", "\xe2\x82", strings.Repeat("é", 40), "\x00\x00\xff"} {
		f.Add(s, 8)
		f.Add(s, 1)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = n % 4096
		got := Text(s, n)
		if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("Text(%q, %d) = %q: not safe", s, n, got)
		}
		if len(got) > max(n, len(cutMark)) {
			t.Fatalf("Text(%q, %d) = %q: %d bytes", s, n, got, len(got))
		}
		if len(s) <= n && Safe(s) && got != s {
			t.Fatalf("Text(%q, %d) = %q: safe text changed", s, n, got)
		}
		if Text(got, n) != got {
			t.Fatalf("Text(%q, %d) = %q: not a fixed point", s, n, got)
		}
		// What is kept is what s says, as far as it is kept.
		head := strings.TrimSuffix(got, cutMark)
		if want := strings.ReplaceAll(strings.ToValidUTF8(s, Replacement), "\x00", Replacement); !strings.HasPrefix(want, head) {
			t.Fatalf("Text(%q, %d) = %q: not a head of %q", s, n, got, want)
		}
	})
}
