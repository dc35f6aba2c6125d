package headoffice

import "strconv"

// parseWait reads the wait parameter of GET next: a number of seconds in
// plain decimal, digits with an optional fraction after a point ("25",
// "0.5", "0"). Nothing else is taken — no sign, exponent, unit ("2s"),
// hexadecimal, Inf or NaN — so that every client's spelling means the same
// to every server. A wait of 0 waits for nothing: a message already due is
// still answered.
func parseWait(q string) (float64, bool) {
	whole, frac, dotted := q, "", false
	for i := 0; i < len(q); i++ {
		if q[i] == '.' {
			whole, frac, dotted = q[:i], q[i+1:], true
			break
		}
	}
	if !digits(whole) || dotted && !digits(frac) {
		return 0, false
	}
	secs, err := strconv.ParseFloat(q, 64)
	// Only a value out of range can fail here: digits that large mean
	// longer than any bound, which the server's bound then caps.
	if err != nil && secs == 0 {
		return 0, false
	}
	return secs, true
}

// digits says whether s is one or more ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
