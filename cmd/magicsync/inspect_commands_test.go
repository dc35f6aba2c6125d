package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/replica"
)

// registerWithCommands writes the file of a register the server sent the
// commands of these names, issued a second apart, and returns its path and
// their ids.
func registerWithCommands(t *testing.T, names ...string) (string, []uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	path, r := newRegisterFile(t, shoptest.Codecs(t, shoptest.Currency{}), uuid.New(), replica.Settings{})
	defer r.Close()
	var cs []*syncpb.Command
	var ids []uuid.UUID
	issued := time.Now().Add(-time.Hour)
	for i, name := range names {
		id := uuid.New()
		ids = append(ids, id)
		cs = append(cs, &syncpb.Command{Id: id[:], Name: name, IssuedAt: issued.Add(time.Duration(i) * time.Second).UnixMicro()})
	}
	body, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Commands: cs}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Endpoint().Receive(ctx, body); err != nil {
		t.Fatal(err)
	}
	return path, ids
}

// inspect counts a replica's commands by state and lists them, issued
// last first, as text and as JSON.
func TestInspectShowsTheCommands(t *testing.T) {
	t.Parallel()
	path, ids := registerWithCommands(t, "print-test-page", "recount-drawer")
	code, out, errOut := runCLI(t, "inspect", path)
	if code != exitOK {
		t.Fatalf("inspect exited %d: %s", code, errOut)
	}
	listed := strings.Index(out, "Commands (issued last first):")
	if !strings.Contains(out, "2 delivered") || listed < 0 {
		t.Fatalf("inspect printed\n%s\nwant the commands counted (2 delivered) and listed", out)
	}
	list := out[listed:]
	if last, first := strings.Index(list, "recount-drawer"), strings.Index(list, "print-test-page"); last < 0 || first < last {
		t.Errorf("the commands are listed\n%s\nwant recount-drawer, issued last, before print-test-page", list)
	}

	code, out, errOut = runCLI(t, "inspect", "-json", path)
	if code != exitOK {
		t.Fatalf("inspect -json exited %d: %s", code, errOut)
	}
	var in inspection
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatal(err)
	}
	if in.Commands["delivered"] != 2 || len(in.CommandList) != 2 {
		t.Fatalf("inspect -json counts the commands %v and lists %d; want 2 delivered, listed", in.Commands, len(in.CommandList))
	}
	if c := in.CommandList[0]; c.ID != ids[1].String() || c.Name != "recount-drawer" || c.State != "delivered" || c.AnsweredAt != nil || c.Deadline != nil {
		t.Errorf("the command issued last reads %+v; want recount-drawer, delivered, not answered, no deadline", c)
	}
}
