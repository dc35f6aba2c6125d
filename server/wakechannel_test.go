package server

import "testing"

// Engines in two schemas of one database listen on channels of their own,
// each a valid channel name; public's is the one it always was.
func TestWakeChannelsDifferBySchema(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, name := range []string{"", "magicsync_engine", "other", "a_schema_name_of_exactly_sixty_three_bytes_is_allowed_here_xyz"} {
		e, err := parseSchema(name)
		if err != nil {
			t.Fatal(err)
		}
		ch := e.wakeChannel()
		if len(ch) > 63 {
			t.Errorf("schema %q: channel %q is over 63 bytes", name, ch)
		}
		if prev, dup := seen[ch]; dup {
			t.Errorf("schemas %q and %q share channel %q", prev, name, ch)
		}
		seen[ch] = name
	}
	if e, _ := parseSchema(""); e.wakeChannel() != "magicsync_wake" {
		t.Errorf("public's channel is %q; want magicsync_wake, as before", e.wakeChannel())
	}
}
