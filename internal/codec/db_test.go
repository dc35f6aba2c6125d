// This file holds the tests that take rows through SQLite (both drivers)
// and PostgreSQL and read them back, through ScanValues and Scan.

package codec_test

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync"
	"github.com/magicsync/magicsync/internal/codec"
	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/shoptest"
	"github.com/magicsync/magicsync/internal/sqlitetest"
	"github.com/magicsync/magicsync/internal/wire"
)

// dbFixture is a row to write to a real database, by the engine's way
// (binding tc.Args) and by the host's (binding the Go fields).
type dbFixture struct {
	name string
	row  allTypes
}

// dbFixtures are fullRow, zeroRow and nullRow as both databases can hold
// them: no NUL in text (PostgreSQL refuses it), decimals spelled as
// PostgreSQL prints them, and times in other zones with nanoseconds.
func dbFixtures() []dbFixture {
	full := fullRow()
	full.S = "héllo wörld ✓"
	full.GDec = sql.Null[Decimal]{V: mustDecimal("1000"), Valid: true}
	full.T = time.Date(2024, 3, 10, 1, 2, 3, 123456789, time.FixedZone("UTC-7", -7*3600))
	full.PT = ptr(time.Date(2023, 10, 29, 2, 30, 0, 999, time.FixedZone("CEST", 2*3600)))
	full.NT = sql.NullTime{Time: time.Date(1969, 7, 20, 20, 17, 40, 999999999, time.FixedZone("", -5*3600)), Valid: true}
	return []dbFixture{{"full", full}, {"zeros", zeroRow()}, {"nulls", nullRow()}}
}

// canonicalRow is what a row reads back as: every time at whole
// microseconds (rounded down) and in UTC.
func canonicalRow(r allTypes) allTypes {
	micro := func(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }
	r.T = micro(r.T)
	if r.PT != nil {
		r.PT = ptr(micro(*r.PT))
	}
	r.NT.Time = micro(r.NT.Time)
	r.GT.V = micro(r.GT.V)
	return r
}

// hostArgs are the row's Go field values, bound as a host binds them.
func hostArgs(tc *codec.TableCodec, row allTypes) []any {
	rv := reflect.ValueOf(row)
	args := make([]any, len(tc.Columns))
	for i, c := range tc.Columns {
		args[i] = rv.FieldByName(c.Field).Interface()
	}
	return args
}

// rowsOf is what *sql.Rows and pgx.Rows have in common, for these tests.
type rowsOf interface {
	magicsync.Scanner
	Next() bool
	Err() error
}

// testDB is one database under test, SQLite or PostgreSQL.
type testDB struct {
	label       string
	columnType  func(i int, c codec.Column) string
	placeholder func(i int) string
	exec        func(t *testing.T, query string, args ...any)
	query       func(t *testing.T, query string, read func(rowsOf))
}

func sqliteDB(label string, db *sql.DB) testDB {
	return testDB{
		label: label,
		columnType: func(i int, c codec.Column) string {
			switch c.Kind {
			case wire.Int, wire.Bool:
				return "INTEGER"
			case wire.Float:
				return "REAL"
			case wire.Bytes:
				return "BLOB"
			case wire.Time:
				// Both of the declared types SQLite drivers read as times.
				if i%2 == 0 {
					return "TIMESTAMP"
				}
				return "DATETIME"
			}
			return "TEXT" // text, uuids and decimals
		},
		placeholder: func(int) string { return "?" },
		exec: func(t *testing.T, query string, args ...any) {
			t.Helper()
			if _, err := db.Exec(query, args...); err != nil {
				t.Fatalf("%s: %s: %v", label, query, err)
			}
		},
		query: func(t *testing.T, query string, read func(rowsOf)) {
			t.Helper()
			rows, err := db.Query(query)
			if err != nil {
				t.Fatalf("%s: %s: %v", label, query, err)
			}
			defer rows.Close()
			read(rows)
			if err := rows.Err(); err != nil {
				t.Fatalf("%s: %s: %v", label, query, err)
			}
		},
	}
}

func postgresDB(pool *pgxpool.Pool) testDB {
	ctx := context.Background()
	return testDB{
		label: "postgres",
		columnType: func(_ int, c codec.Column) string {
			switch c.Kind {
			case wire.Int:
				return "bigint"
			case wire.Bool:
				return "boolean"
			case wire.Float:
				return "double precision"
			case wire.Bytes:
				return "bytea"
			case wire.Time:
				return "timestamptz"
			case wire.UUID:
				return "uuid"
			case wire.Decimal:
				return "numeric"
			}
			return "text"
		},
		placeholder: func(i int) string { return fmt.Sprintf("$%d", i+1) },
		exec: func(t *testing.T, query string, args ...any) {
			t.Helper()
			if _, err := pool.Exec(ctx, query, args...); err != nil {
				t.Fatalf("postgres: %s: %v", query, err)
			}
		},
		query: func(t *testing.T, query string, read func(rowsOf)) {
			t.Helper()
			rows, err := pool.Query(ctx, query)
			if err != nil {
				t.Fatalf("postgres: %s: %v", query, err)
			}
			defer rows.Close()
			read(rows)
			if err := rows.Err(); err != nil {
				t.Fatalf("postgres: %s: %v", query, err)
			}
		},
	}
}

func createAllTypes(t *testing.T, db testDB, tc *codec.TableCodec) {
	t.Helper()
	defs := make([]string, len(tc.Columns))
	for i, c := range tc.Columns {
		defs[i] = codec.QuoteIdent(c.Name) + " " + db.columnType(i, c)
		if c.Name == "id" {
			defs[i] += " PRIMARY KEY"
		}
	}
	db.exec(t, "CREATE TABLE "+codec.QuoteIdent(tc.Name)+" ("+strings.Join(defs, ", ")+")")
}

// insertFixtures writes each fixture twice: id 10k+1 bound by the engine's
// way (tc.Args), id 10k+2 by the host's (the Go fields themselves). It
// returns the rows as they should read back, by id.
func insertFixtures(t *testing.T, db testDB, tc *codec.TableCodec) map[int64]allTypes {
	t.Helper()
	marks := make([]string, len(tc.Columns))
	for i := range marks {
		marks[i] = db.placeholder(i)
	}
	insert := "INSERT INTO " + codec.QuoteIdent(tc.Name) + " (" + quotedColumns(tc, "") +
		") VALUES (" + strings.Join(marks, ", ") + ")"
	want := map[int64]allTypes{}
	for k, f := range dbFixtures() {
		engine, host := f.row, f.row
		engine.ID, host.ID = int64(10*k+1), int64(10*k+2)
		args, err := tc.Args(engine, nil)
		if err != nil {
			t.Fatalf("%s: Args: %v", f.name, err)
		}
		db.exec(t, insert, args...)
		db.exec(t, insert, hostArgs(tc, host)...)
		want[engine.ID], want[host.ID] = canonicalRow(engine), canonicalRow(host)
	}
	return want
}

// quotedColumns is the select list of every column; time columns are
// wrapped by wrapTime when it is not empty.
func quotedColumns(tc *codec.TableCodec, wrapTime string) string {
	cols := make([]string, len(tc.Columns))
	for i, c := range tc.Columns {
		cols[i] = codec.QuoteIdent(c.Name)
		if wrapTime != "" && c.Kind == wire.Time {
			cols[i] = fmt.Sprintf(wrapTime, cols[i])
		}
	}
	return strings.Join(cols, ", ")
}

// checkReadBack reads every row back, with Scan[allTypes] and with
// ScanValues, and compares it with what was written.
func checkReadBack(t *testing.T, db testDB, c *magicsync.Codecs, tc *codec.TableCodec, want map[int64]allTypes, wrapTime string) {
	t.Helper()
	selectAll := "SELECT " + quotedColumns(tc, wrapTime) + " FROM " + codec.QuoteIdent(tc.Name) + " ORDER BY id"

	n := 0
	db.query(t, selectAll, func(rows rowsOf) {
		for rows.Next() {
			got, err := magicsync.Scan[allTypes](c, rows)
			if err != nil {
				t.Fatalf("%s: Scan: %v", db.label, err)
			}
			n++
			w, ok := want[got.ID]
			if !ok {
				t.Errorf("%s: read back id %d, which was not written", db.label, got.ID)
				continue
			}
			if !reflect.DeepEqual(got, w) {
				t.Errorf("%s: row %d (%s, %s) does not read back as written:", db.label, got.ID, fixtureName(got.ID), writer(got.ID))
				diffFields(t, got, w)
			}
		}
	})
	if n != len(want) {
		t.Errorf("%s: Scan read %d rows, want %d", db.label, n, len(want))
	}

	n = 0
	db.query(t, selectAll, func(rows rowsOf) {
		for rows.Next() {
			got, err := tc.ScanValues(rows, nil, nil)
			if err != nil {
				t.Fatalf("%s: ScanValues: %v", db.label, err)
			}
			n++
			id := got[0].I
			w, err := tc.Values(want[id], nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if !got[i].Equal(w[i]) {
					t.Errorf("%s: row %d (%s, %s) column %q: ScanValues gives %+v, want %+v",
						db.label, id, fixtureName(id), writer(id), tc.Columns[i].Name, got[i], w[i])
				}
			}
			// Both ways of writing are the same canonical row, key included.
			if tc.KeyOfRow(got) != codec.KeyOfValues(wire.IntValue(id)) {
				t.Errorf("%s: row %d: KeyOfRow = %v", db.label, id, tc.KeyOfRow(got))
			}
		}
	})
	if n != len(want) {
		t.Errorf("%s: ScanValues read %d rows, want %d", db.label, n, len(want))
	}

	// A subset of the columns, in another order, through idx.
	idx := []int{columnIndex(t, tc, "t"), columnIndex(t, tc, "id"), columnIndex(t, tc, "ps")}
	sub := "SELECT " + strings.Join(tc.ColumnNames(idx), ", ") + " FROM " + codec.QuoteIdent(tc.Name) + " ORDER BY id"
	if wrapTime != "" {
		sub = strings.Replace(sub, "SELECT t,", "SELECT "+fmt.Sprintf(wrapTime, "t")+",", 1)
	}
	db.query(t, sub, func(rows rowsOf) {
		for rows.Next() {
			got, err := tc.ScanValues(rows, idx, nil)
			if err != nil {
				t.Fatalf("%s: ScanValues(idx): %v", db.label, err)
			}
			w, _ := tc.Values(want[got[1].I], nil)
			for i, j := range idx {
				if !got[i].Equal(w[j]) {
					t.Errorf("%s: ScanValues(idx) column %q: %+v, want %+v", db.label, tc.Columns[j].Name, got[i], w[j])
				}
			}
		}
	})
}

func fixtureName(id int64) string { return dbFixtures()[id/10].name }

func writer(id int64) string {
	if id%10 == 1 {
		return "bound by tc.Args"
	}
	return "bound by the host"
}

func TestRowsRoundTripThroughSQLiteWithEachDriver(t *testing.T) {
	c := mustCodecs(t, allTypes{})
	tc := mustTable[allTypes](t, c)
	sqlitetest.ForEach(t, func(t *testing.T, d sqlitetest.Driver) {
		db := sqliteDB(d.Label, sqlitetest.Open(t, d))
		createAllTypes(t, db, tc)
		want := insertFixtures(t, db, tc)
		checkReadBack(t, db, c, tc, want, "")
	})
}

// TestSQLiteFileReadsTheSameThroughEitherDriver writes a file with one
// driver and reads it with the other. Time columns are read as
// CAST(… AS TEXT): mattn turns a TIMESTAMP it cannot parse (modernc writes
// time.Time.String()) into the zero time, silently; as text, every driver
// hands back what was stored, and Canonical reads each driver's spelling.
func TestSQLiteFileReadsTheSameThroughEitherDriver(t *testing.T) {
	c := mustCodecs(t, allTypes{})
	tc := mustTable[allTypes](t, c)
	for _, w := range sqlitetest.Drivers() {
		for _, r := range sqlitetest.Drivers() {
			t.Run(w.Label+"_to_"+r.Label, func(t *testing.T) {
				path := sqlitetest.NewPath(t)
				writing := sqliteDB(w.Label, sqlitetest.OpenPath(t, w, path, sqlitetest.Safe()))
				createAllTypes(t, writing, tc)
				want := insertFixtures(t, writing, tc)
				reading := sqliteDB(w.Label+" read by "+r.Label, sqlitetest.OpenPath(t, r, path, sqlitetest.Safe()))
				checkReadBack(t, reading, c, tc, want, "CAST(%s AS TEXT)")
			})
		}
	}
}

func TestRowsRoundTripThroughPostgreSQL(t *testing.T) {
	t.Parallel()
	c := mustCodecs(t, allTypes{})
	tc := mustTable[allTypes](t, c)
	db := postgresDB(pgtest.NewPool(t))
	createAllTypes(t, db, tc)
	want := insertFixtures(t, db, tc)
	checkReadBack(t, db, c, tc, want, "")
}

func TestScanOfAPointerTypeReturnsANewRow(t *testing.T) {
	c := mustCodecs(t, product{})
	tc := mustTable[product](t, c)
	db := sqliteDB("modernc", sqlitetest.Open(t, sqlitetest.Modernc()))
	db.exec(t, shoptest.SQLiteProducts)
	in := product{ID: uid1, ShopID: uid2, Name: "tea", PriceCents: 250, UpdatedAt: at}
	args, err := tc.Args(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.exec(t, `INSERT INTO products VALUES (?, ?, ?, ?, ?)`, args...)
	db.query(t, `SELECT id, shop_id, name, price_cents, updated_at FROM products`, func(rows rowsOf) {
		if !rows.Next() {
			t.Fatal("no row")
		}
		got, err := magicsync.Scan[*product](c, rows)
		if err != nil {
			t.Fatal(err)
		}
		if got == nil || *got != in {
			t.Errorf("Scan[*product] = %+v, want &%+v", got, in)
		}
	})
}
