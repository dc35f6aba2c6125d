// Command sizefloor is the baseline of benchmark 15: a program of
// modernc.org/sqlite and net/http's client alone, what any register's
// program holds before the engine. It opens the SQLite file its first
// argument names and GETs the address its second names; the benchmark
// only builds it.
package main

import (
	"database/sql"
	"fmt"
	"net/http"
	"os"

	_ "modernc.org/sqlite"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: sizefloor FILE.db URL")
		os.Exit(2)
	}
	db, err := sql.Open("sqlite", os.Args[1])
	if err == nil {
		err = db.Ping()
	}
	if err == nil {
		var resp *http.Response
		if resp, err = http.Get(os.Args[2]); err == nil {
			err = resp.Body.Close()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
