// This file holds the test that decode_gen.go is what its generator makes
// of sync.proto's descriptors today.

package wire

import (
	"bytes"
	"os"
	"testing"

	"github.com/magicsync/magicsync/internal/wire/internal/gen"
)

// TestGeneratedBuildersAreCurrent fails when decode_gen.go is stale: when
// sync.proto (and so syncpb) changed and go generate was not run again.
func TestGeneratedBuildersAreCurrent(t *testing.T) {
	want, err := gen.Source()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(gen.File)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run go generate ./internal/wire/", gen.File)
	}
}
