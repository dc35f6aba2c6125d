// Parsing a key as the triggers noted it (SQLite's quote() of each key
// column) back into its canonical form.

package replica

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/magicsync/magicsync/internal/codec"
)

// parseNotedKey reads a key as the note triggers wrote it into its
// canonical form. raw holds the note's values when they parse, even if
// they are no values of the key's columns.
func parseNotedKey(tc *codec.TableCodec, text string) (codec.Key, []any, error) {
	raw, err := parseQuoted(text)
	if err != nil {
		return "", nil, err
	}
	if len(raw) != len(tc.KeyIndex) {
		return "", nil, fmt.Errorf("%d values for a key of %d columns", len(raw), len(tc.KeyIndex))
	}
	vals := make([]codec.Value, len(raw))
	for i, src := range raw {
		v, err := tc.Columns[tc.KeyIndex[i]].Canonical(src)
		if err != nil {
			return "", raw, err
		}
		vals[i] = v
	}
	return codec.KeyOfValues(vals...), raw, nil
}

// parseQuoted reads values as notedValue writes them, separated by
// commas: as SQLite's quote() writes them (NULL, integers, reals, 'text'
// and X'blob'), and a text holding a NUL as TX'its bytes'.
func parseQuoted(s string) ([]any, error) {
	var out []any
	for {
		if s == "" {
			return nil, errors.New("an empty value")
		}
		var v any
		var rest string
		switch {
		case s[0] == '\'':
			var b strings.Builder
			i := 1
			for {
				j := strings.IndexByte(s[i:], '\'')
				if j < 0 {
					return nil, errors.New("an unterminated text")
				}
				b.WriteString(s[i : i+j])
				i += j + 1
				if i < len(s) && s[i] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				break
			}
			v, rest = b.String(), s[i:]
		case len(s) > 1 && (s[0] == 'X' || s[0] == 'x') && s[1] == '\'':
			b, r, err := parseQuotedBlob(s)
			if err != nil {
				return nil, err
			}
			v, rest = b, r
		case len(s) > 2 && s[0] == 'T' && s[1] == 'X' && s[2] == '\'':
			// A text holding a NUL, noted by its bytes (notedValue).
			b, r, err := parseQuotedBlob(s[1:])
			if err != nil {
				return nil, fmt.Errorf("a text holding a NUL: %w", err)
			}
			v, rest = string(b), r
		default:
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			tok := s[:end]
			rest = s[end:]
			switch {
			case tok == "NULL":
				v = nil
			case strings.ContainsAny(tok, ".eE") || tok == "Inf" || tok == "-Inf":
				// quote() writes an infinity as 9.0e+999, which ParseFloat
				// reads as one while it reports the range.
				f, err := strconv.ParseFloat(tok, 64)
				if err != nil && !errors.Is(err, strconv.ErrRange) {
					return nil, fmt.Errorf("a real %q: %w", tok, err)
				}
				v = f
			default:
				i, err := strconv.ParseInt(tok, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("an integer %q: %w", tok, err)
				}
				v = i
			}
		}
		out = append(out, v)
		if rest == "" {
			return out, nil
		}
		if rest[0] != ',' {
			return nil, fmt.Errorf("%q after a value", rest)
		}
		s = rest[1:]
	}
}

// parseQuotedBlob reads a blob as quote() writes it (X'0a1b') at the
// start of s, and returns its bytes and what follows it.
func parseQuotedBlob(s string) ([]byte, string, error) {
	end := strings.IndexByte(s[2:], '\'')
	if end < 0 {
		return nil, "", errors.New("an unterminated blob")
	}
	hex := s[2 : 2+end]
	if len(hex)%2 != 0 {
		return nil, "", fmt.Errorf("a blob of %d hex digits, not whole bytes", len(hex))
	}
	b := make([]byte, len(hex)/2)
	for i := range b {
		n, err := strconv.ParseUint(hex[2*i:2*i+2], 16, 8)
		if err != nil {
			return nil, "", fmt.Errorf("a blob: %w", err)
		}
		b[i] = byte(n)
	}
	return b, s[2+end+1:], nil
}
