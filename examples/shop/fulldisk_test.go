package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/magicsync/magicsync/internal/pgtest"
)

// disk is the disk under a register's file, which a test fills. Full, it
// lets no connection opened since grow the file (PRAGMA max_page_count,
// which SQLite raises to the file's size then): a write that needs a new
// page fails with SQLITE_FULL, "database or disk is full", as on a disk
// with no room left, and one that fits in the pages the file has goes
// through, as there. The register's pool keeps no idle connection, so
// that each use opens one that sees the disk as it is now.
type disk struct{ full atomic.Bool }

// open is a register's opener over the disk.
func (d *disk) open(path string) (*sql.DB, error) {
	c, err := sqlite.NewConnector(dsn(path))
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(diskConnector{Connector: c, disk: d})
	db.SetMaxIdleConns(0)
	return db, nil
}

type diskConnector struct {
	driver.Connector
	disk *disk
}

func (c diskConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil || !c.disk.full.Load() {
		return conn, err
	}
	if _, err := conn.(driver.ExecerContext).ExecContext(ctx, "PRAGMA max_page_count = 1", nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("filling the disk: %w", err)
	}
	return conn, nil
}

// startFullDiskShop starts a head office over a fresh database and returns
// it with the file holding register 1's token; both stop when the test
// ends.
func startFullDiskShop(t *testing.T) (*headOffice, string, *slog.Logger) {
	t.Helper()
	tl := &testLog{t: t}
	t.Cleanup(tl.close)
	log := slog.New(slog.NewTextHandler(tl, &slog.HandlerOptions{Level: slog.LevelError}))
	ctx, cancel := context.WithCancel(t.Context())
	ho, err := startHeadOffice(ctx, pgtest.NewDatabase(t), "127.0.0.1:0", "", len(registerNames), testPoll, log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		ho.wait()
	})
	if err := ho.hooks.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	_, tokenFile, err := ho.token(ctx, t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return ho, tokenFile, log
}

// waitAllFiled waits until the head office filed every receipt of
// register 1 whose id starts with one of prefixes.
func waitAllFiled(t *testing.T, ho *headOffice, prefixes []string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the %d receipts rung up filed at the head office", len(prefixes)), func() error {
		rows, err := ho.pool.Query(t.Context(), "SELECT id::text FROM shop.receipts WHERE register_id = $1", registerID(0))
		if err != nil {
			return err
		}
		var filed []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			filed = append(filed, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var missing []string
		for _, p := range prefixes {
			found := false
			for _, id := range filed {
				found = found || strings.HasPrefix(id, p)
			}
			if !found {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("receipts %v not filed (%d filed)", missing, len(filed))
		}
		return nil
	})
}

// TestRegisterKeepsSellingOnAFullDisk runs the register program, syncing
// with a head office over PostgreSQL, and fills its disk while it sells:
// it goes on ringing up sales, says in plain words that it cannot save
// them because the disk is full, and saves them once the disk has room
// again. Every sale rung up — before, during and after — reaches the head
// office, and the program stops cleanly, having lost none.
func TestRegisterKeepsSellingOnAFullDisk(t *testing.T) {
	t.Parallel()
	ho, tokenFile, _ := startFullDiskShop(t)
	var d disk
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	p := &program{name: "register 1", done: make(chan struct{})}
	c := registerConfig{n: 1, server: ho.url, tokenFile: tokenFile, data: t.TempDir(), every: 20 * time.Millisecond,
		poll: testPoll, out: &p.out, open: d.open}
	go func() {
		p.err = runRegister(ctx, c)
		close(p.done)
	}()
	t.Cleanup(func() {
		stop()
		<-p.done
		if t.Failed() {
			t.Logf("register 1 printed:\n%s", p.out.String())
		}
	})
	p.await(t, 0, saleRE)

	full := len(p.out.String())
	d.full.Store(true)
	_, failed := p.await(t, full, `register 1 could not save a sale of \d line\(s\), €\d+\.\d\d \(receipt [0-9a-f]{8}\): the disk is full\. `+
		`It keeps \d+ unsaved sale\(s\) in memory and tries them again at its next sale`)
	// The till goes on: two more sales rung up, kept or (where they fit
	// in the pages the file has) saved.
	p.await(t, failed, `(?s)register 1 (could not save a sale|rang up) .*register 1 (could not save a sale|rang up) `)

	room := len(p.out.String())
	d.full.Store(false)
	_, end := p.await(t, room, saleRE)
	printed := p.out.String()[:end]
	// A sale is saved at once only when no kept sale waits before it:
	// those kept since the disk filled were saved, and said so.
	if !regexp.MustCompile(`register 1 saved \d+ sale\(s\) it had kept in memory: its file takes writes again`).MatchString(printed[failed:]) {
		t.Error("the register did not say it saved the sales it had kept")
	}
	var receipts []string
	for _, m := range regexp.MustCompile(`register 1 (?:rang up|could not save a sale of) \d line\(s\), €\d+\.\d\d \(receipt ([0-9a-f]{8})\)`).FindAllStringSubmatch(printed, -1) {
		receipts = append(receipts, m[1])
	}
	waitAllFiled(t, ho, receipts)

	stop()
	<-p.done
	if p.err != nil {
		t.Fatalf("the register program returned %v", p.err)
	}
	out := p.out.String()
	for _, unwanted := range []string{"lost", "gives up", "database or disk is full", "SQLITE"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("the register printed %q", unwanted)
		}
	}
	if !strings.Contains(out, "stopping: register 1 finishes what it was sending") {
		t.Error("the register did not say it was stopping")
	}
}

// TestTillKeepsUnsavedSalesBounded fills the disk under an unplugged
// register's file and rings up sales on its till one by one: a sale the
// file refuses is kept, those after it wait behind it, and once the till
// keeps its most it rings up no new sale and says why. Nothing the file
// held is lost; once the disk has room the kept sales are saved, in
// order, and reach the head office when the register is plugged back in.
func TestTillKeepsUnsavedSalesBounded(t *testing.T) {
	t.Parallel()
	ho, tokenFile, log := startFullDiskShop(t)
	token := readToken(t, tokenFile)
	var d disk
	ctx, stop := context.WithCancel(t.Context())
	r, err := startRegister(ctx, d.open, t.TempDir(), 0, ho.url, token, ho.codecs, testPoll, log)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	defer func() {
		stop()
		r.wait()
	}()
	waitFor(t, "register 1 holds the products", func() error {
		if got := localCount(t, r, "products"); got != len(productNames) {
			return fmt.Errorf("register 1 holds %d products", got)
		}
		return nil
	})
	// Unplugged, nothing it wrote is confirmed, so nothing is deleted to
	// make room: a sale the full disk refuses is refused until it has
	// room again.
	r.online.Store(false)
	var out syncBuffer
	till := newTill(r, seeded(t), sayer(&out))
	till.max = 3
	till.ring(ctx)
	if !strings.Contains(out.String(), "register 1 rang up ") || len(till.unsaved) != 0 {
		t.Fatalf("a sale on an empty disk:\n%s", out.String())
	}

	d.full.Store(true)
	savedBefore := receiptIDs(t, r)
	for i := 0; len(till.unsaved) < till.max; i++ {
		if i == 1000 {
			t.Fatalf("1000 sales on a full disk, %d kept:\n%s", len(till.unsaved), out.String())
		}
		till.ring(ctx)
	}
	kept := make([]sale, len(till.unsaved))
	copy(kept, till.unsaved)
	mark := len(out.String())
	till.ring(ctx)
	if got := out.String()[mark:]; !strings.Contains(got, "register 1 rings up no new sale: 3 unsaved sale(s) wait in memory, the most it keeps, and its file still refuses them: the disk is full") {
		t.Errorf("with 3 sales kept, the till said %q", got)
	}
	if len(till.unsaved) != 3 || till.unsaved[0].receipt != kept[0].receipt {
		t.Errorf("with 3 sales kept, the till keeps %d, first %v", len(till.unsaved), till.unsaved[0].receipt)
	}
	for _, id := range savedBefore {
		if !slices.Contains(receiptIDs(t, r), id) {
			t.Errorf("receipt %s, saved before the disk filled, is gone", id)
		}
	}

	d.full.Store(false)
	mark = len(out.String())
	till.ring(ctx)
	got := out.String()[mark:]
	if !strings.Contains(got, "register 1 saved 3 sale(s) it had kept in memory: its file takes writes again") ||
		!strings.Contains(got, "register 1 rang up ") || len(till.unsaved) != 0 {
		t.Fatalf("once the disk has room, the till said %q and keeps %d sales", got, len(till.unsaved))
	}
	ids := receiptIDs(t, r)
	var prefixes []string
	for _, s := range kept {
		if !slices.Contains(ids, s.receipt.String()) {
			t.Errorf("kept receipt %s is not in the file once the disk has room", s.receipt)
		}
	}
	for _, id := range ids {
		prefixes = append(prefixes, id[:8])
	}
	r.online.Store(true)
	r.engine.Nudge()
	waitAllFiled(t, ho, prefixes)
}

// receiptIDs lists the receipts in r's file.
func receiptIDs(t *testing.T, r *register) []string {
	t.Helper()
	rows, err := r.db.QueryContext(t.Context(), "SELECT id FROM receipts ORDER BY rung_at")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// readToken reads the token the head office wrote in path.
func readToken(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
