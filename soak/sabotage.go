package main

import (
	"context"
	"fmt"
	"os"
)

// sabotage.go holds the promises the soak breaks on purpose (-break), to
// show that its checks catch what they claim to: a run with -break must
// fail, naming the promise broken.

// sabotages are the -break kinds, each with what it does and the promise
// the run must then find broken.
var sabotages = []struct {
	name, what string
	do         func(context.Context, *world) error
}{
	{"drop-filed", "the head office drops a receipt it filed, and its lines", dropFiled},
	{"skip-message", "a register's file lacks a product the head office sent it, as if it had skipped that message", skipMessage},
	{"corrupt-file", "a page of a register's file is overwritten", corruptFile},
}

// sabotageNamed returns the -break kind name, or an error listing them.
func sabotageNamed(name string) (func(context.Context, *world) error, error) {
	var names []string
	for _, s := range sabotages {
		if s.name == name {
			return s.do, nil
		}
		names = append(names, s.name)
	}
	return nil, fmt.Errorf("-break: no sabotage %q; the kinds are %v", name, names)
}

// dropFiled deletes a filed receipt and its lines at the head office,
// behind the engine's back.
func dropFiled(ctx context.Context, w *world) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var id string
	if err := tx.QueryRow(ctx, "SELECT id::text FROM shop.receipts ORDER BY id LIMIT 1").Scan(&id); err != nil {
		return fmt.Errorf("finding a filed receipt to drop: %w", err)
	}
	if _, err := tx.Exec(ctx, "DELETE FROM shop.receipt_lines WHERE receipt_id = $1", id); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "DELETE FROM shop.receipts WHERE id = $1", id); err != nil {
		return err
	}
	w.say("sabotage: the head office dropped receipt %s, which it had filed", id)
	return tx.Commit(ctx)
}

// skipMessage deletes a product from the first register's file, as a
// register that skipped the message bringing it would lack it: one on
// sale in the shop the register is in now, which the check holds it to
// (the operator may have moved it). The replica refuses writes to a
// catalog; the sabotage drops that refusal first, as a buggy engine
// would not have it.
func skipMessage(ctx context.Context, w *world) error {
	r := w.regs[0]
	_, shop, err := w.registerRow(ctx, r)
	if err != nil {
		return err
	}
	db, err := openFile(r.file)
	if err != nil {
		return err
	}
	defer db.Close()
	var id string
	if err := db.QueryRowContext(ctx, "SELECT id FROM products WHERE shop_id = ? AND NOT discontinued LIMIT 1", shop.String()).Scan(&id); err != nil {
		return fmt.Errorf("finding a product of %s's shop to skip: %w", r.name, err)
	}
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{"DROP TRIGGER sync_barcodes_refuse_delete", nil},
		{"DROP TRIGGER sync_products_refuse_delete", nil},
		{"DELETE FROM barcodes WHERE product_id = ?", []any{id}},
		{"DELETE FROM products WHERE id = ?", []any{id}},
	} {
		if _, err := db.ExecContext(ctx, st.sql, st.args...); err != nil {
			return fmt.Errorf("%s: %w", st.sql, err)
		}
	}
	w.say("sabotage: %s's file lacks product %s of its shop %s, as if it had skipped the message bringing it", r.name, id, shop)
	return nil
}

// corruptFile overwrites the third page of the first register's file
// with bytes that make no b-tree page.
func corruptFile(ctx context.Context, w *world) error {
	db, err := openFile(w.regs[0].file)
	if err != nil {
		return err
	}
	var pageSize int64
	err = db.QueryRowContext(ctx, "PRAGMA page_size").Scan(&pageSize)
	if err == nil {
		// Everything in the main file: the overwrite is then the page's
		// only version.
		_, err = db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	}
	db.Close()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(w.regs[0].file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	garbage := make([]byte, pageSize)
	for i := range garbage {
		garbage[i] = byte(i*7 + 13)
	}
	if _, err := f.WriteAt(garbage, 2*pageSize); err != nil {
		f.Close()
		return err
	}
	w.say("sabotage: page 3 of %s's file overwritten", w.regs[0].name)
	return f.Close()
}
