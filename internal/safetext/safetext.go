// Package safetext makes text that comes from outside the engine safe to
// keep and to send: a handler's reason, a panic's message, a database's
// error, a replica's build, a report's reason. Such text holds whatever
// hardware, a driver or a user put there, and one bad piece of it must
// never stop a lane: protobuf refuses a string that is not UTF-8,
// PostgreSQL refuses a NUL in text, and a megabyte of reason has no place
// in every message that carries it.
//
// Text made safe is valid UTF-8 — each run of bytes that is not becomes
// U+FFFD — holds no NUL — each becomes U+FFFD too — and is at most a
// bound long, cut on a character boundary and marked "…" where it was
// cut. Text that is safe already comes back as it is, without copying.
package safetext

import (
	"strings"
	"unicode/utf8"
)

// MaxReason bounds a reason, in bytes: why a wish waits or was refused,
// why a row could not be taken. A reason says in a sentence or two what
// is wrong; 1 KiB holds that with room to spare, and bounds what one
// answer or report costs to keep and to send.
const MaxReason = 1 << 10

// Replacement is what a byte that is not UTF-8, or a NUL, becomes.
const Replacement = "\uFFFD"

// cutMark marks where text was cut.
const cutMark = "…"

// Reason is Text(s, MaxReason).
func Reason(s string) string { return Text(s, MaxReason) }

// Text makes s safe: valid UTF-8, without NUL, and at most n bytes long
// (an n below 3, the length of the cut mark, is taken as 3). Text that was
// cut ends with "…". It reads no more of s than it keeps, and a few bytes
// besides: a megabyte costs what its head does.
func Text(s string, n int) string {
	n = max(n, len(cutMark))
	if len(s) <= n && Safe(s) {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), n) + len(Replacement))
	invalid := false // the last byte read was one not UTF-8
	for i := 0; i < len(s) && b.Len() <= n; {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			// A run of bytes that are not UTF-8 becomes one replacement,
			// as strings.ToValidUTF8 has it.
			if !invalid {
				b.WriteString(Replacement)
			}
			invalid = true
		case r == 0:
			b.WriteString(Replacement)
			invalid = false
		default:
			b.WriteString(s[i : i+size])
			invalid = false
		}
		i += size
	}
	out := b.String()
	if len(out) <= n {
		return out
	}
	end := n - len(cutMark)
	for end > 0 && !utf8.RuneStart(out[end]) {
		end--
	}
	return out[:end] + cutMark
}

// Safe reports whether s is valid UTF-8 and holds no NUL: text that
// protobuf and PostgreSQL both take as it is. It does not look at length.
func Safe(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}
