package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// stopOn is the demo's output, which stops the demo (cancel) as soon as
// it prints a line holding at.
type stopOn struct {
	syncBuffer
	at     string
	cancel context.CancelFunc
}

func (s *stopOn) Write(p []byte) (int, error) {
	n, err := s.syncBuffer.Write(p)
	if strings.Contains(string(p), s.at) {
		s.cancel()
	}
	return n, err
}

// Ctrl-C while the registers start is a stop like any other: the demo
// ends without an error, saying so.
func TestStoppingTheDemoWhileItsRegistersStartIsNoError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &stopOn{at: "registers keep their files in", cancel: cancel}
	c := config{data: t.TempDir(), addr: "127.0.0.1:0", out: out, databaseURL: pgtest.NewDatabase(t), every: time.Second, poll: testPoll}
	if err := run(ctx, c); err != nil {
		t.Fatalf("run, stopped while its registers started: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "stopping while the registers start") {
		t.Errorf("the demo did not say it stopped:\n%s", out.String())
	}
}
