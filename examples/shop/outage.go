package main

import (
	"context"
	"time"
)

// dbHealth follows whether the head office reaches its database, as what
// it asks of it goes, and says when that changes: once when the database
// goes away, once when it is back. While it is away the head office keeps
// running — its sync endpoints answer 503 with Retry-After, the registers
// keep selling and their sales wait on them — and it resumes by itself.
type dbHealth struct {
	say func(string, ...any)
	// since is when the database first failed, in the outage going on;
	// zero while it answers.
	since time.Time
}

// note takes how something asked of the database went. It returns false
// when err is ctx ending, which ends the program; any other failure is
// said, once per outage, and the program goes on.
func (h *dbHealth) note(ctx context.Context, err error) bool {
	switch {
	case err != nil && stopped(ctx, err):
		return false
	case err != nil:
		if h.since.IsZero() {
			h.since = time.Now()
			h.say("head office: its database is unreachable (%v); it keeps running, asks the registers to try again later, and resumes by itself when the database is back; the registers keep selling meanwhile, and nothing is lost", err)
		}
	case !h.since.IsZero():
		h.say("head office: its database is back after %s; the registers' sales are filed again", time.Since(h.since).Round(time.Second))
		h.since = time.Time{}
	}
	return true
}
