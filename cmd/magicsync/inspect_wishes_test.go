package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/replica"
)

// later leaves every wish waiting.
type later struct{}

func (later) CarryOut(context.Context, replica.Wish[shoptest.Setting]) replica.Outcome {
	return replica.Later("the printer is off")
}

// newRegisterFile writes a register's file, the shop's tables and the
// engine's installed, and opens replica id on it with settings s (no
// digests, no log); it returns the file's path. The caller closes the
// replica.
func newRegisterFile(t *testing.T, codecs *magicsync.Codecs, id uuid.UUID, s replica.Settings) (string, *replica.Replica) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "register.db")
	db := sqlitetest.OpenPath(t, sqlitetest.Modernc(), path, sqlitetest.Safe())
	if _, err := db.Exec(shoptest.SQLiteDDL); err != nil {
		t.Fatal(err)
	}
	if err := replica.Install(ctx, db, codecs); err != nil {
		t.Fatal(err)
	}
	up := replica.UplinkFunc(func(context.Context, uuid.UUID, string, []byte) error { return nil })
	s.DigestsEvery, s.Logger = -1, slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := replica.New(ctx, db, codecs, replica.Me(id), up, s)
	if err != nil {
		t.Fatal(err)
	}
	return path, r
}

// registerWithWishes writes the file of a register holding n wishes, and
// returns its path.
func registerWithWishes(t *testing.T, n int) string {
	t.Helper()
	ctx := context.Background()
	codecs := shoptest.Codecs(t, shoptest.Setting{})
	id := uuid.New()
	path, r := newRegisterFile(t, codecs, id, replica.Settings{Wishes: replica.Wishes{replica.Handle[shoptest.Setting](later{})}})
	defer r.Close()
	var ws []*syncpb.Wish
	for i := range n {
		key, err := magicsync.KeyOf(codecs, shoptest.Setting{RegisterID: id, Name: fmt.Sprintf("line %03d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, &syncpb.Wish{Table: "settings", Key: []byte(key), Wish: 1, Columns: []string{"value"},
			Wanted: wire.AppendTuple(nil, []wire.Value{wire.TextValue("x")}), WishedAt: time.Now().UnixMicro()})
	}
	body, err := wire.EncodeToReplica(&syncpb.ToReplica{Id: 1, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Wishes: ws}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Endpoint().Receive(ctx, body); err != nil {
		t.Fatal(err)
	}
	return path
}

// inspect lists the first 100 wishes and says how to list the next;
// inspect -wishes pages through them all, as text and as JSON.
func TestInspectPagesThroughTheWishes(t *testing.T) {
	t.Parallel()
	const n = replica.InspectRows + 5
	path := registerWithWishes(t, n)
	code, out, errOut := runCLI(t, "inspect", path, "-json")
	if code != exitOK {
		t.Fatalf("inspect exited %d: %s", code, errOut)
	}
	var in inspection
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatal(err)
	}
	if len(in.WishList) != replica.InspectRows || in.WishesNext == nil {
		t.Fatalf("inspect -json lists %d wishes, next %v; want %d and a next page", len(in.WishList), in.WishesNext, replica.InspectRows)
	}
	seen := map[string]bool{}
	for _, w := range in.WishList {
		seen[w.Key] = true
	}
	next := *in.WishesNext
	for pages := 0; next != ""; pages++ {
		if pages > n {
			t.Fatal("no end of pages")
		}
		code, out, errOut := runCLI(t, "inspect", "-wishes", "-after", next, "-limit", "2", "-json", path)
		if code != exitOK {
			t.Fatalf("inspect -wishes exited %d: %s", code, errOut)
		}
		var page wishPage
		if err := json.Unmarshal([]byte(out), &page); err != nil {
			t.Fatal(err)
		}
		for _, w := range page.Wishes {
			if seen[w.Key] {
				t.Fatalf("wish %s listed twice", w.Key)
			}
			seen[w.Key] = true
		}
		next = ""
		if page.Next != nil {
			next = *page.Next
		}
	}
	if len(seen) != n {
		t.Errorf("the pages listed %d wishes; want %d", len(seen), n)
	}
	code, out, _ = runCLI(t, "inspect", path)
	if code != exitOK || !strings.Contains(out, "magicsync inspect -wishes -after settings:") {
		t.Errorf("inspect printed\n%s\nwant how to list the next wishes", out)
	}
	if code, _, errOut := runCLI(t, "inspect", "-wishes", "-after", "settings:zz", path); code != exitUsage || !strings.Contains(errOut, "hex") {
		t.Errorf("a cursor whose key is no hex: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, "inspect", "-limit", "5", path); code != exitUsage || !strings.Contains(errOut, "-wishes") {
		t.Errorf("-limit without -wishes: exit %d, %s", code, errOut)
	}
}
