package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/shoptest/shopserver"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/server"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// runCLI runs magicsync with args and returns its exit status and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// register is a running replica of the shop's receipts, over a file of
// its own, and the messages its uplink took.
type register struct {
	id   uuid.UUID
	path string
	r    *replica.Replica
	sent chan *syncpb.ToServer
}

// newRegister starts a register whose file has applied message 8 and holds
// one receipt in its backlog, refused by the server with reason.
func newRegister(t *testing.T, reason string) *register {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rg := &register{id: uuid.New(), path: filepath.Join(t.TempDir(), "register-1.db"), sent: make(chan *syncpb.ToServer, 100)}
	db := sqlitetest.OpenPath(t, sqlitetest.Modernc(), rg.path, sqlitetest.Safe())
	codecs := shoptest.Codecs(t, shoptest.Receipt{})
	if _, err := db.Exec(shoptest.SQLiteDDL); err != nil {
		t.Fatal(err)
	}
	if err := replica.Install(ctx, db, codecs); err != nil {
		t.Fatal(err)
	}
	up := replica.UplinkFunc(func(_ context.Context, _ uuid.UUID, _ string, body []byte) error {
		m, err := wire.DecodeToServer(body)
		if err != nil {
			return replica.TransportError(false, err)
		}
		rg.sent <- m
		return nil
	})
	r, err := replica.New(ctx, db, codecs, replica.Me(rg.id), up, replica.Settings{Idle: 20 * time.Millisecond, DigestsEvery: -1, Build: "v1",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rg.r = r
	rg.receive(t, &syncpb.ToReplica{Id: 7, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{}}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		r.Close()
	})
	if _, err := db.Exec("INSERT INTO receipts VALUES (?, ?, 100, NULL, ?)", rg.id, uuid.New(), time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	m := rg.nextWithReceipts(t)
	receipts := m.Up.GetTables()[0]
	rg.receive(t, &syncpb.ToReplica{Id: 8, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Lane: m.Lane, Sequence: m.Sequence,
		Refused: []*syncpb.Rejected{{Table: "receipts", Key: receipts.UpsertKeys[0], Reason: reason}}}}})
	return rg
}

// receive hands the register a message from the server.
func (rg *register) receive(t *testing.T, m *syncpb.ToReplica) {
	t.Helper()
	body, err := wire.EncodeToReplica(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rg.r.Endpoint().Receive(context.Background(), body); err != nil {
		t.Fatal(err)
	}
}

// nextWithReceipts waits for a message carrying receipts.
func (rg *register) nextWithReceipts(t *testing.T) *syncpb.ToServer {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-rg.sent:
			for _, tc := range m.Up.GetTables() {
				if tc.Table == "receipts" && len(tc.UpsertKeys) > 0 {
					return m
				}
			}
		case <-deadline:
			t.Fatal("the register sent no receipt within 10 s")
			return nil
		}
	}
}

// inspect, on the file of a running register, shows its id, the last
// message applied and its backlog with the server's reason, as text and as
// JSON.
func TestInspectShowsARunningRegistersState(t *testing.T) {
	t.Parallel()
	rg := newRegister(t, "the register is closed")
	code, out, errOut := runCLI(t, "inspect", rg.path)
	if code != exitOK {
		t.Fatalf("inspect exited %d: %s", code, errOut)
	}
	for _, want := range []string{rg.id.String(), "last applied    8", "receipts", "the register is closed", "1 rows"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect printed\n%s\nwant %q in it", out, want)
		}
	}
	code, out, errOut = runCLI(t, "inspect", rg.path, "-json")
	if code != exitOK {
		t.Fatalf("inspect -json exited %d: %s", code, errOut)
	}
	var got inspection
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("inspect -json printed %s: %v", out, err)
	}
	if got.ID != rg.id.String() || got.LastApplied != 8 || got.Build != "v1" || got.Backlog != 1 || len(got.BacklogRows) != 1 ||
		!strings.Contains(got.BacklogRows[0].Reason, "the register is closed") {
		t.Fatalf("inspect -json = %+v; want register %s, message 8 applied, the refused receipt in the backlog", got, rg.id)
	}
}

// inspect and release-backlog say what is wrong: a missing file (exit 1),
// no file named (exit 2); -h prints the usage (exit 0).
func TestInspectAndReleaseBacklogSayWhatIsWrong(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nowhere.db")
	for _, cmd := range []string{"inspect", "release-backlog"} {
		if code, _, errOut := runCLI(t, cmd, missing); code != exitFailure || !strings.Contains(errOut, "name the replica's database file") {
			t.Errorf("%s of a missing file: exit %d, %q; want 1 and what to fix", cmd, code, errOut)
		}
		if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s created the missing file", cmd)
		}
		if code, _, errOut := runCLI(t, cmd); code != exitUsage || !strings.Contains(errOut, "name one replica database file") {
			t.Errorf("%s without a file: exit %d, %q; want 2", cmd, code, errOut)
		}
		if code, out, _ := runCLI(t, cmd, "-h"); code != exitOK || !strings.Contains(out, "Usage: magicsync "+cmd) {
			t.Errorf("%s -h: exit %d, %q; want 0 and the usage", cmd, code, out)
		}
	}
	if code, _, errOut := runCLI(t, "frobnicate"); code != exitUsage || !strings.Contains(errOut, "inspect") {
		t.Errorf("an unknown command: exit %d, %q; want 2 and the commands", code, errOut)
	}
}

// release-backlog, on the file of a running register, hands the refused
// receipt back: the register sends it again. A table the file does not
// have is refused.
func TestReleaseBacklogHandsTheRowsBackToTheRunningRegister(t *testing.T) {
	t.Parallel()
	rg := newRegister(t, "unknown register")
	if code, _, errOut := runCLI(t, "release-backlog", "-table", "reciepts", rg.path); code != exitFailure || !strings.Contains(errOut, `"reciepts"`) {
		t.Fatalf("release-backlog -table reciepts: exit %d, %q; want 1, naming the table", code, errOut)
	}
	code, out, errOut := runCLI(t, "release-backlog", "-json", "-table", "receipts", rg.path)
	if code != exitOK || strings.TrimSpace(out) != "{\n  \"released\": 1\n}" {
		t.Fatalf("release-backlog: exit %d, %q, %q; want the receipt released", code, out, errOut)
	}
	rg.nextWithReceipts(t)
}

// migrate applies the engine's steps to an empty database, after which
// status reads it; migrate -print prints them, as SQL or JSON; status
// names what to do about a database not migrated.
func TestMigrateAppliesOrPrintsTheStepsAndStatusReadsThem(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	if code, _, errOut := runCLI(t, "status", "-database", url); code != exitFailure || !strings.Contains(errOut, "magicsync migrate") {
		t.Fatalf("status before migrate: exit %d, %q; want 1 and to be told to migrate", code, errOut)
	}
	if code, out, errOut := runCLI(t, "migrate", "-database", url, "-schema", "sync"); code != exitOK || !strings.Contains(out, "schema sync are at step") {
		t.Fatalf("migrate: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut := runCLI(t, "status", "-database", url, "-schema", "sync", "-json")
	if code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Fatalf("status after migrate: exit %d, %q, %q; want no replicas", code, out, errOut)
	}
	code, out, _ = runCLI(t, "migrate", "-print")
	steps, err := server.Steps("")
	if err != nil {
		t.Fatal(err)
	}
	if code != exitOK || !strings.Contains(out, steps[0].SQL) || !strings.Contains(out, steps[len(steps)-1].Name) {
		t.Fatalf("migrate -print: exit %d; want every step's SQL", code)
	}
	code, out, _ = runCLI(t, "migrate", "-print", "-json", "-schema", "sync")
	var js []stepJSON
	if err := json.Unmarshal([]byte(out), &js); code != exitOK || err != nil || len(js) != len(steps) || !strings.Contains(js[0].SQL, `"sync"`) {
		t.Fatalf("migrate -print -json: exit %d, %v, %d steps; want every step, in schema sync", code, err, len(js))
	}
	if code, _, _ := runCLI(t, "migrate", "-json", "-database", url); code != exitUsage {
		t.Fatalf("migrate -json without -print: exit %d; want 2", code)
	}
}

// status lists the replicas the engine knows; rotate-token issues one a
// new secret, which works, while the old one no longer does.
func TestStatusListsTheReplicasAndRotateTokenIssuesANewSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := shopserver.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	codecs := shoptest.Codecs(t, shoptest.Product{}, shoptest.Receipt{})
	opts := server.Options{Replicas: shoptest.Replicas}
	shopserver.InstallTriggers(t, pool, codecs, opts)
	s, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	shop, id := uuid.New(), uuid.New()
	if _, err := pool.Exec(ctx, "INSERT INTO shop.shops VALUES ($1, 'A')", shop); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO shop.registers VALUES ($1, $2)", id, shop); err != nil {
		t.Fatal(err)
	}
	old, err := s.Credentials(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "status", "-database", url)
	if code != exitOK || !strings.Contains(out, id.String()) || !strings.Contains(out, "provisioning: new replica") {
		t.Fatalf("status: exit %d\n%s%s\nwant the register, to be provisioned", code, out, errOut)
	}
	// A command issued to it is counted by state, in the JSON.
	if _, err := pool.Exec(ctx, "INSERT INTO sync_commands (id, replica, name) VALUES ($1, $2, 'print-test-page')", uuid.New(), id); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, "status", "-database", url, "-json")
	var sts []replicaJSON
	if err := json.Unmarshal([]byte(out), &sts); code != exitOK || err != nil || len(sts) != 1 || sts[0].Commands["queued"] != 1 {
		t.Fatalf("status -json: exit %d, %v\n%s%s\nwant the register with one command queued", code, err, out, errOut)
	}
	code, out, errOut = runCLI(t, "rotate-token", "-database", url, id.String())
	secret := strings.TrimSpace(out)
	if code != exitOK || secret == "" || secret == old {
		t.Fatalf("rotate-token: exit %d, %q, %q; want a new secret", code, out, errOut)
	}
	fresh, err := server.New(ctx, pool, codecs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Endpoint().Authenticate(ctx, id, secret); err != nil {
		t.Fatalf("the new secret: %v", err)
	}
	if err := fresh.Endpoint().Authenticate(ctx, id, old); !errors.Is(err, server.ErrUnauthorized) {
		t.Fatalf("the old secret: %v; want ErrUnauthorized", err)
	}
	if code, _, errOut := runCLI(t, "rotate-token", "-database", url, "-json", uuid.NewString()); code != exitFailure || !strings.Contains(errOut, "check the id") {
		t.Fatalf("rotate-token of an unknown id: exit %d, %q; want 1 and what to check", code, errOut)
	}
	if code, _, _ := runCLI(t, "rotate-token", "-database", url, "register-1"); code != exitUsage {
		t.Fatalf("rotate-token of no uuid: exit %d; want 2", code)
	}
}
