package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// `magicsync inspect` on the file of a register the demo runs prints the
// register's id and the last message it applied, as text and as JSON,
// while the register goes on.
func TestMagicsyncInspectShowsARunningRegister(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "magicsync")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/magicsync/magicsync/cmd/magicsync")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out syncBuffer
	c := config{data: t.TempDir(), addr: "127.0.0.1:0", out: &out, databaseURL: pgtest.NewDatabase(t), every: 250 * time.Millisecond, poll: testPoll}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- run(ctx, c) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-ran:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(settle):
			t.Errorf("run did not return within %v of being stopped", settle)
		}
		t.Logf("the demo printed:\n%s", out.String())
	})
	file := registerFile(c.data, 0)
	id := registerID(0).String()
	lastApplied := regexp.MustCompile(`(?m)^last applied\s+(\d+) `)
	waitFor(t, "magicsync inspect showing register 1 applying messages", func() error {
		select {
		case err := <-ran:
			t.Fatalf("the demo stopped: %v", err)
		default:
		}
		text, err := exec.CommandContext(t.Context(), bin, "inspect", file).CombinedOutput()
		if err != nil {
			return fmt.Errorf("inspect: %v: %s", err, text)
		}
		m := lastApplied.FindSubmatch(text)
		if !regexp.MustCompile(`(?m)^replica\s+`+id+`$`).Match(text) || m == nil {
			return fmt.Errorf("inspect printed\n%s\nwant register 1's id %s and the last message applied", text, id)
		}
		if n, _ := strconv.Atoi(string(m[1])); n == 0 {
			return errors.New("register 1 applied no message yet")
		}
		return nil
	})
	text, err := exec.CommandContext(t.Context(), bin, "inspect", "-json", file).Output()
	if err != nil {
		t.Fatalf("inspect -json: %v", err)
	}
	var got struct {
		ID          string `json:"id"`
		Known       bool   `json:"known"`
		LastApplied uint64 `json:"last_applied"`
	}
	if err := json.Unmarshal(text, &got); err != nil || got.ID != id || !got.Known || got.LastApplied == 0 {
		t.Fatalf("inspect -json printed %s (%v); want register 1's id and a message applied", text, err)
	}
	select {
	case err := <-ran:
		t.Fatalf("the demo stopped while inspected: %v", err)
	default:
	}
}
