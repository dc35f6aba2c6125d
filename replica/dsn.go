// Opening a replica's SQLite file: the DSN that gives every connection the
// settings New requires, for either of the drivers the engine is tested
// on, and which of them the program registered.

package replica

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"slices"
)

// The names the two SQLite drivers the engine is tested on register with
// database/sql. The engine imports neither; the program imports one.
const (
	// DriverModernc is modernc.org/sqlite's, in pure Go.
	DriverModernc = "sqlite"
	// DriverMattn is github.com/mattn/go-sqlite3's, through cgo.
	DriverMattn = "sqlite3"
)

// ErrNoDriver is returned by SQLiteDriver, and wrapped by DSN's errors,
// when the program registered neither SQLite driver (or, for DSN, names
// another).
var ErrNoDriver = errors.New("magicsync/replica: no SQLite driver the engine knows is registered")

// SQLiteDriver returns the name of the SQLite driver the program
// registered with database/sql (by importing it): DriverModernc when it
// did, else DriverMattn; ErrNoDriver when neither.
func SQLiteDriver() (string, error) {
	drivers := sql.Drivers()
	for _, d := range []string{DriverModernc, DriverMattn} {
		if slices.Contains(drivers, d) {
			return d, nil
		}
	}
	return "", fmt.Errorf(`%w: import _ "modernc.org/sqlite" (pure Go) or _ "github.com/mattn/go-sqlite3" (cgo)`, ErrNoDriver)
}

// DSN returns the data source name that opens the SQLite file at path
// (created when missing) with the settings New requires of every pooled
// connection — journal_mode WAL, synchronous FULL, recursive_triggers on —
// and those the engine counts on beside them: foreign_keys on and a busy
// timeout of 5 s. driver is the name the SQLite driver registered:
// DriverModernc ("sqlite", whose DSN says _pragma=name(value)) or
// DriverMattn ("sqlite3", whose DSN says _name=value); empty means
// SQLiteDriver's. Any other is refused, wrapping ErrNoDriver.
//
//	dsn, err := replica.DSN(replica.DriverModernc, "register.db")
//	...
//	db, err := sql.Open(replica.DriverModernc, dsn)
func DSN(driver, path string) (string, error) {
	if driver == "" {
		d, err := SQLiteDriver()
		if err != nil {
			return "", err
		}
		driver = d
	}
	var params string
	switch driver {
	case DriverModernc:
		params = "_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=recursive_triggers(1)" +
			"&_pragma=foreign_keys(1)&_pragma=busy_timeout(5000)"
	case DriverMattn:
		params = "_journal_mode=WAL&_synchronous=FULL&_recursive_triggers=1&_foreign_keys=1&_busy_timeout=5000"
	default:
		return "", fmt.Errorf("%w: driver %q is neither %q (modernc.org/sqlite) nor %q (github.com/mattn/go-sqlite3): "+
			"write its DSN by hand, with the settings New names", ErrNoDriver, driver, DriverModernc, DriverMattn)
	}
	// A file: URI, so that both drivers keep the parameters apart from the
	// path; the path is escaped for '?', '#', '%' and spaces.
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + params, nil
}
