// Command wiregen writes internal/wire's decode_gen.go, the decoder's
// message builders, from the descriptors of sync.proto (package gen says
// what it holds). Package wire runs it with go generate:
//
//	go generate ./internal/wire/
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/magicsync/magicsync/internal/wire/internal/gen"
)

func main() {
	out := flag.String("o", gen.File, "the file to write")
	flag.Parse()
	src, err := gen.Source()
	if err == nil {
		err = os.WriteFile(*out, src, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wiregen:", err)
		os.Exit(1)
	}
}
