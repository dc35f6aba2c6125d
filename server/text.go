package server

import (
	"strings"
	"time"

	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/wire"
)

// text.go holds the checks that keep what a replica sends within what
// PostgreSQL takes, so that one value it cannot take is refused, or
// changes nothing, alone — and never fails a whole filing as an outage,
// which the replica would wait out forever. Text the engine keeps is made
// safe by clip (safetext).

// holdsNUL reports whether a value of vals is text holding a NUL, which
// PostgreSQL text cannot hold.
func holdsNUL(vals []codec.Value) bool {
	for _, v := range vals {
		if (v.Kind == wire.Text || v.Kind == wire.Decimal) && strings.IndexByte(v.S, 0) >= 0 {
			return true
		}
	}
	return false
}

// earliestPGTime is the earliest time PostgreSQL's timestamptz holds:
// 4714-11-24 BC, in microseconds since the Unix epoch. The latest is past
// any int64 of microseconds.
var earliestPGTime = time.Date(-4713, time.November, 24, 0, 0, 0, 0, time.UTC).UnixMicro()

// pgTime is a time a replica sent, in microseconds since the Unix epoch,
// as the nearest time PostgreSQL holds.
func pgTime(micros int64) time.Time {
	return time.UnixMicro(max(micros, earliestPGTime)).UTC()
}
