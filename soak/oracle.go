package main

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the registers' files, read by the checks

	"github.com/magicsync/magicsync/examples/shop/shopcheck"
)

// oracle.go holds what the registers wrote: the soak's record of every
// receipt and line, read from the registers' own files, against which the
// head office's tables are checked.

// recordTables are the registers' records the soak follows, with the
// columns compared, the key first.
var recordTables = []struct{ name, cols string }{
	{"receipts", "id, register_id, total_cents, rung_at"},
	{"receipt_lines", "id, register_id, receipt_id, product_id, quantity, price_cents, rung_at"},
}

// keyLen is the length of a canonical row's key: a UUID's text.
const keyLen = 36

// oracle is every record a register wrote, by table and key, and those
// that went with a disk restored from an older copy before they were
// ever sent: no engine could file them.
type oracle struct {
	mu   sync.Mutex
	rows map[string]map[string]string // table → key → canonical row
	gone map[string]map[string]bool   // table → key
}

// newOracle returns an oracle that knows of no row yet.
func newOracle() *oracle {
	o := &oracle{rows: map[string]map[string]string{}, gone: map[string]map[string]bool{}}
	for _, t := range recordTables {
		o.rows[t.name], o.gone[t.name] = map[string]string{}, map[string]bool{}
	}
	return o
}

// note records the rows a register's file holds now.
func (o *oracle) note(table string, rows []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range rows {
		o.rows[table][r[:keyLen]] = r
	}
}

// lose records rows a restored disk lost before they were sent.
func (o *oracle) lose(table string, keys []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range keys {
		o.gone[table][k] = true
	}
}

// written returns the rows of table written, and those gone with a disk.
func (o *oracle) written(table string) (map[string]string, map[string]bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.rows[table]), maps.Clone(o.gone[table])
}

// openFile opens a register's file for the soak's reading.
func openFile(path string) (*sql.DB, error) {
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?_pragma=busy_timeout(10000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// fileRecords reads a register file's records of table.
func fileRecords(ctx context.Context, db *sql.DB, table string) ([]string, error) {
	for _, t := range recordTables {
		if t.name == table {
			return shopcheck.SQLiteRows(ctx, db, "SELECT "+t.cols+" FROM "+t.name)
		}
	}
	return nil, fmt.Errorf("soak: no record table %s", table)
}

// filedRecords reads the head office's records of table.
func filedRecords(ctx context.Context, pool *pgxpool.Pool, table string) ([]string, error) {
	for _, t := range recordTables {
		if t.name == table {
			return shopcheck.PoolRows(ctx, pool, "SELECT "+t.cols+" FROM shop."+t.name)
		}
	}
	return nil, fmt.Errorf("soak: no record table %s", table)
}

// filing is how the head office's records of one table compare with
// what the registers wrote.
type filing struct {
	table      string
	written    int
	lost       []string // written, not filed: keys
	extra      []string // filed, never written: keys
	differing  []string // filed with other contents: keys
	duplicated []string // filed more than once: keys
	gone       int      // lost with every copy put back to an older one: no engine could file them
}

// compareFiling compares the rows filed with those written (gone: lost
// with a disk before they were ever sent).
func compareFiling(table string, written map[string]string, gone map[string]bool, filed []string) filing {
	f := filing{table: table, written: len(written), gone: len(gone)}
	seen := map[string]int{}
	for _, row := range filed {
		key := row[:keyLen]
		seen[key]++
		if seen[key] == 2 {
			f.duplicated = append(f.duplicated, key)
		}
		want, ok := written[key]
		switch {
		case !ok:
			f.extra = append(f.extra, key)
		case want != row && seen[key] == 1:
			f.differing = append(f.differing, key)
		}
	}
	for key := range written {
		if seen[key] == 0 && !gone[key] {
			f.lost = append(f.lost, key)
		}
	}
	slices.Sort(f.lost)
	return f
}

// broken names the first promises the filing breaks, or none.
func (f filing) broken() []string {
	var out []string
	say := func(what string, keys []string) {
		if len(keys) > 0 {
			out = append(out, fmt.Sprintf("%s: %d %s, first %s", f.table, len(keys), what, keys[0]))
		}
	}
	say("written by a register and never filed (lost)", f.lost)
	say("filed but never written by a register", f.extra)
	say("filed with other contents than written", f.differing)
	say("filed more than once", f.duplicated)
	return out
}
