package main

import "testing"

func TestSQLCountsCommits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		sql    string
		idle   bool
		commit bool
	}{
		{"commit", false, true},
		{"  COMMIT", false, true},
		{"begin", true, false},
		{"SELECT 1", true, false},
		{"UPDATE public.sync_replicas SET last_seen = now() WHERE id = $1", true, true},
		{"UPDATE public.sync_replicas SET last_seen = now() WHERE id = $1", false, false},
		{"INSERT INTO t VALUES (1)", true, true},
		{"WITH d AS (DELETE FROM t WHERE id = $1 RETURNING id) SELECT id FROM d", true, true},
		{"WITH r AS (SELECT id FROM t) SELECT id FROM r FOR UPDATE", true, false},
		{"SELECT next_id FROM public.sync_replicas WHERE id = $1 FOR UPDATE", true, false},
		{"\n\t(SELECT 1)", true, false},
	}
	for _, tc := range cases {
		var c sqlCounts
		c.count(tc.sql, tc.idle)
		got := c.snapshot()
		want := int64(0)
		if tc.commit {
			want = 1
		}
		if got.Statements != 1 || got.Commits != want {
			t.Errorf("%q (idle %v): %d statements, %d commits; want 1, %d", tc.sql, tc.idle, got.Statements, got.Commits, want)
		}
	}
}
