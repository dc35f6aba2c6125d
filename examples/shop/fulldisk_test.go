package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

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
// with a head office over PostgreSQL, and fills its disk while it sells,
// writing "disk full" in its drill file: it says its disk is full, goes on
// ringing up sales, says in plain words that it cannot save them because
// the disk is full, and keeps them in memory; once the line is gone, it
// saves them. Every sale rung up — before, during and after — reaches the
// head office, and the program stops cleanly, having lost none.
func TestRegisterKeepsSellingOnAFullDisk(t *testing.T) {
	t.Parallel()
	sellThroughDiskDrill(t, "disk full", `register 1's disk is full \(drill\)`, func(string) string { return `the disk is full \(drill\)` })
}

// TestTillKeepsUnsavedSalesBounded fills the disk under an unplugged
// register's file and rings up sales on its till one by one: a sale the
// file refuses is kept, those after it wait behind it, and once the till
// keeps its most it rings up no new sale and says why. Nothing the file
// held is lost; once the disk has room the kept sales are saved, in
// order, and reach the head office when the register is plugged back in.
func TestTillKeepsUnsavedSalesBounded(t *testing.T) {
	t.Parallel()
	s, tokenFile := startShopForRegister1(t)
	ho := s.ho
	token := readToken(t, tokenFile)
	// The disk a drill fills, set by hand.
	d := &drill{name: "register 1"}
	ctx, stop := context.WithCancel(t.Context())
	r, err := startRegister(ctx, d, t.TempDir(), 0, ho.url, token, ho.codecs, testPoll, s.log)
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

	d.set(drillState{disk: diskFull})
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

	d.set(drillState{})
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
