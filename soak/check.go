package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/magicsync/magicsync/dashboard"
	"github.com/magicsync/magicsync/examples/shop/shopcheck"
	"github.com/magicsync/magicsync/server"
)

// check.go holds the checks made once the faults stop, as a sceptical
// user would make them: from the files, the tables and the dashboard.

// registerState says what still stands between a register and the head
// office agreeing, or "" once they agree: rows it has not had filed, and
// every difference between its file and the head office's tables.
func (w *world) registerState(ctx context.Context, r *register) (string, error) {
	if why, err := w.unconfirmed(ctx, r); err != nil || why != "" {
		return why, err
	}
	return w.differences(ctx, r)
}

// unconfirmed says how many rows a register has not yet heard filed, or
// "" when none: the cheap look, made before the whole comparison.
func (w *world) unconfirmed(ctx context.Context, r *register) (string, error) {
	db, err := openFile(r.file)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var pending int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sync_pending").Scan(&pending); err != nil {
		return "", fmt.Errorf("%s's file: %w", r.name, err)
	}
	if pending > 0 {
		return fmt.Sprintf("%s: %d row(s) not yet confirmed filed", r.name, pending), nil
	}
	return "", nil
}

// differences says how a register's file and the head office's tables
// differ, or "" when they agree: every row of both read and compared,
// the catalog against the shop the register is in now. The operator may
// have moved it since the last check; it must then hold the new shop's
// products, and of the old only those its receipt lines point at,
// marked discontinued.
func (w *world) differences(ctx context.Context, r *register) (string, error) {
	id, shopID, err := w.registerRow(ctx, r)
	if err != nil {
		return "", err
	}
	db, err := openFile(r.file)
	if err != nil {
		return "", err
	}
	defer db.Close()
	differences := shopcheck.FileDifferences
	if r.restored.Load() {
		differences = shopcheck.RestoredFileDifferences
	}
	diffs, err := differences(ctx, w.pool, shopID, r.name, id, db)
	if err != nil {
		return "", err
	}
	if len(diffs) > 0 {
		return fmt.Sprintf("%s's file and the head office differ in %d way(s), first: %s", r.name, len(diffs), diffs[0]), nil
	}
	return "", nil
}

// registerRow is a register's id, as the head office prepared it, and
// the shop it is in now.
func (w *world) registerRow(ctx context.Context, r *register) (id, shop uuid.UUID, err error) {
	err = w.pool.QueryRow(ctx, "SELECT id, shop_id FROM shop.registers WHERE name = $1", r.name).Scan(&id, &shop)
	if err != nil {
		return id, shop, fmt.Errorf("%s's id and shop: %w", r.name, err)
	}
	return id, shop, nil
}

// dashboardState says what the dashboard shows amiss, or "": a register
// missing, or not heard from since healed, or provisioning, or holding
// other catalog rows than it should by its digests, or with rows unsent,
// or a wish not yet answered.
func (w *world) dashboardState(ctx context.Context, healed time.Time) (string, error) {
	ov, err := w.overview(ctx)
	if err != nil {
		return "", err
	}
	if len(ov.Replicas) != len(w.regs) {
		return fmt.Sprintf("the dashboard shows %d registers; %d run", len(ov.Replicas), len(w.regs)), nil
	}
	if n := ov.Summary.Wishes[server.WishPending.String()]; n > 0 {
		return fmt.Sprintf("the dashboard shows %d wish(es) not yet answered", n), nil
	}
	for _, r := range ov.Replicas {
		switch {
		case r.ReportedAt.Before(healed):
			return fmt.Sprintf("the dashboard has heard nothing of %s since the storm", r.Name), nil
		case r.Provisioning:
			return fmt.Sprintf("the dashboard shows %s provisioning: %s", r.Name, r.ProvisionReason), nil
		}
		for _, t := range r.Tables {
			if t.Holds != t.Should && t.Kind == "catalog" {
				return fmt.Sprintf("the dashboard shows %s holding %d of %s, should %d", r.Name, t.Holds, t.Table, t.Should), nil
			}
			if t.Unsent != 0 {
				return fmt.Sprintf("the dashboard shows %s with %d row(s) of %s unsent", r.Name, t.Unsent, t.Table), nil
			}
		}
	}
	return "", nil
}

// overview reads the dashboard's status.json from a running head office.
func (w *world) overview(ctx context.Context) (dashboard.Overview, error) {
	var ov dashboard.Overview
	pw, err := os.ReadFile(filepath.Join(w.data, "dashboard.password"))
	if err != nil {
		return ov, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.upstream("")+"/status.json", nil)
	if err != nil {
		return ov, err
	}
	req.SetBasicAuth("shop", strings.TrimSpace(string(pw)))
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return ov, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ov, fmt.Errorf("the dashboard's status.json: %s", resp.Status)
	}
	return ov, json.NewDecoder(resp.Body).Decode(&ov)
}

// converged says what still stands between the shop and agreement, or ""
// once the head office and every register agree and the dashboard has
// heard from every register since healed.
func (w *world) converged(ctx context.Context, healed time.Time) (string, error) {
	// The cheap looks first, the whole comparison of every row last: a
	// calm spends its time waiting for the shop, not reading it.
	for _, r := range w.regs {
		if why, err := w.unconfirmed(ctx, r); err != nil || why != "" {
			return why, err
		}
	}
	if why, err := w.dashboardState(ctx, healed); err != nil || why != "" {
		return why, err
	}
	for _, r := range w.regs {
		if why, err := w.differences(ctx, r); err != nil || why != "" {
			return why, err
		}
	}
	return "", nil
}

// noteFiles records in the oracle what every register's file holds now.
func (w *world) noteFiles(ctx context.Context) error {
	for _, r := range w.regs {
		if err := w.noteFile(ctx, r.file); err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
	}
	return nil
}

// noteFile records in the oracle what a register's file holds now.
func (w *world) noteFile(ctx context.Context, file string) error {
	db, err := openFile(file)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, t := range recordTables {
		rows, err := fileRecords(ctx, db, t.name)
		if err != nil {
			return err
		}
		w.written.note(t.name, rows)
	}
	return nil
}

// filings compares the head office's records with the oracle.
func (w *world) filings(ctx context.Context) ([]filing, error) {
	var out []filing
	for _, t := range recordTables {
		filed, err := filedRecords(ctx, w.pool, t.name)
		if err != nil {
			return nil, err
		}
		written, gone := w.written.written(t.name)
		out = append(out, compareFiling(t.name, written, gone, filed))
	}
	return out, nil
}

// linesOfShop counts the receipt lines filed for products of a shop. Every
// register starts in the first shop, so a line of the second's was rung up
// by a register the operator moved there, selling what it gained.
func (w *world) linesOfShop(ctx context.Context, shop uuid.UUID) (int, error) {
	var n int
	err := w.pool.QueryRow(ctx, `SELECT count(*) FROM shop.receipt_lines l JOIN shop.products p ON p.id = l.product_id
		WHERE p.shop_id = $1`, shop).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting the receipt lines of shop %s: %w", shop, err)
	}
	return n, nil
}

// integrity runs PRAGMA integrity_check on every register's file: a file
// that fails it, or cannot be read for its damage, breaks a promise.
func (w *world) integrity(ctx context.Context) ([]string, error) {
	var broken []string
	for _, r := range w.regs {
		if err := integrityOf(ctx, r.file); err != nil {
			broken = append(broken, fmt.Sprintf("%s's file: %v", r.name, err))
		}
	}
	return broken, nil
}

// integrityOf runs PRAGMA integrity_check on a file.
func integrityOf(ctx context.Context, file string) error {
	db, err := openFile(file)
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return err
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		if s != "ok" {
			problems = append(problems, s)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(problems) > 0 {
		return errors.New("integrity_check: " + strings.Join(problems, "; "))
	}
	return nil
}
