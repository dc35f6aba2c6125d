// Command conformance runs the magicsync conformance kit against a replica:
//
//	go run ./conformance -replica "<command>" [-database <postgres url>]
//
// It starts a head office of its own over a fresh PostgreSQL database,
// starts the replica with the environment package conformance/kit
// describes, runs every case and prints one line per case: PASS or FAIL,
// its name, and why it failed. It exits 0 when every case passed, 1 when
// one failed, and 2 when it could not run them (a flag missing, no
// PostgreSQL, a replica that would not start).
//
// Without -database it uses $DATABASE_URL, else the local server on
// 127.0.0.1:5432, else a throwaway cluster of the local PostgreSQL
// binaries. Its command line is package internal/kitcmd's, shared with
// the NATS transport's conformance command.
package main

import (
	"os"

	"github.com/magicsync/magicsync/internal/kitcmd"
)

func main() {
	os.Exit(kitcmd.Command{}.Run(os.Args[1:], os.Stdout, os.Stderr))
}
